// node --test clients/js/test: a named clock records the app's own actions
// and uploads them to /ingest exactly once, against the fake agent of
// fakes.mjs (acks, lost acks, busy, acks too high and too low, a kill and a
// restart, a full storage). Every wait is on a condition, bounded in time.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { connectClock } from "../skewscope-clock.js";
import { FakeAgent, killableEnv, mapStorage, refusal, until } from "./fakes.mjs";

const CLOCK = "ws://agent.test:8080/clock";
const HUB = "ws://agent.test:8080/ws";

/** Every clock a test opened: a test that fails before its close() must not leave its timers running (node would wait for them, and the run would never end). */
const opened = new Set();

after(async () => {
  await Promise.all([...opened].map((clock) => clock.close().catch(() => {})));
});

async function connect(agent, { name = "lobby-tv", storage = mapStorage(), tag = "", env = killableEnv(), token } = {}) {
  const clock = await connectClock(CLOCK, { name, storage, token, WebSocketImpl: agent.socketClass(tag), env });
  opened.add(clock);
  return clock;
}

/** The run as the agent stored it. */
function stored(agent, runId) {
  return agent.runs.get(runId)?.events ?? [];
}

/** The events kept in `storage` (not yet acknowledged) of `kind`. */
function kept(storage, kind) {
  return [...storage.map.values()].filter((v) => v.startsWith(`{"kind":"${kind}"`)).length;
}

test("a named clock uploads its run: started, identity, app, clock_tags, exchanges; close writes stopped and empties storage", async () => {
  const agent = new FakeAgent();
  const storage = mapStorage();
  const clock = await connect(agent, { storage });
  assert.match(clock.runId, /^[0-9a-f]{32}$/);
  await until(() => stored(agent, clock.runId).length >= 6, 10_000, "exchanges stored");
  const events = stored(agent, clock.runId);
  assert.deepEqual(events.slice(0, 4).map((e) => e.kind), ["started", "identity", "app", "clock_tags"]);
  assert.ok(events.slice(4).every((e) => e.kind === "exchange"), JSON.stringify(events));
  const [started, identity, app, tags] = events;
  assert.deepEqual(
    { ...started, at_ms: 0 },
    { kind: "started", name: "lobby-tv", url: CLOCK, connections: 0, version: "skewscope-clock.js 1", at_ms: 0 },
  );
  assert.equal(identity.run_id, clock.runId);
  assert.match(identity.clock_id, /^page-[0-9a-f]{16}$/);
  assert.deepEqual(app, { kind: "app", module: "skewscope-clock.js 1", runtime: `node ${process.version}` });
  assert.equal(tags.keyed, false);
  assert.equal(tags.refused, 0);
  for (const x of events.slice(4)) assert.ok(x.t1_ms <= x.t4_ms && x.t2_ms <= x.t3_ms, JSON.stringify(x));

  // The upload: /ingest on the clock's host, the secret in the hello only.
  const ingest = [...agent.sockets].find((ws) => ws.path === "/ingest");
  assert.equal(ingest.url, "ws://agent.test:8080/ingest");
  assert.deepEqual(ingest.protocols, ["skewscope-ingest"]);
  const { secret } = agent.hellos[0];
  assert.match(secret, /^[0-9a-f]{32}$/);
  assert.notEqual(secret, clock.runId);
  assert.ok(!JSON.stringify(events).includes(secret));
  assert.ok(!JSON.stringify(clock.upload).includes(secret));

  assert.equal(await clock.close(), true, "everything stored");
  const all = stored(agent, clock.runId);
  assert.equal(all.at(-1).kind, "stopped");
  assert.equal(all.filter((e) => e.kind === "stopped").length, 1);
  assert.equal(clock.upload.events, all.length);
  assert.equal(clock.upload.acked, all.length);
  assert.equal(storage.map.size, 0, `left in storage: ${[...storage.map.keys()]}`);
  assert.deepEqual(agent.refusals, []);
  assert.equal(agent.duplicates, 0);
});

test("with a token: tagged replies only, the token offered as a subprotocol, clock_tags keyed", async () => {
  const agent = new FakeAgent({ token: "site-secret" });
  const clock = await connect(agent, { token: "site-secret" });
  assert.ok(clock.authenticated);
  await until(() => stored(agent, clock.runId).length >= 4);
  const ingest = [...agent.sockets].find((ws) => ws.path === "/ingest");
  assert.deepEqual(ingest.protocols, ["skewscope-ingest", "skewscope-bearer.site-secret"]);
  assert.equal(stored(agent, clock.runId)[3].keyed, true);
  assert.equal(await clock.close(), true);
});

test("subscribe: labelled app.RUN.CONN, stamped on read, occurrences counted; actAt records receipt and action after the callback", async () => {
  const agent = new FakeAgent();
  const clock = await connect(agent);
  const hub = clock.subscribe(HUB);
  const opened = [];
  hub.onopen = () => opened.push(hub.conn);
  await until(() => hub.readyState === 1, 10_000, "the hub connection");
  assert.deepEqual(agent.labels, [`app.${clock.runId}.0`]);
  assert.deepEqual(opened, [0]);
  const got = [];
  hub.addEventListener("message", (e) => got.push(e));
  const before = performance.timeOrigin + performance.now();
  agent.broadcast("hello");
  agent.broadcast("hello");
  const payload = JSON.stringify({ type: "go", at: clock.now() + 400 });
  agent.broadcast(payload);
  await until(() => got.length === 3, 10_000, "three messages");
  assert.deepEqual(got.map((e) => [e.data, e.conn, e.occurrence]), [["hello", 0, 0], ["hello", 0, 1], [payload, 0, 0]]);
  assert.ok(got.every((e) => e.readMs >= before && e.readMs <= performance.timeOrigin + performance.now()));

  const at = JSON.parse(payload).at;
  const acted = [];
  clock.actAt(at, (r) => acted.push({ ...r, page: performance.timeOrigin + performance.now() }), { message: got[2] });
  assert.equal(acted.length, 0, "not at once");
  await until(() => acted.length === 1, 10_000, "the action");
  assert.equal(acted[0].at, at);
  assert.ok(acted[0].late >= 0);
  const events = () => stored(agent, clock.runId);
  await until(() => events().some((e) => e.kind === "action"), 10_000, "the action stored");
  const receipt = events().find((e) => e.kind === "receipt");
  const action = events().find((e) => e.kind === "action");
  assert.deepEqual(receipt, { kind: "receipt", conn: 0, message: { text: payload, occurrence: 0 }, at_ms: got[2].readMs });
  assert.equal(action.conn, 0);
  assert.deepEqual(action.message, receipt.message);
  assert.equal(action.act_at_ms, at);
  assert.ok(Math.abs(action.offset_ms - 7) <= action.bound_ms + 0.5, JSON.stringify(action));
  assert.ok(action.bound_ms >= 0);
  assert.ok(Math.abs(action.target_ms - (at - action.offset_ms)) < 1e-6, JSON.stringify(action));
  assert.ok(action.done_ms >= action.target_ms && action.done_ms <= acted[0].page, JSON.stringify(action));
  assert.equal(action.late_ms, 0);
  const kinds = events().map((e) => e.kind);
  assert.ok(kinds.indexOf("opened") < kinds.indexOf("receipt") && kinds.indexOf("receipt") < kinds.indexOf("action"));

  // A message that came after its time: acted on at once, late by how much.
  const latePayload = JSON.stringify({ type: "go", at: clock.now() - 50 });
  agent.broadcast(latePayload);
  await until(() => got.length === 4);
  clock.actAt(JSON.parse(latePayload).at, (r) => acted.push(r), { message: got[3] });
  assert.equal(acted.length, 2, "at once, before actAt returned");
  assert.ok(acted[1].late >= 49, JSON.stringify(acted[1]));
  await until(() => events().filter((e) => e.kind === "action").length === 2);
  const late = events().filter((e) => e.kind === "action")[1];
  assert.ok(late.late_ms >= 49 && late.late_ms < 10_000, JSON.stringify(late));

  // Raw text from the app's own socket: one connection for this process, no opened event.
  for (let i = 0; i < 2; i++) clock.actAt(clock.now() + 5, (r) => acted.push(r), { message: "raw-go" });
  await until(() => events().filter((e) => e.kind === "action").length === 4, 10_000, "the raw actions");
  const raw = events().filter((e) => e.kind === "receipt" && e.conn !== 0);
  assert.deepEqual(raw.map((e) => [e.conn, e.message.occurrence]), [[1, 0], [1, 1]]);
  assert.ok(!events().some((e) => e.kind === "opened" && e.conn === 1));
  assert.ok(!events().some((e) => e.kind === "frame"), "no frame in node");

  assert.equal(await clock.close(), true);
  const end = events();
  const closed = end.filter((e) => e.kind === "closed");
  assert.deepEqual(closed.map((e) => [e.conn, e.reason]), [[0, "closed by the app"]]);
  assert.ok(end.indexOf(closed[0]) < end.length - 1 && end.at(-1).kind === "stopped");
  assert.equal(hub.readyState, 3);
  assert.deepEqual(agent.refusals, []);
});

test("in a browser: the frame the action was drawn in (the next animation frame) follows the action", async () => {
  const agent = new FakeAgent();
  const frames = [];
  const env = killableEnv({
    timeOrigin: performance.timeOrigin,
    requestAnimationFrame: (cb) => {
      frames.push(cb);
      setTimeout(() => cb(performance.now()), 8);
    },
  });
  const clock = await connect(agent, { env });
  let actedAt = null;
  clock.actAt(clock.now() + 20, () => (actedAt = performance.timeOrigin + performance.now()), { message: "show" });
  const events = () => stored(agent, clock.runId);
  await until(() => events().some((e) => e.kind === "frame"), 10_000, "the frame event");
  const action = events().find((e) => e.kind === "action");
  const frame = events().find((e) => e.kind === "frame");
  assert.equal(frames.length, 1, "one frame asked for, after the callback");
  assert.deepEqual(Object.keys(frame).sort(), ["conn", "frame_ms", "kind", "message"]);
  assert.equal(frame.conn, action.conn);
  assert.deepEqual(frame.message, action.message);
  assert.ok(frame.frame_ms >= actedAt, `${frame.frame_ms} vs ${actedAt}`);
  assert.ok(events().indexOf(frame) > events().indexOf(action));
  assert.equal(await clock.close(), true);
});

test("lost acknowledgements and dropped connections: resent from the agent's answer, stored once; /clock and the hub reconnect", async () => {
  const agent = new FakeAgent();
  const clock = await connect(agent);
  const hub = clock.subscribe(HUB);
  await until(() => hub.readyState === 1);
  const disconnects = [];
  clock.addEventListener("disconnect", () => disconnects.push(1));
  // The agent stores the next batch and its answer is lost; what follows waits behind it.
  agent.ingest = "silent";
  const batches = agent.batches;
  for (let i = 0; i < 3; i++) clock.actAt(clock.now() + 1, () => {}, { message: `m${i}` });
  await until(() => agent.batches > batches && kept(clock.recorder.storage, "action") === 3, 10_000, "a batch unanswered, actions kept");
  assert.ok(clock.upload.acked < stored(agent, clock.runId).length, "stored, not acknowledged");
  agent.ingest = "ack";
  const exchangesBefore = clock.model.size;
  agent.dropAll();
  // Connection 1 names the raw messages above; the hub's next connection is 2.
  await until(() => hub.readyState === 1 && hub.conn === 2, 10_000, "the hub again, as connection 2");
  await until(() => clock.model.size > exchangesBefore, 10_000, "exchanges again");
  await until(() => clock.upload.acked === clock.upload.events, 10_000, "every event acknowledged");
  assert.ok(disconnects.length >= 1);
  assert.deepEqual(agent.labels, [`app.${clock.runId}.0`, `app.${clock.runId}.2`]);
  assert.equal(await clock.close(), true);
  const events = stored(agent, clock.runId);
  assert.equal(events.length, clock.upload.events);
  assert.deepEqual(
    events.filter((e) => e.kind === "opened" || e.kind === "closed").map((e) => `${e.kind} ${e.conn}`),
    ["opened 0", "closed 0", "opened 2", "closed 2"],
  );
  assert.equal(events.filter((e) => e.kind === "action").length, 3);
  assert.equal(agent.duplicates, 0, "the hello's answer said what was stored");
  assert.deepEqual(agent.refusals, []);
});

test("busy: nothing is dropped, the batch is sent again after about a second", async () => {
  const agent = new FakeAgent();
  agent.ingest = "busy";
  const clock = await connect(agent);
  // The agent counts its answer as it sends it; the clock reads it a moment
  // later: wait for the clock to say so, rather than race it.
  await until(() => agent.busyAnswers >= 2 && /busy/.test(clock.upload.state), 10_000, () => `two busy answers, and the clock saying so (${agent.busyAnswers}, ${clock.upload.state})`);
  assert.equal(stored(agent, clock.runId).length, 0);
  agent.ingest = "ack";
  await until(() => stored(agent, clock.runId).length >= 4, 10_000, "stored after busy");
  assert.equal(stored(agent, clock.runId)[0].kind, "started");
  assert.equal(await clock.close(), true);
  assert.equal(stored(agent, clock.runId).length, clock.upload.events);
});

test("an acknowledgement beyond what was sent is refused and counted: nothing dropped, the upload goes on later", async () => {
  const agent = new FakeAgent();
  agent.ingest = "high";
  const problems = [];
  const clock = await connect(agent);
  clock.addEventListener("uploaderror", (e) => problems.push(e.message));
  await until(() => clock.upload.refusedAcks >= 2, 10_000, "refused acks");
  assert.equal(clock.upload.acked, 0);
  assert.ok(problems.some((p) => /beyond|only \d+ event/.test(p)), problems.join("; "));
  agent.ingest = "ack";
  assert.equal(await clock.close(), true);
  const events = stored(agent, clock.runId);
  assert.equal(events.length, clock.upload.events);
  assert.deepEqual(events.slice(0, 3).map((e) => e.kind), ["started", "identity", "app"]);
});

test("an acknowledgement below the last one: the agent lost data; said, and the run is not sent again from 0", async () => {
  const agent = new FakeAgent();
  const clock = await connect(agent);
  await until(() => clock.upload.acked >= 5, 10_000, "some acknowledged");
  const problems = [];
  clock.addEventListener("uploaderror", (e) => problems.push(e.message));
  agent.ingest = "low";
  clock.actAt(clock.now() + 1, () => {}, { message: "after" });
  await until(() => clock.upload.lost, 10_000, "the loss noticed");
  assert.ok(problems.some((p) => /lost events 0 to/.test(p)), problems.join("; "));
  assert.equal(clock.recorder.uploaders.get(clock.runId).ended, true, "no more uploads of this run");
  const batches = agent.batches;
  clock.actAt(clock.now() + 1, () => {}, { message: "more" });
  const t0 = Date.now();
  assert.equal(await clock.close({ timeout: 5000 }), false, "not everything stored");
  assert.ok(Date.now() - t0 < 1000, "and nothing to wait for");
  assert.equal(agent.batches, batches);
});

test("killed and started again: the run resumes, its open connections are closed 'app restarted', every event stored exactly once", async () => {
  const agent = new FakeAgent();
  const storage = mapStorage();
  const env1 = killableEnv();
  const first = await connect(agent, { name: "kiosk-1", storage, tag: "p1", env: env1 });
  const runId = first.runId;
  const hub1 = first.subscribe(HUB);
  await until(() => hub1.readyState === 1);
  let acted = 0;
  const messages = [];
  hub1.addEventListener("message", (e) => first.actAt(JSON.parse(e.data).at, () => (acted += 1), { message: e }));
  const publish = (n) => {
    for (let i = 0; i < n; i++) {
      const text = JSON.stringify({ n: messages.length, at: first.now() + 15 });
      messages.push(text);
      agent.broadcast(text);
    }
  };
  publish(3);
  await until(() => acted === 3 && stored(agent, runId).filter((e) => e.kind === "action").length === 3, 10_000, "three stored");
  // The agent stops taking batches: what comes now is only in the storage when the process dies.
  agent.ingest = "deaf";
  publish(2);
  await until(() => acted === 5 && kept(storage, "action") === 2, 10_000, "two actions kept, not stored");
  const secret = agent.hellos[0].secret;
  env1.kill();
  agent.sever("p1");

  agent.ingest = "ack";
  const second = await connect(agent, { name: "kiosk-1", storage, tag: "p2" });
  assert.equal(second.runId, runId, "the same run");
  assert.equal(second.upload.resumed, true);
  assert.ok(agent.hellos.slice(1).every((h) => h.secret === secret && h.runId === runId));
  const hub2 = second.subscribe(HUB);
  await until(() => hub2.readyState === 1);
  assert.equal(hub2.conn, 1, "a connection number never used before");
  hub2.addEventListener("message", (e) => second.actAt(JSON.parse(e.data).at, () => (acted += 1), { message: e }));
  for (let i = 0; i < 2; i++) {
    const text = JSON.stringify({ n: messages.length, at: second.now() + 15 });
    messages.push(text);
    agent.broadcast(text);
  }
  await until(() => acted === 7, 10_000, "seven actions");
  assert.equal(await second.close(), true);

  const events = stored(agent, runId);
  assert.equal(events.length, second.upload.events, "every event, once");
  const count = (kind) => events.filter((e) => e.kind === kind).length;
  assert.deepEqual([count("started"), count("identity"), count("app"), count("stopped")], [1, 1, 1, 1]);
  assert.equal(events.at(-1).kind, "stopped");
  assert.deepEqual(
    events.filter((e) => e.kind === "opened" || e.kind === "closed").map((e) => [e.kind, e.conn, e.reason]),
    [["opened", 0, undefined], ["closed", 0, "app restarted"], ["opened", 1, undefined], ["closed", 1, "closed by the app"]],
  );
  const restarted = events.find((e) => e.reason === "app restarted");
  assert.ok(restarted.at_ms >= events.filter((e) => e.kind === "action")[4].done_ms, "at the last event of the process before");
  const actions = events.filter((e) => e.kind === "action");
  assert.deepEqual(actions.map((e) => e.message.text).sort(), [...messages].sort(), "each message's action once");
  assert.deepEqual(actions.map((e) => e.conn), [0, 0, 0, 0, 0, 1, 1]);
  assert.equal(count("receipt"), 7);
  assert.equal(storage.map.size, 0);
  assert.deepEqual(agent.refusals, []);
});

test("a stopped run not yet stored is finished in the background by the next start, which starts a new run", async () => {
  const agent = new FakeAgent();
  const storage = mapStorage();
  agent.ingest = "deaf";
  const first = await connect(agent, { name: "kiosk-2", storage });
  first.actAt(first.now() + 1, () => {}, { message: "one" });
  const t0 = Date.now();
  assert.equal(await first.close({ timeout: 150 }), false, "not everything stored");
  assert.ok(Date.now() - t0 < 2000, "close ends within its timeout");
  assert.ok(storage.map.size > 0);
  agent.ingest = "ack";
  const second = await connect(agent, { name: "kiosk-2", storage });
  assert.notEqual(second.runId, first.runId);
  assert.equal(second.upload.resumed, false);
  await until(() => stored(agent, first.runId).at(-1)?.kind === "stopped", 10_000, "the first run finished");
  const old = stored(agent, first.runId);
  assert.equal(old.length, first.upload.events);
  assert.equal(old.filter((e) => e.kind === "action").length, 1);
  assert.equal(await second.close(), true);
  assert.equal(storage.map.size, 0);
});

test("a run whose tail never reached storage: the next start ends it before the gap, uploads it, and starts a new run", async () => {
  const agent = new FakeAgent();
  const storage = mapStorage();
  agent.ingest = "deaf";
  const env = killableEnv();
  const first = await connect(agent, { name: "kiosk-3", storage, tag: "p1", env });
  for (let i = 0; i < 3; i++) first.actAt(first.now() + 1, () => {}, { message: `m${i}` });
  await until(() => kept(storage, "action") === 3, 10_000, "three actions kept");
  const runId = first.runId;
  const meta = JSON.parse(storage.getItem(`skewscope-app-run:${runId}`));
  // The process dies; its last two events were never written (the storage was full).
  env.kill();
  agent.sever("p1");
  storage.removeItem(`skewscope-app-run:${runId}:${meta.nextSeq - 2}`);
  agent.ingest = "ack";
  const second = await connect(agent, { name: "kiosk-3", storage, tag: "p2" });
  assert.notEqual(second.runId, runId);
  await until(() => stored(agent, runId).at(-1)?.kind === "stopped", 10_000, "the first run ended and stored");
  const old = stored(agent, runId);
  assert.equal(old.length, meta.nextSeq - 2 + 1, "up to the gap, then stopped");
  assert.equal(old.filter((e) => e.kind === "stopped").length, 1);
  assert.equal(await second.close(), true);
  assert.equal(storage.map.size, 0);
  assert.deepEqual(agent.refusals, []);
});

test("a storage that fills up: said once, events kept in memory and uploaded all the same", async () => {
  const agent = new FakeAgent();
  const storage = mapStorage();
  const problems = [];
  const clock = await connect(agent, { storage });
  clock.addEventListener("uploaderror", (e) => problems.push(e.message));
  storage.failAfter = storage.writes + 5;
  await until(() => !clock.upload.persistent, 10_000, "the storage full");
  for (let i = 0; i < 3; i++) clock.actAt(clock.now() + 1, () => {}, { message: `m${i}` });
  await until(() => stored(agent, clock.runId).filter((e) => e.kind === "action").length === 3, 10_000, "stored from memory");
  assert.equal(await clock.close(), true);
  assert.equal(stored(agent, clock.runId).length, clock.upload.events);
  assert.equal(problems.filter((p) => /cannot save/.test(p)).length, 1, problems.join("; "));
});

test("an event the agent would refuse is not recorded (it would stop the upload): the action still runs", async () => {
  const agent = new FakeAgent();
  const clock = await connect(agent);
  const problems = [];
  clock.addEventListener("uploaderror", (e) => problems.push(e.message));
  let ran = 0;
  clock.actAt(clock.now() + 1, () => (ran += 1), { message: "\ud800 not text a socket gives" });
  clock.actAt(clock.now() + 1, () => (ran += 1), { message: "fine" });
  await until(() => ran === 2);
  await until(() => stored(agent, clock.runId).filter((e) => e.kind === "action").length === 1, 10_000, "the good action");
  assert.equal(clock.upload.dropped, 2);
  assert.equal(problems.length, 2);
  assert.equal(await clock.close(), true);
  for (const e of stored(agent, clock.runId)) assert.equal(refusal(e), null);
  assert.deepEqual(agent.refusals, []);
});

test("binary messages: stamped and keyed by their bytes (as a Blob or an ArrayBuffer); a Blob from the app's own socket is acted on, not recorded", async () => {
  const agent = new FakeAgent();
  const clock = await connect(agent);
  const problems = [];
  clock.addEventListener("uploaderror", (e) => problems.push(e.message));
  const hub = clock.subscribe(HUB);
  await until(() => hub.readyState === 1);
  const got = [];
  hub.onmessage = (e) => got.push(e);
  agent.broadcast(new Uint8Array([0, 1, 254, 255]).buffer);
  await until(() => got.length === 1);
  assert.ok(got[0].data instanceof Blob, "a WebSocket's default binaryType");
  hub.binaryType = "arraybuffer";
  agent.broadcast(new Uint8Array([0, 1, 254, 255]).buffer);
  await until(() => got.length === 2);
  assert.ok(got[1].data instanceof ArrayBuffer);
  assert.deepEqual(got.map((e) => e.occurrence), [0, 1]);
  let ran = 0;
  clock.actAt(clock.now() + 1, () => (ran += 1), { message: got[1] });
  clock.actAt(clock.now() + 1, () => (ran += 1), { message: new Uint8Array([7, 8]) });
  clock.actAt(clock.now() + 1, () => (ran += 1), { message: { data: new Blob(["x"]) } });
  await until(() => ran === 3);
  const events = () => stored(agent, clock.runId);
  await until(() => events().filter((e) => e.kind === "action").length === 2, 10_000, "two actions stored");
  assert.deepEqual(events().filter((e) => e.kind === "receipt").map((e) => e.message), [{ hex: "0001feff", occurrence: 1 }, { hex: "0708", occurrence: 0 }]);
  assert.equal(problems.length, 1, problems.join("; "));
  assert.match(problems[0], /Blob/);
  assert.equal(await clock.close(), true);
});

test("without a name nothing is uploaded and the hub URL is not labelled", async () => {
  const agent = new FakeAgent();
  const clock = await connectClock(CLOCK, { WebSocketImpl: agent.socketClass(), env: killableEnv() });
  opened.add(clock);
  assert.equal(clock.upload, null);
  assert.equal(clock.runId, null);
  const hub = clock.subscribe(HUB);
  await until(() => hub.readyState === 1);
  const got = [];
  hub.onmessage = (e) => got.push(e);
  agent.broadcast("go");
  await until(() => got.length === 1);
  let ran = false;
  clock.actAt(clock.now() + 2, () => (ran = true), { message: got[0] });
  await until(() => ran);
  assert.deepEqual(agent.labels, [null]);
  assert.ok(![...agent.sockets].some((ws) => ws.path === "/ingest"));
  assert.equal(await clock.close(), true);
  assert.equal(agent.hellos.length, 0);
});
