// node --test clients/js/test: against the real agent. The kiosk example
// (examples/kiosk.mjs, a node process keeping its run in a directory) acts
// on the hub's /publish?lead=200ms broadcasts through subscribe(), is
// killed with SIGKILL mid-run and started again with the same name and
// directory, then stops: the agent stores the run's every event exactly
// once (its record count is the kiosk's final acknowledgement, which is
// every event the run wrote). The agent: SKEWSCOPE_AGENT, else this
// repository's target/debug (or release) build; skipped without one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const AGENT =
  process.env.SKEWSCOPE_AGENT ??
  ["debug", "release"]
    .map((profile) => fileURLToPath(new URL(`../../../target/${profile}/skewscope-agent`, import.meta.url)))
    .find((path) => existsSync(path)) ??
  "target/debug/skewscope-agent";
const KIOSK = fileURLToPath(new URL("../examples/kiosk.mjs", import.meta.url));

/** A child process's stdout as JSON lines, awaited by condition. */
class Lines {
  constructor(child, what) {
    this.child = child;
    this.what = what;
    this.lines = [];
    this.waiters = new Set();
    let rest = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => {
      rest += chunk;
      let at;
      while ((at = rest.indexOf("\n")) >= 0) {
        const line = rest.slice(0, at);
        rest = rest.slice(at + 1);
        let value = line;
        try {
          value = JSON.parse(line);
        } catch {
          // a plain line (the agent's)
        }
        this.lines.push(value);
      }
      for (const wake of this.waiters) wake();
    });
    child.on("exit", () => {
      this.exited = true;
      for (const wake of this.waiters) wake();
    });
  }

  /** The first line for which `pred` holds, within `ms`. */
  until(pred, ms, label) {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.lines.find((l) => {
          try {
            return pred(l);
          } catch {
            return false;
          }
        });
        if (found !== undefined) return done(() => resolve(found));
        if (this.exited) return done(() => reject(new Error(`${this.what} exited before ${label}: ${JSON.stringify(this.lines)}`)));
      };
      const timer = setTimeout(() => done(() => reject(new Error(`${this.what}: no ${label} in ${ms} ms: ${JSON.stringify(this.lines)}`))), ms);
      const done = (then) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        then();
      };
      this.waiters.add(check);
      check();
    });
  }
}

function exited(child) {
  return child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((r) => child.once("exit", r));
}

test(
  "the real agent: a kiosk acting on /publish broadcasts, SIGKILLed and started again, has every event stored exactly once",
  { skip: existsSync(AGENT) ? false : `no agent at ${AGENT} (build it, or set SKEWSCOPE_AGENT)`, timeout: 240_000 },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), "skewscope-js-agent-"));
    const children = [];
    try {
      const agent = spawn(AGENT, ["--listen", "127.0.0.1:0", "--data-dir", join(dir, "data")], {
        stdio: ["ignore", "pipe", openSync(join(dir, "agent.stderr"), "w")],
      });
      children.push(agent);
      const agentLines = new Lines(agent, "the agent");
      const listening = await agentLines
        .until((l) => typeof l === "string" && l.startsWith("listening on "), 60_000, "its address")
        .catch((e) => assert.fail(`${e.message}\n${readFileSync(join(dir, "agent.stderr"), "utf8").slice(-2000)}`));
      const addr = listening.slice("listening on ".length).trim();
      const http = `http://${addr}`;

      // Node 20.10-21 has its WebSocket behind a flag; before that, the kiosk
      // takes the ws package (Debian's node-ws, which ./test installs there).
      const flags =
        typeof WebSocket === "undefined" && process.allowedNodeEnvironmentFlags.has("--experimental-websocket")
          ? ["--experimental-websocket"]
          : [];
      const kiosk = (label) => {
        const child = spawn(process.execPath, [...flags, KIOSK, `ws://${addr}`, "kiosk-js", join(dir, "state")], {
          stdio: ["pipe", "pipe", "inherit"],
        });
        children.push(child);
        return { child, lines: new Lines(child, label) };
      };
      let sent = 0;
      const publish = async () => {
        sent += 1;
        const r = await fetch(`${http}/publish?lead=200ms`, { method: "POST", body: JSON.stringify({ type: "go", n: sent }) });
        assert.equal(r.status, 200, await r.text());
      };

      // The first process: three actions, then killed.
      const one = kiosk("kiosk 1");
      const synced = await one.lines.until((l) => l.run, 60_000, "its sync");
      assert.equal(synced.resumed, false);
      const first = await one.lines.until((l) => l.open !== undefined, 30_000, "the hub");
      for (let i = 0; i < 3; i++) {
        await publish();
        await one.lines.until((l) => l.acted === i + 1, 30_000, `action ${i + 1}`);
      }
      one.child.kill("SIGKILL");
      await exited(one.child);

      // The same name and directory again: the run resumes, on a new connection.
      const two = kiosk("kiosk 2");
      const again = await two.lines.until((l) => l.run, 60_000, "its sync");
      assert.equal(again.run, synced.run, "the same run");
      assert.equal(again.resumed, true);
      const second = await two.lines.until((l) => l.open !== undefined, 30_000, "the hub");
      assert.ok(second.open > first.open, `connection ${second.open} after ${first.open}`);
      for (let i = 0; i < 2; i++) {
        await publish();
        await two.lines.until((l) => l.acted === i + 1, 30_000, `action ${i + 4}`);
      }
      // `late` is the timer's error here (this machine may be busy): only sane.
      assert.ok(two.lines.lines.filter((l) => l.acted).every((l) => l.late >= 0 && l.late < 10_000), JSON.stringify(two.lines.lines));
      two.child.stdin.write("stop\n");
      const closed = await two.lines.until((l) => l.closed !== undefined, 30_000, "its close");
      await exited(two.child);
      assert.equal(closed.closed, true, JSON.stringify(closed));
      assert.equal(closed.upload.acked, closed.upload.events);
      assert.equal(closed.upload.dropped, 0);
      assert.equal(closed.upload.refusedAcks, 0);
      assert.ok(!two.lines.lines.some((l) => l.uploaderror), JSON.stringify(two.lines.lines));

      // What the agent stored: the run, every record once.
      const status = await (await fetch(`${http}/audit/status`)).json();
      const run = status.probes.find((p) => p.run === synced.run);
      assert.ok(run, JSON.stringify(status.probes));
      assert.equal(run.name, "kiosk-js");
      assert.equal(run.records, closed.upload.events, "every event the run wrote, stored once");
      const health = await (await fetch(`${http}/healthz`)).json();
      const rejected = health.ingest?.rejected ?? {};
      assert.ok(Object.values(rejected).every((n) => n === 0), JSON.stringify(health.ingest));
      assert.deepEqual(readdirSync(join(dir, "state")), [], "the run left the kiosk's storage");
      agent.kill("SIGTERM");
      await exited(agent);
    } finally {
      for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
      await Promise.all(children.map(exited));
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
