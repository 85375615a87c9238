// skewscope-clock.js: the server's wall clock in a page, and actions at a
// time in it. No dependencies; an ES module. The skewscope agent serves it at
// GET /skewscope-clock.js and the time exchange at ws://SERVER:PORT/clock.
//
//   import { connectClock } from "http://server:8080/skewscope-clock.js";
//   const clock = await connectClock("ws://server:8080/clock");
//   clock.actAt(message.at * 1000, ({ late }) => show("go"));
//
// What it promises: clock.now() is the server's wall time to within
// clock.bound() milliseconds, while the page is visible. A page's timers are
// throttled when it is hidden, and what a screen shows waits for its next
// frame: those are outside the bound.

/** Milliseconds per unit, for times to act written in other units. */
const UNIT_MS = { s: 1e3, ms: 1, us: 1e-3, ns: 1e-6 };

/**
 * A time since the epoch in `unit` ("s", "ms", "us", "ns", or "auto": read
 * from the magnitude, as the skewscope probe does: below 1e11 seconds, below
 * 1e14 milliseconds, below 1e17 microseconds, else nanoseconds), in ms.
 */
export function toEpochMs(value, unit = "auto") {
  const v = Number(value);
  if (!Number.isFinite(v)) throw new TypeError(`not a time: ${value}`);
  if (unit !== "auto") {
    if (!(unit in UNIT_MS)) throw new TypeError(`unknown unit: ${unit}`);
    return v * UNIT_MS[unit];
  }
  const a = Math.abs(v);
  if (a < 1e11) return v * 1e3;
  if (a < 1e14) return v;
  if (a < 1e17) return v / 1e3;
  return v / 1e6;
}

/**
 * The page's clock: wall time from the monotonic clock (performance.now()
 * from performance.timeOrigin), which never steps when the device's wall
 * clock is set.
 */
export function pageNow() {
  return performance.timeOrigin + performance.now();
}

/** Drift the bound allows for, per ms since the best exchange, before a fit. */
export const DRIFT_UNFITTED = 100e-6;
/** ... and once a drift fit spans FIT_SPAN_MS: what is left of a crystal's error. */
export const DRIFT_FITTED = 20e-6;
/** A drift fit needs exchanges this far apart. */
export const FIT_SPAN_MS = 30_000;

/**
 * The clock model, without I/O: exchanges in, the server's clock out. Each
 * exchange is {t1, t2, t3, t4}: the page's clock when the request left (t1)
 * and the reply came (t4), the server's when the request arrived (t2) and
 * the reply left (t3), all ms. Its offset (server - page) is right to within
 * half its round trip. The model keeps the latest `window` exchanges, takes
 * the least delayed as the offset, fits the drift through the lower half by
 * delay once they span FIT_SPAN_MS, and widens the bound by the drift
 * allowed since the best exchange.
 */
export class ClockFilter {
  constructor({ window = 64 } = {}) {
    this.window = window;
    this.samples = [];
  }

  /** Adds one exchange; returns false for one that cannot be (t4 < t1). */
  add({ t1, t2, t3, t4 }) {
    const delay = (t4 - t1) - (t3 - t2);
    if (!(delay >= 0) || !Number.isFinite(delay)) return false;
    const offset = ((t2 - t1) + (t3 - t4)) / 2;
    this.samples.push({ at: t4, offset, delay });
    if (this.samples.length > this.window) this.samples.shift();
    return true;
  }

  /** Forgets every exchange: the page's clock jumped (the device slept). */
  reset() {
    this.samples = [];
  }

  /** Exchanges held. */
  get size() {
    return this.samples.length;
  }

  /**
   * {offset, bound, drift} at page time `at`: the server's clock is
   * at + offset, within ±bound ms; null with no exchange.
   */
  estimate(at) {
    if (this.samples.length === 0) return null;
    let best = this.samples[0];
    for (const s of this.samples) if (s.delay < best.delay) best = s;
    const drift = this.drift();
    const since = Math.abs(at - best.at);
    const offset = best.offset + (drift ?? 0) * (at - best.at);
    const allowance = drift === null ? DRIFT_UNFITTED : DRIFT_FITTED;
    return { offset, bound: best.delay / 2 + allowance * since, drift };
  }

  /** The drift (ms per ms) by least squares through the less delayed half, or null. */
  drift() {
    if (this.samples.length < 4) return null;
    const low = [...this.samples].sort((a, b) => a.delay - b.delay);
    const half = low.slice(0, Math.max(4, Math.ceil(low.length / 2)));
    const first = Math.min(...half.map((s) => s.at));
    const last = Math.max(...half.map((s) => s.at));
    if (last - first < FIT_SPAN_MS) return null;
    const n = half.length;
    const mx = half.reduce((a, s) => a + (s.at - first), 0) / n;
    const my = half.reduce((a, s) => a + s.offset, 0) / n;
    let sxy = 0;
    let sxx = 0;
    for (const s of half) {
      sxy += (s.at - first - mx) * (s.offset - my);
      sxx += (s.at - first - mx) ** 2;
    }
    return sxx > 0 ? sxy / sxx : null;
  }
}

/**
 * Runs `fn` when `clock`'s time reaches `at` (server ms since the epoch):
 * a coarse timer to `spinMs` before, then reading the clock until it has
 * come. `fn` gets {at, late}: `late` is how long after `at` it ran (0 when
 * on time; a time already past runs at once, late). Returns a function that
 * cancels it. `env` is for tests: {now, setTimeout, clearTimeout}.
 */
export function scheduleAt(clock, at, fn, { spinMs = 4, env = globalThis } = {}) {
  let timer = null;
  let cancelled = false;
  const fire = () => {
    if (cancelled) return;
    let now = clock.now();
    while (now < at) now = clock.now();
    cancelled = true;
    fn({ at, late: now - at });
  };
  const wait = () => {
    if (cancelled) return;
    const left = at - clock.now();
    if (left <= spinMs) return fire();
    timer = env.setTimeout(wait, left - spinMs);
  };
  const lateBy = clock.now() - at;
  if (lateBy > 0) {
    cancelled = true;
    fn({ at, late: lateBy });
  } else {
    wait();
  }
  return () => {
    cancelled = true;
    if (timer !== null) env.clearTimeout(timer);
  };
}

/**
 * The server's clock over a WebSocket to the agent's /clock. Use
 * connectClock() to get one that has synced. Events: "exchange" (each
 * exchange kept, as event.exchange {t1, t2, t3, t4}: what a page that
 * records its sync, as the skewscope browser probe does, writes down),
 * "bound" (event.bound, when it moved by more than 0.05 ms), "jump" (the
 * page's clock jumped: what was learned is dropped), "close".
 */
export class Clock extends EventTarget {
  constructor(url, { burst = 8, every = 5000, WebSocketImpl = globalThis.WebSocket, env = globalThis } = {}) {
    super();
    this.url = url;
    this.burst = burst;
    this.every = every;
    this.filter = new ClockFilter();
    this.WebSocketImpl = WebSocketImpl;
    this.env = env;
    this.pending = new Map();
    this.nextId = 1;
    this.lastBound = null;
    this.lastSeen = null;
  }

  /** The page's own clock (see pageNow), ms. */
  pageNow() {
    return this.env.pageNow ? this.env.pageNow() : pageNow();
  }

  /** The server's wall time now, ms since the epoch. */
  now() {
    const at = this.pageNow();
    const e = this.filter.estimate(at);
    if (e === null) throw new Error("skewscope clock: not synced yet");
    return at + e.offset;
  }

  /** How far now() can be from the server's clock, ± ms. */
  bound() {
    const e = this.filter.estimate(this.pageNow());
    return e === null ? Infinity : e.bound;
  }

  /** Runs fn at server time `at` (ms since the epoch); see scheduleAt. */
  actAt(at, fn, options = {}) {
    return scheduleAt(this, at, fn, { env: this.env, ...options });
  }

  /** Opens the socket and sends a first burst; resolves once one reply came. */
  start() {
    return new Promise((resolve, reject) => {
      const ws = new this.WebSocketImpl(this.url);
      this.ws = ws;
      let settled = false;
      ws.onopen = () => this.sendBurst();
      ws.onerror = () => {
        if (!settled) {
          settled = true;
          reject(new Error(`skewscope clock: cannot reach ${this.url}`));
        }
      };
      ws.onclose = () => this.dispatchEvent(new Event("close"));
      ws.onmessage = (event) => {
        this.receive(event.data);
        if (!settled && this.filter.size > 0) {
          settled = true;
          resolve(this);
        }
      };
      this.timer = this.env.setInterval(() => this.tick(), this.every);
      if (this.env.document?.addEventListener) {
        // Timers were throttled while hidden: exchange again at once.
        this.env.document.addEventListener("visibilitychange", () => {
          if (this.env.document.visibilityState === "visible") this.tick();
        });
      }
    });
  }

  /** Closes the socket and stops exchanging. */
  close() {
    this.env.clearInterval(this.timer);
    this.ws?.close();
  }

  /** A burst every `every` ms; a page clock that jumped (sleep) drops what was learned. */
  tick() {
    const page = this.pageNow();
    const wall = this.env.Date ? this.env.Date.now() : Date.now();
    if (this.lastSeen !== null) {
      const pageMoved = page - this.lastSeen.page;
      const wallMoved = wall - this.lastSeen.wall;
      if (Math.abs(pageMoved - wallMoved) > 1000) {
        this.filter.reset();
        this.dispatchEvent(new Event("jump"));
      }
    }
    this.lastSeen = { page, wall };
    this.sendBurst();
  }

  sendBurst() {
    if (this.ws?.readyState !== 1) return;
    for (let i = 0; i < this.burst; i++) {
      const id = this.nextId++;
      const t1 = this.pageNow();
      this.pending.set(id, t1);
      this.ws.send(JSON.stringify({ id, t1 }));
    }
  }

  receive(data) {
    const t4 = this.pageNow();
    let reply;
    try {
      reply = JSON.parse(data);
    } catch {
      return;
    }
    if (!this.pending.has(reply.id)) return;
    this.pending.delete(reply.id);
    const exchange = { t1: reply.t1, t2: reply.t2, t3: reply.t3, t4 };
    if (this.filter.add(exchange)) {
      this.dispatchEvent(Object.assign(new Event("exchange"), { exchange }));
    }
    const bound = this.bound();
    if (this.lastBound === null || Math.abs(bound - this.lastBound) > 0.05) {
      this.lastBound = bound;
      this.dispatchEvent(Object.assign(new Event("bound"), { bound }));
    }
  }
}

/** A Clock on `url` (ws://server:port/clock), resolved once it has synced. */
export async function connectClock(url, options = {}) {
  return new Clock(url, options).start();
}
