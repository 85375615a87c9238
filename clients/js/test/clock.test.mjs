// node --test clients/js/test: the clock module's model and timers, without
// a network (the agent's own tests run it against a real /clock).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ClockFilter,
  Clock,
  DRIFT_UNFITTED,
  FIT_SPAN_MS,
  scheduleAt,
  toEpochMs,
} from "../skewscope-clock.js";

/** An exchange with the server `offset` ms ahead, `up` and `down` ms each way, sent at page time `t1`. */
function exchange(t1, offset, up, down, serverWork = 0.01) {
  const t2 = t1 + up + offset;
  const t3 = t2 + serverWork;
  const t4 = t3 - offset + down;
  return { t1, t2, t3, t4 };
}

test("the least delayed exchange wins, and its bound contains the truth", () => {
  const f = new ClockFilter();
  const truth = 2.5;
  // Asymmetric delays: each estimate is off by (up - down) / 2, within its bound.
  const delays = [[0.9, 0.1], [0.2, 0.3], [1.5, 0.1], [0.05, 0.4], [3, 3]];
  delays.forEach(([up, down], i) => assert.ok(f.add(exchange(1000 + i, truth, up, down))));
  const e = f.estimate(1010);
  assert.ok(Math.abs(e.offset - truth) <= e.bound, JSON.stringify(e));
  // The best is [0.2, 0.3] or [0.05, 0.4]: delay 0.45 + 0.01 work excluded.
  assert.ok(e.bound < 0.26, JSON.stringify(e));
});

test("an exchange that could not happen is refused", () => {
  const f = new ClockFilter();
  assert.equal(f.add({ t1: 10, t2: 5, t3: 6, t4: 9 }), false);
  assert.equal(f.estimate(10), null);
});

test("the bound grows with time since the best exchange, then drift is fitted", () => {
  const f = new ClockFilter();
  const x = exchange(0, 1, 0.1, 0.1);
  f.add(x);
  const at = 10_000;
  // Half the round trip, plus the drift allowed since the exchange's reply.
  assert.ok(Math.abs(f.estimate(at).bound - (0.1 + DRIFT_UNFITTED * (at - x.t4))) < 1e-9);
  // A server clock running 50 ppm fast: the fit follows it.
  const g = new ClockFilter();
  const ppm = 50e-6;
  for (let t = 0; t <= 2 * FIT_SPAN_MS; t += 1000) {
    g.add(exchange(t, 3 + ppm * t, 0.2, 0.2));
  }
  const later = 2 * FIT_SPAN_MS + 5000;
  const e = g.estimate(later);
  assert.ok(Math.abs(e.drift - ppm) < 1e-7, `drift ${e.drift}`);
  const truth = 3 + ppm * later;
  assert.ok(Math.abs(e.offset - truth) <= e.bound, JSON.stringify(e));
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

test("a page clock that jumps against the wall clock (sleep) forgets what it learned", () => {
  let page = 5000;
  let wall = 1_764_633_600_000;
  const env = {
    pageNow: () => page,
    Date: { now: () => wall },
    setInterval: () => 0,
    clearInterval: () => {},
  };
  const clock = new Clock("ws://unused/clock", { env });
  clock.filter.add(exchange(page, 2, 0.1, 0.1));
  const jumps = [];
  clock.addEventListener("jump", () => jumps.push(page));
  clock.tick();
  page += 5000;
  wall += 5000;
  clock.tick();
  assert.equal(clock.filter.size, 1, "both clocks moved alike");
  // The device slept 60 s: the wall clock moved on, the page's did not.
  page += 5000;
  wall += 65_000;
  clock.tick();
  assert.equal(clock.filter.size, 0);
  assert.deepEqual(jumps, [page]);
  assert.equal(clock.bound(), Infinity);
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
  const env = { pageNow: () => page, setInterval: () => 0, clearInterval: () => {}, setTimeout, clearTimeout };
  const clock = new Clock("ws://server/clock", { WebSocketImpl: FakeSocket, env, burst: 4 });
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
    assert.equal(exchanges.length, clock.filter.size);
  });
});
