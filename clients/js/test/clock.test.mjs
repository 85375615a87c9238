// node --test clients/js/test: the clock module's model and timers, without
// a network (the agent's own tests run it against a real /clock).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Clock,
  ClockModel,
  FASTEST_NS,
  LOOSE_AFTER_PAIR,
  MAX_BURST_ROUNDS,
  Schedule,
  checkReply,
  scheduleAt,
  timeKey,
  toEpochMs,
} from "../skewscope-clock.js";

/** An exchange with the server `offset` ms ahead, `up` and `down` ms each way, sent at page time `t1`. */
function exchange(t1, offset, up, down, serverWork = 0.01) {
  const t2 = t1 + up + offset;
  const t3 = t2 + serverWork;
  const t4 = t3 - offset + down;
  return { t1, t2, t3, t4 };
}

test("the model in milliseconds: the truth inside, the best paths of two exchanges both count", () => {
  const m = new ClockModel({ nsPerUnit: 1e6 });
  const truth = 2.5;
  // Exchange A has a fast way up, B a fast way down: together they bound
  // the offset tighter than either alone.
  assert.ok(m.add(exchange(1000, truth, 0.05, 0.9)));
  assert.ok(m.add(exchange(1001, truth, 0.9, 0.05)));
  const e = m.at(1001.5);
  const offset = e.agentMinusMonoNs / 1e6;
  const bound = e.boundNs / 1e6;
  assert.ok(Math.abs(offset - truth) <= bound, JSON.stringify(e));
  assert.ok(bound < 0.1, `bound ${bound} ms`);
});

test("an exchange that could not happen is refused", () => {
  const m = new ClockModel({ nsPerUnit: 1e6 });
  assert.equal(m.add({ t1: 10, t2: 5, t3: 6, t4: 9 }), false);
  assert.equal(m.add({ t1: 10, t2: 5, t3: 4, t4: 12 }), false);
  assert.equal(m.at(10), null);
});

test("one host on a jittery link: the drift stays inside what the exchanges allow", () => {
  const m = new ClockModel({ nsPerUnit: 1e6 });
  let seed = 7;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  for (let t = 0; t < 300_000; t += 500) {
    const up = 1 - 3 * Math.log(1 - random());
    const down = 1 - 3 * Math.log(1 - random());
    m.add(exchange(t, 0, up, down));
  }
  const e = m.at(300_000);
  assert.ok(Math.abs(e.driftPpb) <= e.driftBoundPpb, JSON.stringify(e));
  assert.ok(Math.abs(e.agentMinusMonoNs) <= e.boundNs, JSON.stringify(e));
});

/** Runs a schedule with the bound `bound(round)`; the request times, ns. */
function drive(s, requests, bound) {
  const sent = [];
  for (let i = 0; i < requests; i++) {
    const at = s.nextRequestAt();
    sent.push(at);
    const b = bound(Math.floor(i / 2));
    s.done(at + 1e6, b === null ? null : { boundNs: b, driftBoundPpb: 0 });
  }
  return sent;
}

test("the schedule: pairs, a burst while the bound improves, then the steady rate", () => {
  const s = new Schedule(0, 1e9);
  const sent = drive(s, 2 * MAX_BURST_ROUNDS, (round) => 1e6 / 2 ** Math.min(round, 10));
  assert.equal(sent[1], sent[0] + 1e6, "the second of a pair at the first's reply");
  assert.equal(s.bursting, false);
  const steady = drive(s, 4, () => 1e6 / 2 ** 10);
  assert.equal(steady[2] - steady[0], 1e9);
  // A loosely known drift brings the pairs closer, never under FASTEST_NS.
  const t = s.nextRequestAt();
  s.done(t + 1e6, { boundNs: 1e6, driftBoundPpb: 400_000 });
  s.done(t + 2e6, { boundNs: 1e6, driftBoundPpb: 400_000 });
  assert.ok(s.nextRequestAt() - t <= 1e9);
});

test("the schedule: a pair that missed the link's best brings the next sooner", () => {
  const s = new Schedule(0, 1e9);
  drive(s, 2 * MAX_BURST_ROUNDS, () => 1e5);
  assert.equal(s.bursting, false);
  let at = s.nextRequestAt();
  drive(s, 2, () => 1e5 * 1.1);
  assert.equal(s.nextRequestAt() - at, 1e9, "within LOOSE_AFTER_PAIR of the best: the interval");
  at = s.nextRequestAt();
  drive(s, 2, () => 1e5 * 1.5);
  assert.equal(s.bursting, false);
  assert.equal(s.nextRequestAt() - at, 5e8, "past it: half the interval");
  assert.equal(LOOSE_AFTER_PAIR, 1.15);
});

test("the schedule: a burst stops at its cap when nothing answers, and hurry bursts at once", () => {
  const s = new Schedule(0, 1e9);
  drive(s, 2 * MAX_BURST_ROUNDS, () => null);
  assert.equal(s.bursting, false);
  const t = new Schedule(0, 1e9);
  drive(t, 2 * MAX_BURST_ROUNDS, () => 1e5);
  assert.equal(t.hurry(t.nextRequestAt()), true);
  drive(t, 2 * MAX_BURST_ROUNDS, () => 1e5);
  const now = t.nextRequestAt() - 5e8;
  assert.equal(t.hurry(now), true);
  assert.equal(t.nextRequestAt(), now);
  assert.equal(t.hurry(now + 1e6), false);
  assert.ok(FASTEST_NS > 0);
});

test("times to act in any unit become epoch milliseconds", () => {
  const ms = 1_764_633_600_123;
  assert.equal(toEpochMs(ms / 1000), ms);
  assert.equal(toEpochMs(ms), ms);
  assert.equal(toEpochMs(ms * 1000), ms);
  assert.equal(toEpochMs(ms * 1e6), ms);
  assert.equal(toEpochMs("1764633600.5", "s"), 1_764_633_600_500);
  assert.throws(() => toEpochMs("soon"));
});

/** A clock and timers on a simulated time line. */
function simulated() {
  let now = 1_000_000;
  const timers = [];
  const env = {
    setTimeout: (fn, ms) => {
      timers.push({ at: now + ms, fn });
      return timers.length - 1;
    },
    clearTimeout: (id) => {
      timers[id] = null;
    },
  };
  // Each read of the clock moves it on 0.1 ms, as a spin does.
  const clock = { now: () => (now += 0.1) };
  const run = () => {
    for (let i = 0; i < timers.length; i++) {
      const t = timers[i];
      if (!t) continue;
      timers[i] = null;
      now = Math.max(now, t.at);
      t.fn();
    }
  };
  return { clock, env, run, get now() { return now; } };
}

test("actAt runs at the time, not before, and says when it was late", () => {
  const sim = simulated();
  const calls = [];
  scheduleAt(sim.clock, 1_000_050, (r) => calls.push(r), { env: sim.env });
  assert.equal(calls.length, 0, "not at once");
  sim.run();
  assert.equal(calls.length, 1);
  assert.equal(calls[0].at, 1_000_050);
  assert.ok(calls[0].late >= 0 && calls[0].late < 0.2, JSON.stringify(calls[0]));
  // A time already past: at once, late by how much.
  scheduleAt(sim.clock, sim.now - 30, (r) => calls.push(r), { env: sim.env });
  assert.equal(calls.length, 2);
  assert.ok(calls[1].late >= 30, JSON.stringify(calls[1]));
  // Cancelled: never.
  const cancel = scheduleAt(sim.clock, sim.now + 100, (r) => calls.push(r), { env: sim.env });
  cancel();
  sim.run();
  assert.equal(calls.length, 2);
});

/**
 * Timers as browsers and node keep them: a delay's fraction dropped, and
 * from the fifth nested timer on, no delay under 4 ms. Counts the timers set.
 */
function browserTimers(sim) {
  let depth = 0;
  let set = 0;
  const env = {
    setTimeout: (fn, ms) => {
      set++;
      const nesting = depth + 1;
      const delay = nesting >= 5 ? Math.max(4, Math.trunc(ms)) : Math.trunc(ms);
      return sim.env.setTimeout(() => {
        depth = nesting;
        try {
          fn();
        } finally {
          depth = 0;
        }
      }, delay);
    },
    clearTimeout: sim.env.clearTimeout,
  };
  return { env, get set() { return set; } };
}

test("a moment with a fraction of a millisecond takes one coarse timer, not a chain of them", () => {
  for (const fraction of [0, 0.05, 0.3, 0.5, 0.7, 0.95]) {
    const sim = simulated();
    const timers = browserTimers(sim);
    const calls = [];
    const at = sim.now + 296 + fraction;
    scheduleAt(sim.clock, at, (r) => calls.push({ ...r, now: sim.now }), { env: timers.env });
    sim.run();
    assert.equal(calls.length, 1, `fraction ${fraction}`);
    assert.equal(timers.set, 1, `fraction ${fraction}: ${timers.set} timers for one wait`);
    assert.ok(calls[0].late >= 0 && calls[0].late < 0.2, `fraction ${fraction}: ${JSON.stringify(calls[0])}`);
    // The read-out is no longer than the spin and the timer's millisecond.
    assert.ok(at - calls[0].now <= 0 && calls[0].now - (at - 5.1) > 0, JSON.stringify(calls[0]));
  }
  // A timer that fires a millisecond early still leads to the read-out.
  const sim = simulated();
  const timers = browserTimers(sim);
  const early = {
    setTimeout: (fn, ms) => timers.env.setTimeout(fn, Math.max(0, ms - 1)),
    clearTimeout: timers.env.clearTimeout,
  };
  const calls = [];
  scheduleAt(sim.clock, sim.now + 100.4, (r) => calls.push(r), { env: early });
  sim.run();
  assert.equal(calls.length, 1);
  assert.equal(timers.set, 1, `${timers.set} timers`);
  assert.ok(calls[0].late < 0.2, JSON.stringify(calls[0]));
});

test("the last look is asked once, as the coarse wait ends, and the read-out aims at what it says", () => {
  const sim = simulated();
  const calls = [];
  const looks = [];
  // The estimate moved during the lead: the moment is 0.5 ms earlier.
  const lookAgain = () => {
    looks.push(sim.now);
    return 1_000_049.5;
  };
  scheduleAt(sim.clock, 1_000_050, (r) => calls.push({ ...r, now: sim.now }), { env: sim.env, lookAgain });
  assert.deepEqual(looks, [], "not before the coarse wait");
  sim.run();
  assert.equal(looks.length, 1, "one look, no second coarse timer");
  assert.ok(looks[0] >= 1_000_046 && looks[0] < 1_000_050, `looked at ${looks[0]}: as the read-out begins`);
  assert.equal(calls.length, 1);
  assert.equal(calls[0].at, 1_000_049.5);
  assert.ok(calls[0].now >= 1_000_049.5 && calls[0].late < 0.2, JSON.stringify(calls[0]));
  // A look that moves the moment far (the first plan had no estimate):
  // a coarse wait again, then the read-out; never a long busy wait.
  const reads = { n: 0 };
  const counting = { now: () => (reads.n++, sim.clock.now()) };
  const far = sim.now + 10;
  let moved = false;
  scheduleAt(counting, far, (r) => calls.push({ ...r, now: sim.now }), {
    env: sim.env,
    lookAgain: () => (moved ? null : ((moved = true), far + 500)),
  });
  sim.run();
  assert.equal(calls.length, 2);
  assert.equal(calls[1].at, far + 500);
  assert.ok(calls[1].now >= far + 500 && calls[1].late < 0.2, JSON.stringify(calls[1]));
  assert.ok(reads.n < 100, `${reads.n} reads of the clock: a coarse wait, then a read-out of about 4 ms`);
  // A look that keeps the moment (null) changes nothing.
  scheduleAt(sim.clock, sim.now + 20, (r) => calls.push(r), { env: sim.env, lookAgain: () => null });
  sim.run();
  assert.equal(calls.length, 3);
  assert.ok(calls[2].late >= 0 && calls[2].late < 0.2, JSON.stringify(calls[2]));
});

test("a page clock that jumps against the wall clock (sleep) forgets what it learned", () => {
  let page = 5000;
  let wall = 1_764_633_600_000;
  const env = {
    pageNow: () => page,
    Date: { now: () => wall },
    setTimeout: () => 0,
    clearTimeout: () => {},
  };
  const clock = new Clock("ws://unused/clock", { env });
  clock.model.add(exchange(page, 2, 0.1, 0.1));
  const jumps = [];
  clock.addEventListener("jump", () => jumps.push(page));
  clock.checkJump(page);
  page += 5000;
  wall += 5000;
  clock.checkJump(page);
  assert.equal(clock.model.size, 1, "both clocks moved alike");
  // The device slept 60 s: the wall clock moved on, the page's did not.
  page += 5000;
  wall += 65_000;
  clock.checkJump(page);
  assert.equal(clock.model.size, 0);
  assert.deepEqual(jumps, [page]);
  assert.equal(clock.bound(), Infinity);
  // Learned again; then a sleep seen at a read, before any exchange: now()
  // refuses to answer from the model of before it.
  clock.model.add(exchange(page, 2, 0.1, 0.1));
  assert.ok(Number.isFinite(clock.now()));
  page += 1000;
  wall += 30_000;
  assert.throws(() => clock.now(), /not synced/);
  assert.equal(jumps.length, 2);
});

test("replies fill the model through a WebSocket, and bound changes are told", () => {
  let page = 1000;
  const offset = 7;
  class FakeSocket {
    constructor() {
      this.readyState = 1;
      FakeSocket.last = this;
      queueMicrotask(() => this.onopen());
    }
    send(text) {
      const { id, t1 } = JSON.parse(text);
      const t2 = page + 0.1 + offset;
      page += 0.3;
      queueMicrotask(() => this.onmessage({ data: JSON.stringify({ id, t1, t2, t3: t2 + 0.01 }) }));
    }
    close() {}
  }
  const env = { pageNow: () => page, setTimeout, clearTimeout };
  const clock = new Clock("ws://server/clock", { WebSocketImpl: FakeSocket, env });
  const bounds = [];
  const exchanges = [];
  clock.addEventListener("bound", (e) => bounds.push(e.bound));
  clock.addEventListener("exchange", (e) => exchanges.push(e.exchange));
  return clock.start().then(() => {
    assert.ok(bounds.length >= 1);
    // Each exchange kept is told, with the page's t4.
    assert.ok(exchanges.length >= 1);
    assert.ok(exchanges.every((x) => x.t4 >= x.t1 && x.t3 >= x.t2), JSON.stringify(exchanges));
    assert.ok(Math.abs(clock.now() - (page + offset)) <= clock.bound() + 0.2, `${clock.now()} vs ${page + offset}`);
    // A reply to nothing asked is ignored.
    clock.receive(JSON.stringify({ id: 999, t1: 0, t2: 0, t3: 0 }));
    clock.receive("not json");
    assert.equal(exchanges.length, clock.model.size);
    clock.close();
  });
});

test("with a token, only replies the agent tagged are used; altered ones are refused and counted", async () => {
  const { createHmac, webcrypto } = await import("node:crypto");
  // The agent's side, written here with node's HMAC (not WebCrypto).
  const key = createHmac("sha256", "site-secret").update("skewscope time exchange tag v2").digest();
  const tagOf = (text) => createHmac("sha256", key).update(text).digest("hex").slice(0, 32);
  // The shared vector: the core's and Python's tag for this request.
  const vectorKey = await timeKey("site-secret", webcrypto.subtle);
  const vector = { auth: { t2_ns: "1764000000000000001", t3_ns: "1764000000000000002", tag: "2507b9ac663f4096104e8f8263461495" } };
  assert.ok(await checkReply(vectorKey, '{"id":1,"t1":1000}', vector, webcrypto.subtle));
  assert.equal(await checkReply(vectorKey, '{"id":2,"t1":1000}', vector, webcrypto.subtle), null);

  let page = 1_764_000_000_000;
  const offset = 7;
  let replies = 0;
  class TamperedSocket {
    constructor() {
      this.readyState = 1;
      queueMicrotask(() => this.onopen());
    }
    send(text) {
      const { id, t1 } = JSON.parse(text);
      const t2ms = page + 0.1 + offset;
      page += 0.3;
      const ns = (ms) => String(Math.round(ms * 1e6));
      const [t2_ns, t3_ns] = [ns(t2ms), ns(t2ms + 0.01)];
      const reply = { id, t1, t2: t2ms, t3: t2ms + 0.01, auth: { t2_ns, t3_ns, tag: tagOf(`${text}\n${t2_ns}\n${t3_ns}`) } };
      replies += 1;
      if (replies % 2 === 0) {
        // On the path: 3 ms later, in both units, the tag left as it was.
        reply.t2 += 3;
        reply.t3 += 3;
        reply.auth.t2_ns = ns(t2ms + 3);
        reply.auth.t3_ns = ns(t2ms + 3.01);
      }
      queueMicrotask(() => this.onmessage({ data: JSON.stringify(reply) }));
    }
    close() {}
  }
  const env = { pageNow: () => page, setTimeout, clearTimeout, crypto: webcrypto };
  const clock = new Clock("ws://server/clock", { WebSocketImpl: TamperedSocket, env, token: "site-secret" });
  let told = 0;
  clock.addEventListener("refused", (e) => (told = e.refused));
  await clock.start();
  assert.ok(clock.authenticated);
  // Let a few more exchanges run (the fake answers at once).
  while (replies < 12) await new Promise((r) => setTimeout(r, 5));
  assert.ok(clock.refused >= 3 && told === clock.refused, `${clock.refused} ${told}`);
  assert.ok(Math.abs(clock.now() - (page + offset)) <= clock.bound() + 0.2, `${clock.now()} vs ${page + offset}`);
  clock.close();

  // Without WebCrypto a token is an error, not a silent unauthenticated clock.
  const bare = new Clock("ws://server/clock", { WebSocketImpl: TamperedSocket, env: { ...env, crypto: {} }, token: "x" });
  const saved = globalThis.crypto;
  Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
  await assert.rejects(bare.start(), /secure context/);
  Object.defineProperty(globalThis, "crypto", { value: saved, configurable: true });
});
