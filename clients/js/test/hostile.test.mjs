// node --test clients/js/test: hostile /clock frames (issue 43.3). The Rust
// decoder's fuzz corpus (fuzz/corpus/clock_json/*, read as bytes) and frames
// made here go through a fake WebSocket, with and without a token: nothing
// escapes, nothing non-finite comes out of now() or bound(), every frame is
// counted (malformed, stale, refused) or answers the exchange, and the good
// reply after them is still used.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { createHmac, webcrypto } from "node:crypto";
import { Clock, MAX_TIME_MS, checkReply, connectClock, scheduleAt, timeKey } from "../skewscope-clock.js";
import { FakeAgent, killableEnv, until } from "./fakes.mjs";

const CORPUS = new URL("../../../fuzz/corpus/clock_json/", import.meta.url);
const TOKEN = "site-secret";
const AGENT_KEY = createHmac("sha256", TOKEN).update("skewscope time exchange tag v2").digest();
const tagOf = (text) => createHmac("sha256", AGENT_KEY).update(text).digest("hex").slice(0, 32);

/** Errors that escaped to the process while these tests ran. */
const escaped = [];
process.on("uncaughtException", (e) => escaped.push(e));
process.on("unhandledRejection", (e) => escaped.push(e));

/** A /clock socket the test drives by hand: it answers nothing by itself. */
class ManualSocket {
  constructor(url) {
    this.url = url;
    this.readyState = 1;
    this.sent = [];
    ManualSocket.last = this;
    queueMicrotask(() => this.onopen?.());
  }
  send(text) {
    this.sent.push(text);
  }
  close() {
    this.readyState = 3;
  }
}

/** A clock on a simulated page clock, with timers that never fire: the test sends each request. */
function manualClock(token = null) {
  const sim = { page: 1_764_000_000_000 };
  const setTimeouts = [];
  const env = {
    pageNow: () => sim.page,
    Date: { now: () => sim.page + 12_345 },
    setTimeout: (fn, ms) => {
      setTimeouts.push(ms);
      return setTimeouts.length;
    },
    clearTimeout: () => {},
    crypto: webcrypto,
  };
  const clock = new Clock("ws://agent.test/clock", { WebSocketImpl: ManualSocket, env, token });
  const exchanges = [];
  clock.addEventListener("exchange", (e) => exchanges.push(e.exchange));
  return { clock, sim, env, setTimeouts, exchanges };
}

/** The agent's good reply to `text` (tagged with a token): 7 ms ahead, 0.3 ms there and back. */
function goodReply(sim, text, keyed) {
  const { id, t1 } = JSON.parse(text);
  const t2 = sim.page + 0.1 + 7;
  sim.page += 0.3;
  const reply = { id, t1, t2, t3: t2 + 0.01 };
  if (keyed) {
    const ns = (ms) => String(Math.round(ms * 1e6));
    const [t2ns, t3ns] = [ns(reply.t2), ns(reply.t3)];
    reply.auth = { t2_ns: t2ns, t3_ns: t3ns, tag: tagOf(`${text}\n${t2ns}\n${t3ns}`) };
  }
  return JSON.stringify(reply);
}

const tally = (c) => c.malformed + c.stale + c.refused;

function assertFinite(clock, where) {
  assert.ok(Number.isFinite(clock.now()), `now() after ${where}`);
  assert.ok(Number.isFinite(clock.bound()), `bound() after ${where}`);
}

/** Hands `data` to the clock's socket; waits until it was counted or answered the exchange. */
async function deliver(clock, data, where) {
  const before = tally(clock);
  const pending = clock.pending;
  ManualSocket.last.onmessage(data === undefined ? undefined : { data });
  await until(() => tally(clock) > before || clock.pending !== pending, 5000, `${where} handled`);
  const answered = clock.pending !== pending ? 1 : 0;
  assert.equal(tally(clock) - before + answered, 1, `${where}: counted once, or used`);
  return answered === 1;
}

/** Sends a request, and (unless told not to) waits for its good reply to be used. */
async function exchange(h, keyed, hostile = async () => {}) {
  h.clock.request();
  const text = ManualSocket.last.sent.at(-1);
  const used = await hostile(JSON.parse(text).id, text);
  if (used) return;
  const before = h.exchanges.length;
  ManualSocket.last.onmessage({ data: goodReply(h.sim, text, keyed) });
  await until(() => h.exchanges.length === before + 1, 5000, "the good reply used");
}

/** The corpus, as bytes. */
function corpus() {
  return readdirSync(CORPUS)
    .sort()
    .map((name) => ({ name, bytes: readFileSync(new URL(name, CORPUS)) }));
}

/** Frames made here, for the pending request `p` (its id) and its exact text. */
function handMade(p, text, keyed) {
  const t = 1_764_000_000_000;
  const frames = [
    "null",
    "1",
    "-0",
    "1e400",
    "[]",
    "[null]",
    `[{"id":${p}}]`,
    '"a string"',
    "true",
    "",
    "{}",
    '{"id":null}',
    `{"id":"${p}"}`,
    `{"id":${p}.5}`,
    "{\"id\":9007199254740993}",
    `{"id":1e400}`,
    `{"id":${p}}`,
    `{"id":${p},"t2":1e400,"t3":1e400}`,
    `{"id":${p},"t2":-1e400,"t3":${t}}`,
    `{"id":${p},"t2":-1,"t3":-1}`,
    `{"id":${p},"t2":0,"t3":0}`,
    `{"id":${p},"t2":18446744073709.6,"t3":18446744073709.7}`,
    `{"id":${p},"t2":1e308,"t3":1e308}`,
    `{"id":${p},"t2":"${t}","t3":"${t}"}`,
    `{"id":${p},"t2":null,"t3":null}`,
    `{"id":${p},"t2":[1],"t3":{}}`,
    `{"id":${p},"t2":${t + 5},"t3":${t + 4}}`,
    `{"id":${p},"t2":${t},"t3":${t + 100000}}`,
    `{"__proto__":{"id":${p},"t2":${t},"t3":${t}}}`,
    `{"id":${p},"id":"x"}`,
    `{"id":${p},"auth":null,"t2":1e400}`,
    `{"id":${p},"auth":[],"t2":1e400}`,
    "[".repeat(100_000),
    `"${"x".repeat(1 << 20)}"`,
    `{"id":${p},"t2":${t},"t3":${t},"pad":"${"x".repeat(20_000)}"}`,
  ];
  if (!keyed) return frames;
  // Tagged ones: each wrong in one way; the last verifies but is out of range.
  const auth = (t2ns, t3ns, tag = tagOf(`${text}\n${t2ns}\n${t3ns}`)) =>
    JSON.stringify({ id: p, t2: 1, t3: 1, auth: { t2_ns: t2ns, t3_ns: t3ns, tag } });
  const ok = "1764000000000100000";
  return [
    ...frames,
    `{"id":${p},"t2":${t},"t3":${t}}`,
    `{"id":${p},"auth":"x"}`,
    `{"id":${p},"auth":{"t2_ns":${ok},"t3_ns":${ok},"tag":"${tagOf(`${text}\n${ok}\n${ok}`)}"}}`,
    auth("176400000000010000000", ok),
    auth("18446744073709551616", ok),
    auth("99999999999999999999", ok),
    auth(`-${ok}`, ok),
    auth(` ${ok}`, ok),
    auth("1764e18", ok),
    auth("123456", ok),
    auth(ok, ok, tagOf(`${text}\n${ok}\n${ok}`).toUpperCase()),
    auth(ok, ok, tagOf(`${text}\n${ok}\n${ok}`).slice(0, 31)),
    auth(ok, ok, "0".repeat(32)),
    auth(ok, ok, tagOf(`${text}\n1764000000000000000\n${ok}`)),
    auth(ok, ok, tagOf(`{"id":${p + 1},"t1":0}\n${ok}\n${ok}`)),
    auth("18446744073709551615", "18446744073709551615"),
  ];
}

for (const keyed of [false, true]) {
  test(`hostile /clock frames ${keyed ? "with" : "without"} a token: the fuzz corpus and hand-made frames are counted, never thrown or used`, async () => {
    const h = manualClock(keyed ? TOKEN : null);
    const started = h.clock.start();
    await until(() => ManualSocket.last?.onmessage && h.clock.ws !== null, 5000, "the socket");
    await exchange(h, keyed);
    await started;
    assert.equal(h.clock.authenticated, keyed);
    const good = new Set(h.exchanges.map((x) => x.t2));

    // The Rust decoder's corpus: as text frames (decoded as a browser would),
    // as binary ones, every one while a request is pending.
    let used = 0;
    const files = corpus();
    assert.ok(files.length >= 100, `${files.length} corpus files`);
    for (const { name, bytes } of files) {
      await exchange(h, keyed, async () => {
        const where = `corpus ${name}`;
        let answered = await deliver(h.clock, new TextDecoder().decode(bytes), `${where} as text`);
        if (!answered) answered = await deliver(h.clock, bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length), `${where} as binary`);
        if (!answered) answered = await deliver(h.clock, new Uint8Array(bytes), `${where} as bytes`);
        assertFinite(h.clock, where);
        if (answered) used += 1;
        return answered;
      });
      good.add(h.exchanges.at(-1).t2);
    }
    // None of the corpus is a well-formed reply to a pending request.
    assert.equal(used, 0);

    // Made here, against the pending request.
    let frames = 0;
    await exchange(h, keyed, async (p, text) => {
      for (const frame of handMade(p, text, keyed)) {
        frames += 1;
        assert.equal(await deliver(h.clock, frame, `frame ${frame.slice(0, 80)}`), false, `used: ${frame.slice(0, 200)}`);
        assertFinite(h.clock, frame.slice(0, 80));
      }
      for (const odd of [undefined, null, 42, {}, new Blob(["{}"])]) {
        frames += 1;
        assert.equal(await deliver(h.clock, odd, `data ${String(odd)}`), false);
      }
      return false;
    });
    good.add(h.exchanges.at(-1).t2);
    // A frame with no event at all.
    const before = tally(h.clock);
    ManualSocket.last.onmessage(null);
    await until(() => tally(h.clock) === before + 1);

    // Only the good replies ever reached the model; the clock is still right.
    assert.ok(h.exchanges.every((x) => good.has(x.t2)), "only good replies used");
    assert.ok(h.exchanges.every((x) => [x.t1, x.t2, x.t3, x.t4].every(Number.isFinite)));
    assert.equal(h.exchanges.length, files.length + 2);
    assert.ok(Math.abs(h.clock.now() - (h.sim.page + 7)) <= h.clock.bound() + 0.2, `${h.clock.now()} vs ${h.sim.page + 7}`);
    if (keyed) assert.ok(h.clock.refused >= 16, `refused ${h.clock.refused}`);
    assert.ok(h.clock.malformed >= 3 * files.length, `malformed ${h.clock.malformed}`);
    // Every timer the clock set had a finite delay.
    assert.ok(h.setTimeouts.every((ms) => Number.isFinite(ms) && ms >= 0 && ms <= 2 ** 31 - 1), JSON.stringify(h.setTimeouts.filter((ms) => !Number.isFinite(ms))));
    await h.clock.close();
    assert.deepEqual(escaped, []);
    assert.ok(frames > 30);
  });
}

test("tags are compared by WebCrypto's verify; 20 digits are compared to 2^64 as BigInt", async () => {
  let verifies = 0;
  const subtle = new Proxy(webcrypto.subtle, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target);
      if (prop === "verify") {
        return (...args) => {
          verifies += 1;
          return v.apply(target, args);
        };
      }
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  const key = await timeKey(TOKEN, subtle);
  const text = '{"id":1,"t1":1000}';
  const reply = (t2ns, t3ns, tag = tagOf(`${text}\n${t2ns}\n${t3ns}`)) => ({ auth: { t2_ns: t2ns, t3_ns: t3ns, tag } });
  const ok = "1764000000000000001";
  assert.deepEqual(await checkReply(key, text, reply(ok, ok), subtle), { t2: 1_764_000_000_000.000001, t3: 1_764_000_000_000.000001 });
  assert.equal(verifies, 1);
  const max = "18446744073709551615";
  assert.ok(await checkReply(key, text, reply(max, max), subtle), "2^64 - 1 verifies (the clock then refuses it as out of range)");
  assert.equal(verifies, 2);
  for (const over of ["18446744073709551616", "99999999999999999999", "100000000000000000000"]) {
    assert.equal(await checkReply(key, text, reply(over, ok), subtle), null, over);
  }
  assert.equal(await checkReply(key, text, reply(ok, ok, "f".repeat(32)), subtle), null);
  assert.equal(verifies, 3, "malformed ones never reach the comparison; a wrong tag does");
  for (const odd of [null, 5, "x", [], { auth: null }, { auth: 7 }, { auth: [] }]) {
    assert.equal(await checkReply(key, text, odd, subtle), null);
  }
});

test("no NaN or infinity reaches a timer: actAt and scheduleAt refuse non-finite times, far ones wait in bounded steps", async () => {
  const h = manualClock();
  const started = h.clock.start();
  await until(() => ManualSocket.last?.onmessage && h.clock.ws !== null);
  await exchange(h, false);
  await started;
  for (const bad of [NaN, Infinity, -Infinity, "1764000000000", undefined, null, 1n, {}]) {
    assert.throws(() => h.clock.actAt(bad, () => {}), TypeError, String(bad));
    assert.throws(() => scheduleAt(h.clock, bad, () => {}), TypeError, String(bad));
  }
  for (const bad of [-1, MAX_TIME_MS, 1e300]) assert.throws(() => h.clock.actAt(bad, () => {}), RangeError, String(bad));
  assert.throws(() => h.clock.actAt(h.clock.now() + 10, () => {}, { spinMs: NaN }), TypeError);
  assert.throws(() => h.clock.actAt(h.clock.now() + 10, "not a function"), TypeError);
  assert.throws(() => h.clock.actAt(h.clock.now() + 10, () => {}, { message: 42 }), TypeError);
  assert.throws(() => new Clock("ws://x/clock", { every: NaN }), TypeError);
  assert.throws(() => new Clock("ws://x/clock", { every: 0 }), TypeError);
  const cancel = h.clock.actAt(MAX_TIME_MS - 1, () => assert.fail("never"));
  cancel();
  assert.ok(h.setTimeouts.every((ms) => Number.isFinite(ms) && ms >= 0 && ms <= 2 ** 31 - 1), JSON.stringify(h.setTimeouts));
  assertFinite(h.clock, "the refusals");
  await h.clock.close();
});

test("a flood of unsolicited frames: the clock goes on, and close() ends at once and stops reading", async () => {
  const agent = new FakeAgent();
  const flood = { sent: 0 };
  const Base = agent.socketClass();
  class Flooded extends Base {
    constructor(url, protocols) {
      super(url, protocols);
      if (!url.endsWith("/clock")) return;
      const frames = ["null", "[]", '{"id":999999,"t2":1,"t3":2}', '{"id":1e400}', "{", '"x"', "1e400"];
      const pump = () => {
        if (this.readyState > 1) return;
        for (let i = 0; i < 20 && this.readyState === 1; i++) {
          flood.sent += 1;
          this.onmessage?.({ data: frames[flood.sent % frames.length] });
        }
        setImmediate(pump);
      };
      setImmediate(pump);
    }
  }
  const clock = await connectClock("ws://agent.test:8080/clock", { name: "flooded", WebSocketImpl: Flooded, env: killableEnv() });
  await until(() => clock.malformed + clock.stale > 2000, 10_000, "a flood");
  const size = clock.model.size;
  await until(() => clock.model.size > size + 1, 10_000, "exchanges through the flood");
  assertFinite(clock, "the flood");
  const t0 = performance.now();
  assert.equal(await clock.close({ timeout: 2000 }), true);
  assert.ok(performance.now() - t0 < 2000, `close took ${performance.now() - t0} ms`);
  const after = tally(clock);
  const sent = flood.sent;
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
  assert.equal(flood.sent, sent, "the flood ended with the socket");
  assert.equal(tally(clock), after);
  assert.deepEqual(escaped, []);
});

test("a start that cannot finish ends: the socket closes first, or close() is called", async () => {
  const h = manualClock();
  const started = h.clock.start();
  await until(() => h.clock.ws !== null);
  h.clock.close();
  await assert.rejects(started, /closed before it synced/);

  class Slammed {
    constructor() {
      this.readyState = 0;
      setImmediate(() => this.onclose?.({ code: 1006 }));
    }
    send() {}
    close() {}
  }
  await assert.rejects(connectClock("ws://x/clock", { WebSocketImpl: Slammed, env: killableEnv() }), /closed before one exchange/);
  await assert.rejects(connectClock("ws://x/clock", { WebSocketImpl: Slammed, env: killableEnv(), name: "n" }), /closed before one exchange/);
});
