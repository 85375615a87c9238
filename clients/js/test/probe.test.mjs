// node --test clients/js/test: the browser probe page's script (probe/probe.js)
// under stand-ins for a page's globals and the fake agent: its hello carries
// the run's secret (kept across a reload), and after each action it writes
// the frame the action was drawn in. The real thing runs in Chromium in
// collector/tests/browser_probe.rs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { webcrypto } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { FakeAgent, mapStorage, refusal, until } from "./fakes.mjs";

/** probe.js with its import of the agent's /skewscope-clock.js pointed at this repository's. */
function probeCopy() {
  const source = readFileSync(new URL("../probe/probe.js", import.meta.url), "utf8");
  const module = new URL("../skewscope-clock.js", import.meta.url).href;
  const rewritten = source.replace('from "/skewscope-clock.js"', `from ${JSON.stringify(module)}`);
  assert.notEqual(rewritten, source);
  // .mjs: a module wherever it is (node before 20.19 reads a bare .js as CommonJS).
  const path = join(mkdtempSync(join(tmpdir(), "skewscope-probe-")), "probe.mjs");
  writeFileSync(path, rewritten);
  return pathToFileURL(path).href;
}

/** A page element: what the script writes and the stop button's handler. */
function element() {
  return {
    textContent: "",
    className: "",
    handlers: {},
    addEventListener(type, fn) {
      this.handlers[type] = fn;
    },
  };
}

test("the browser probe: the hello carries the run's secret, kept across a reload; each action is followed by its frame", async () => {
  const agent = new FakeAgent();
  const elements = new Map();
  const frames = [];
  Object.assign(globalThis, {
    location: { search: "?url=ws://agent.test:8080/ws&name=lobby&act-at=/at&act-unit=ms", protocol: "http:", host: "agent.test:8080" },
    document: { getElementById: (id) => elements.get(id) ?? elements.set(id, element()).get(id), visibilityState: "visible" },
    localStorage: mapStorage(),
    navigator: { userAgent: "test page" },
    requestAnimationFrame: (cb) => {
      frames.push(cb);
      setTimeout(() => cb(performance.now()), 16);
    },
    WebSocket: agent.socketClass("page-1"),
  });
  // A page's Web Crypto; node 18 has it in node:crypto only.
  globalThis.crypto ??= webcrypto;
  const url = probeCopy();
  const seen = () =>
    JSON.stringify({
      refusals: agent.refusals,
      sockets: [...agent.sockets].map((ws) => `${ws.tag} ${ws.path} ${ws.readyState}`),
      stored: [...agent.runs.values()].map((r) => r.events.length),
      batches: agent.batches,
      page: Object.fromEntries([...elements].map(([k, v]) => [k, v.textContent])),
    });
  try {
  await import(url);
  await until(() => agent.hellos.length >= 1 && globalThis.document.getElementById("state").textContent === "running", 20_000, () => `the page running (${seen()})`);
  const { runId, secret } = agent.hellos[0];
  assert.match(secret, /^[0-9a-f]{32}$/);
  assert.notEqual(secret, runId);
  const saved = JSON.parse(globalThis.localStorage.getItem("skewscope-probe:lobby"));
  assert.equal(saved.secret, secret, "kept with the run");
  for (const el of elements.values()) assert.ok(!el.textContent.includes(secret), "never shown");

  const events = () => agent.runs.get(runId)?.events ?? [];
  await until(() => agent.hub.size === 1, 10_000, "the page on the hub");
  const text = JSON.stringify({ go: 1, at: performance.timeOrigin + performance.now() + agent.offsetMs + 40 });
  agent.broadcast(text);
  await until(() => events().some((e) => e.kind === "frame"), 10_000, "the frame event");
  const action = events().find((e) => e.kind === "action");
  const frame = events().find((e) => e.kind === "frame");
  assert.deepEqual(Object.keys(frame).sort(), ["conn", "frame_ms", "kind", "message"]);
  assert.equal(frame.conn, action.conn);
  assert.deepEqual(frame.message, action.message);
  assert.deepEqual(action.message, { text, occurrence: 0 });
  assert.ok(frame.frame_ms >= action.done_ms, `${frame.frame_ms} vs ${action.done_ms}`);
  assert.ok(events().indexOf(frame) > events().indexOf(action));
  assert.ok(!JSON.stringify(events()).includes(secret));

  // A reload: the page before is gone (its sockets with it); the new one resumes the run, with its secret.
  agent.sever("page-1");
  globalThis.WebSocket = agent.socketClass("page-2");
  await import(`${url}?reload`);
  await until(() => agent.hellos.length >= 2, 10_000, "the reloaded page's hello");
  assert.deepEqual(agent.hellos.at(-1), { runId, secret });
  await until(() => agent.hub.size === 1 && events().some((e) => e.reason === "page reloaded"), 10_000, "the reload recorded");
  agent.broadcast(JSON.stringify({ go: 2, at: performance.timeOrigin + performance.now() + agent.offsetMs + 20 }));
  await until(() => events().filter((e) => e.kind === "frame").length === 2, 10_000, "the second frame");
  globalThis.document.getElementById("stop").handlers.click();
  // (The page's clock goes on after its stop, and so do its exchange events.)
  await until(() => events().some((e) => e.kind === "stopped"), 20_000, () => `stopped stored (${seen()})`);
  assert.equal(events().filter((e) => e.kind === "stopped").length, 1);
  for (const e of events()) assert.equal(refusal(e), null, JSON.stringify(e));
  assert.deepEqual(agent.refusals, []);
  } finally {
    // The pages' sockets go: their timers run out, and this process ends.
    agent.sever("page-1");
    agent.sever("page-2");
    rmSync(dirname(fileURLToPath(url)), { recursive: true, force: true });
  }
});
