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

// ---------------------------------------------------------------------------
// The clock model: a port of skewscope-core's `clock` module (model.rs,
// region.rs, hull.rs), operation for operation, so that both give the same
// bits for the same exchanges: clients/clock-vectors/ holds the cases both
// replay. Read the Rust for why; this says what.
//
// ψ(τ) is the server's wall clock minus this page's monotonic clock at page
// time τ. An exchange (t1, t2, t3, t4) proves ψ(t1) ≤ t2 − t1 and
// ψ(t4) ≥ t3 − t4. Between exchanges ψ moves with a drift b, |b| ≤
// MAX_DRIFT, give or take WANDER. The (ψ(t), b) pairs consistent with every
// exchange of t's window form a convex polygon; its extent in ψ(t) is the
// interval every consistent clock lies in.
// ---------------------------------------------------------------------------

/** The fastest two clocks may drift apart (100 ppm). */
export const MAX_DRIFT = 100e-6;
/** How far their relative frequency may wander from one drift (1 ppm). */
export const WANDER = 1e-6;
/** How far from a moment its exchanges count, ns (300 s). */
export const HORIZON_NS = 300e9;

function cross(o, a, b) {
  return (a.at - o.at) * (b.value - o.value) - (a.value - o.value) * (b.at - o.at);
}

/** The lower hull of points sorted by `at`. */
function lowerHull(points) {
  const hull = [];
  for (const p of points) {
    while (hull.length >= 2 && cross(hull[hull.length - 2], hull[hull.length - 1], p) <= 0) hull.pop();
    hull.push(p);
  }
  return hull;
}

/** The upper hull of points sorted by `at`. */
function upperHull(points) {
  const hull = [];
  for (const p of points) {
    while (hull.length >= 2 && cross(hull[hull.length - 2], hull[hull.length - 1], p) >= 0) hull.pop();
    hull.push(p);
  }
  return hull;
}

/** The least of lines handed in with slopes not increasing. */
function lowerEnvelope(lines) {
  const env = [];
  for (const line of lines) {
    if (env.length > 0 && env[env.length - 1].slope === line.slope) {
      if (line.intercept >= env[env.length - 1].intercept) continue;
      env.pop();
    }
    while (env.length >= 2) {
      const a = env[env.length - 2];
      const b = env[env.length - 1];
      if ((line.intercept - a.intercept) * (a.slope - b.slope) <= (b.intercept - a.intercept) * (a.slope - line.slope)) {
        env.pop();
      } else {
        break;
      }
    }
    env.push(line);
  }
  return env;
}

function least(env, b) {
  let v = Infinity;
  for (const line of env) {
    const x = line.intercept + line.slope * b;
    if (x < v) v = x;
  }
  return v;
}

/** The region's extent at t from hull points before and after it; null when empty. */
export function solve(t, upperBefore, upperAfter, lowerBefore, lowerAfter) {
  const upLines = [];
  for (const p of [...upperBefore, ...upperAfter]) {
    const since = t - p.at;
    upLines.push({ slope: since, intercept: p.value + WANDER * Math.abs(since) });
  }
  const up = lowerEnvelope(upLines);
  const lowLines = [];
  for (const side of [lowerAfter, lowerBefore]) {
    for (let i = side.length - 1; i >= 0; i--) {
      const p = side[i];
      const since = t - p.at;
      lowLines.push({ slope: -since, intercept: -(p.value - WANDER * Math.abs(since)) });
    }
  }
  const low = lowerEnvelope(lowLines);
  if (up.length === 0 || low.length === 0) return null;
  const hi = (b) => least(up, b);
  const lo = (b) => -least(low, b);
  const candidates = [-MAX_DRIFT, MAX_DRIFT];
  for (const env of [up, low]) {
    for (let i = 0; i + 1 < env.length; i++) {
      const x = (env[i + 1].intercept - env[i].intercept) / (env[i].slope - env[i + 1].slope);
      if (x > -MAX_DRIFT && x < MAX_DRIFT) candidates.push(x);
    }
  }
  candidates.sort((a, b) => a - b);
  const gaps = candidates.map((b) => hi(b) - lo(b));
  const first = gaps.findIndex((g) => g >= 0);
  if (first < 0) return null;
  let last = gaps.length - 1;
  while (gaps[last] < 0) last--;
  let driftLo;
  if (first === 0) {
    driftLo = candidates[0];
  } else {
    const [b0, b1, g0, g1] = [candidates[first - 1], candidates[first], gaps[first - 1], gaps[first]];
    // Never past the candidate where the gap is ≥ 0 (rounding can).
    driftLo = Math.min(b0 + (b1 - b0) * (-g0 / (g1 - g0)), b1);
  }
  let driftHi;
  if (last === candidates.length - 1) {
    driftHi = candidates[last];
  } else {
    const [b0, b1, g0, g1] = [candidates[last], candidates[last + 1], gaps[last], gaps[last + 1]];
    driftHi = Math.max(b0 + (b1 - b0) * (g0 / (g0 - g1)), b0);
  }
  const extent = {
    lo: Math.min(lo(driftLo), lo(driftHi)),
    hi: Math.max(hi(driftLo), hi(driftHi)),
    driftLo,
    driftHi,
  };
  for (let i = first; i <= last; i++) {
    extent.lo = Math.min(extent.lo, lo(candidates[i]));
    extent.hi = Math.max(extent.hi, hi(candidates[i]));
  }
  return extent;
}

/** An interval's estimate: its middle (down) and the bound to both ends (up), ns. */
export function estimateOf(interval) {
  const { lo, hi, driftLo, driftHi } = interval.extent;
  const middle = Math.floor((lo + hi) / 2);
  const bound = Math.ceil(Math.max(hi - middle, middle - lo));
  return {
    agentMinusMonoNs: interval.baseNs + middle,
    boundNs: Math.max(bound, 0),
    driftPpb: ((driftLo + driftHi) / 2) * 1e9,
    driftBoundPpb: ((driftHi - driftLo) / 2) * 1e9,
  };
}

/** The first index of `list` where `pred` is false (list partitioned by it). */
function partitionPoint(list, pred) {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (pred(list[mid])) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function union(a, b) {
  const ends = (i) => {
    const e = estimateOf(i);
    return [e.agentMinusMonoNs - e.boundNs, e.agentMinusMonoNs + e.boundNs];
  };
  const [aLo, aHi] = ends(a);
  const [bLo, bHi] = ends(b);
  return {
    baseNs: a.baseNs,
    originNs: a.originNs,
    extent: {
      lo: Math.min(aLo, bLo) - a.baseNs,
      hi: Math.max(aHi, bHi) - a.baseNs,
      driftLo: Math.min(a.extent.driftLo, b.extent.driftLo),
      driftHi: Math.max(a.extent.driftHi, b.extent.driftHi),
    },
  };
}

/**
 * The clock model, without I/O: exchanges in, the server's clock out, with
 * a bound that holds. Exchanges are {t1, t2, t3, t4}: t1 and t4 on this
 * page's monotonic clock, t2 and t3 on the server's wall clock, in a unit
 * of `nsPerUnit` ns (1e6 for milliseconds, as pages have them).
 */
export class ClockModel {
  constructor({ nsPerUnit = 1 } = {}) {
    this.nsPerUnit = nsPerUnit;
    this.origin = null;
    this.exchanges = [];
    this.nextSegment = 0;
    this.conflicts = 0;
  }

  /** Exchanges held. */
  get size() {
    return this.exchanges.length;
  }

  /** Times a new exchange left no consistent clock (the model started again). */
  get breaks() {
    let n = 0;
    for (let i = 1; i < this.exchanges.length; i++) {
      if (this.exchanges[i].segment !== this.exchanges[i - 1].segment) n++;
    }
    return n;
  }

  /** A page time in the model's ns (relative to its first exchange). */
  toNs(t) {
    return (t - this.origin) * this.nsPerUnit;
  }

  /** Takes in one exchange; false for one that cannot be true. */
  add({ t1, t2, t3, t4 }) {
    const k = this.nsPerUnit;
    if (![t1, t2, t3, t4].every(Number.isFinite) || t4 < t1 || t3 < t2) return false;
    const upper = (t2 - t1) * k;
    const lower = (t3 - t4) * k;
    if (upper < lower) return false;
    if (this.origin === null) this.origin = t1;
    const kept = { sent: this.toNs(t1), received: this.toNs(t4), upper, lower, segment: 0 };
    const xs = this.exchanges;
    const inOrder = xs.length === 0 || xs[xs.length - 1].sent <= kept.sent;
    if (!inOrder) {
      const at = partitionPoint(xs, (x) => x.sent <= kept.sent);
      kept.segment = xs[Math.max(at - 1, 0)].segment;
      xs.splice(at, 0, kept);
      return true;
    }
    const segment = xs.length > 0 ? xs[xs.length - 1].segment : 0;
    kept.segment = segment;
    xs.push(kept);
    if (xs.length > 1 && this.windowIn(segment, kept.sent)[0] === null) {
      this.nextSegment = Math.max(this.nextSegment, segment) + 1;
      kept.segment = this.nextSegment;
    }
    return true;
  }

  /** Forgets exchanges sent before page time `t`, keeping the latest. */
  forgetBefore(t) {
    const ns = this.toNs(t);
    while (this.exchanges.length > 1 && this.exchanges[0].sent < ns) this.exchanges.shift();
  }

  /** The region's extent at page time `t`, raw ({baseNs, originNs, extent}); null with no exchange. */
  interval(t) {
    if (this.origin === null) return null;
    return this.intervalNs(this.toNs(t));
  }

  /** The server's clock at page time `t`: {agentMinusMonoNs, boundNs, driftPpb, driftBoundPpb}, or null. */
  at(t) {
    const i = this.interval(t);
    return i === null ? null : estimateOf(i);
  }

  intervalNs(mono) {
    const xs = this.exchanges;
    const firstAfter = partitionPoint(xs, (x) => x.sent <= mono);
    if (firstAfter === 0) return this.intervalIn(xs[0].segment, mono);
    const segment = xs[firstAfter - 1].segment;
    const own = this.intervalIn(segment, mono);
    if (own === null) return null;
    const next = xs[firstAfter];
    if (next !== undefined && next.segment !== segment) {
      const other = this.intervalIn(next.segment, mono);
      return other === null ? null : union(own, other);
    }
    return own;
  }

  intervalIn(segment, mono) {
    const [found, nearest] = this.windowIn(segment, mono);
    if (found !== null || nearest === null) return found;
    this.conflicts += 1;
    return this.solveRange(nearest, nearest + 1, mono);
  }

  windowIn(segment, mono) {
    const xs = this.exchanges;
    const start = partitionPoint(xs, (x) => x.segment < segment);
    const end = partitionPoint(xs, (x) => x.segment <= segment);
    if (start === end) return [null, null];
    const clamp = (p) => Math.min(Math.max(p, start), end);
    const split = clamp(partitionPoint(xs, (x) => x.sent <= mono));
    let first = clamp(partitionPoint(xs, (x) => x.sent < mono - HORIZON_NS));
    let last = clamp(partitionPoint(xs, (x) => x.sent <= mono + HORIZON_NS));
    if (split > start) first = Math.min(first, split - 1);
    if (split < end) last = Math.max(last, split + 1);
    const nearest = split > start ? split - 1 : split;
    return [this.solveRange(first, last, mono), nearest];
  }

  solveRange(first, last, mono) {
    const window = this.exchanges.slice(first, last);
    const origin = window[0].sent;
    const base = window[0].upper;
    const t = mono - origin;
    let splitUpper = 0;
    while (splitUpper < window.length && window[splitUpper].sent <= mono) splitUpper++;
    const splitLower = window.filter((x) => x.received <= mono).length;
    const uppers = window.map((x) => ({ at: x.sent - origin, value: x.upper - base }));
    const lowers = window.map((x) => ({ at: x.received - origin, value: x.lower - base }));
    lowers.sort((a, b) => a.at - b.at);
    const extent = solve(
      t,
      lowerHull(uppers.slice(0, splitUpper)),
      lowerHull(uppers.slice(splitUpper)),
      upperHull(lowers.slice(0, splitLower)),
      upperHull(lowers.slice(splitLower)),
    );
    return extent === null ? null : { baseNs: base, originNs: origin, extent };
  }
}

// ---------------------------------------------------------------------------
// The exchange schedule: a port of skewscope-core's clock/schedule.rs. Times
// are ns (a page passes pageNow() × 1e6).
// ---------------------------------------------------------------------------

export const MIN_BURST_ROUNDS = 4;
export const MAX_BURST_ROUNDS = 24;
export const BURST_GAP_NS = 25e6;
export const STILL_IMPROVING = 0.05;
export const REBURST_GAP_NS = 10e9;
export const HURRY_GAP_NS = 1e9;
export const GROWTH_BETWEEN_PAIRS = 0.03;
export const FASTEST_NS = 100e6;
export const NEGLIGIBLE_GROWTH_NS = 10e3;

/** When to exchange: bursts of pairs while the bound improves, then a steady rate. */
export class Schedule {
  constructor(nowNs, intervalNs) {
    this.intervalNs = Math.max(intervalNs, 1);
    this.burst = 0;
    this.bursting = true;
    this.secondOfPair = false;
    this.nextAt = nowNs;
    this.roundStarted = nowNs;
    this.lastBurstEnd = null;
    this.burstBounds = [];
    this.best = [];
    this.bursts = 1;
  }

  /** When the next request is due, ns. */
  nextRequestAt() {
    return this.nextAt;
  }

  /** A request went out and was answered or not; `estimate` is the model's now (or null). */
  done(nowNs, estimate) {
    if (!this.secondOfPair) {
      this.secondOfPair = true;
      this.nextAt = nowNs;
      return;
    }
    this.secondOfPair = false;
    const bound = estimate ? estimate.boundNs : null;
    if (bound !== null) {
      while (this.best.length > 0 && this.best[this.best.length - 1][1] >= bound) this.best.pop();
      this.best.push([nowNs, bound]);
      while (this.best.length > 0 && this.best[0][0] + HORIZON_NS < nowNs) this.best.shift();
    }
    if (this.bursting) {
      this.burst += 1;
      this.burstBounds.push(bound ?? Infinity);
      if (this.burstShouldGoOn(this.burst)) {
        this.roundStarted = nowNs + BURST_GAP_NS;
      } else {
        this.bursting = false;
        this.lastBurstEnd = nowNs;
        this.roundStarted = nowNs + this.intervalFor(estimate);
      }
    } else {
      const degraded = bound === null || (this.best.length > 0 && bound > 2 * this.best[0][1]);
      const rested = this.lastBurstEnd === null || nowNs >= this.lastBurstEnd + REBURST_GAP_NS;
      if (degraded && rested) {
        this.startBurst(nowNs + BURST_GAP_NS);
      } else {
        this.roundStarted = Math.max(this.roundStarted + this.intervalFor(estimate), nowNs);
      }
    }
    this.nextAt = this.roundStarted;
  }

  /** Bursts now unless one runs or one ended under HURRY_GAP_NS ago; whether it did. */
  hurry(nowNs) {
    if (this.bursting || (this.lastBurstEnd !== null && nowNs < this.lastBurstEnd + HURRY_GAP_NS)) return false;
    if (!this.secondOfPair) {
      this.startBurst(nowNs);
      this.nextAt = nowNs;
    } else {
      this.startBurst(this.nextAt);
    }
    return true;
  }

  intervalFor(estimate) {
    if (!estimate) return this.intervalNs;
    const growth = estimate.driftBoundPpb * 1e-9 + WANDER;
    const allowed = Math.max(GROWTH_BETWEEN_PAIRS * estimate.boundNs, NEGLIGIBLE_GROWTH_NS) / growth;
    return Math.min(Math.max(Math.floor(allowed), Math.min(FASTEST_NS, this.intervalNs)), this.intervalNs);
  }

  startBurst(at) {
    this.bursting = true;
    this.burst = 0;
    this.burstBounds = [];
    this.roundStarted = at;
    this.bursts += 1;
  }

  burstShouldGoOn(rounds) {
    if (rounds >= MAX_BURST_ROUNDS) return false;
    const n = this.burstBounds.length;
    const k = MIN_BURST_ROUNDS;
    if (n <= k) return true;
    const then = this.burstBounds[n - 1 - k];
    const now = this.burstBounds[n - 1];
    return now === Infinity || now < then * (1 - STILL_IMPROVING);
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

/** How long a reply may take before the exchange counts as lost, ms. */
export const ANSWER_WAIT_MS = 300;

/** What the agent binds its token to for the time exchange's key. */
const KEY_LABEL = "skewscope time exchange tag v2";
/** Bytes of the tag kept. */
const TAG_LEN = 16;

/**
 * The time exchange's key from the agent's token (`--token-file`), as the
 * agent derives it: HMAC-SHA-256 keyed with HMAC-SHA-256(token, label).
 * `subtle` is WebCrypto's (a secure context's, or node's).
 */
export async function timeKey(token, subtle) {
  const raw = await subtle.importKey("raw", new TextEncoder().encode(token), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const derived = await subtle.sign("HMAC", raw, new TextEncoder().encode(KEY_LABEL));
  return subtle.importKey("raw", derived, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
}

/**
 * A tagged reply's t2 and t3 (ms, from the tagged ns digits) when its tag
 * is the one `key` gives the request's exact `text` and those digits; null
 * when untagged or the tag does not verify (altered, or another token).
 */
export async function checkReply(key, text, reply, subtle) {
  const auth = reply?.auth;
  if (!auth || typeof auth.t2_ns !== "string" || typeof auth.t3_ns !== "string" || typeof auth.tag !== "string") return null;
  if (!/^\d{7,20}$/.test(auth.t2_ns) || !/^\d{7,20}$/.test(auth.t3_ns)) return null;
  const mac = new Uint8Array(await subtle.sign("HMAC", key, new TextEncoder().encode(`${text}\n${auth.t2_ns}\n${auth.t3_ns}`)));
  const hex = Array.from(mac.subarray(0, TAG_LEN), (b) => b.toString(16).padStart(2, "0")).join("");
  if (hex !== auth.tag) return null;
  const ms = (ns) => Number(ns.slice(0, -6)) + Number(ns.slice(-6)) / 1e6;
  return { t2: ms(auth.t2_ns), t3: ms(auth.t3_ns) };
}

/**
 * The server's clock over a WebSocket to the agent's /clock. Use
 * connectClock() to get one that has synced. It exchanges on the schedule
 * the native probe keeps (bursts of pairs until the bound stops improving,
 * then a pair every `every` ms, more often while the drift is loosely
 * known) and keeps the same clock model the probe and the report use.
 * Events: "exchange" (each exchange kept, as event.exchange {t1, t2, t3,
 * t4}: what a page that records its sync, as the skewscope browser probe
 * does, writes down), "bound" (event.bound, when it moved by more than
 * 0.05 ms), "jump" (the page's clock jumped against the wall clock: the
 * device slept; what was learned is dropped), "refused" (a reply whose tag
 * did not verify; event.refused is the count so far), "close".
 *
 * With `token` (the agent's, as the native probe's --token-file), only
 * replies tagged under it are used: anyone on the path could otherwise move
 * this clock. It needs WebCrypto, which a browser gives a secure context
 * (https, or localhost) only; `authenticated` says whether it checks.
 */
export class Clock extends EventTarget {
  constructor(url, { every = 1000, token = null, WebSocketImpl = globalThis.WebSocket, env = globalThis } = {}) {
    super();
    this.token = token;
    this.key = null;
    this.refused = 0;
    this.url = url;
    this.every = every;
    this.WebSocketImpl = WebSocketImpl;
    this.env = env;
    this.model = new ClockModel({ nsPerUnit: 1e6 });
    this.schedule = new Schedule(this.pageNow() * 1e6, every * 1e6);
    this.pending = null;
    this.timer = null;
    this.nextId = 1;
    this.lastBound = null;
    this.lastSeen = null;
    this.closed = false;
  }

  /** The page's own clock (see pageNow), ms. */
  pageNow() {
    return this.env.pageNow ? this.env.pageNow() : pageNow();
  }

  /** The server's clock at page time `at` (ms): {offset, bound} in ms (server = page + offset), or null. */
  estimate(at) {
    const e = this.model.at(at);
    return e === null ? null : { offset: e.agentMinusMonoNs / 1e6, bound: e.boundNs / 1e6, driftPpm: e.driftPpb / 1e3 };
  }

  /** The server's wall time now, ms since the epoch. */
  now() {
    const at = this.pageNow();
    const e = this.estimate(at);
    if (e === null) throw new Error("skewscope clock: not synced yet");
    return at + e.offset;
  }

  /** How far now() can be from the server's clock, ± ms. */
  bound() {
    const e = this.estimate(this.pageNow());
    return e === null ? Infinity : e.bound;
  }

  /** Runs fn at server time `at` (ms since the epoch); see scheduleAt. */
  actAt(at, fn, options = {}) {
    return scheduleAt(this, at, fn, { env: this.env, ...options });
  }

  /** Asks for a burst now (an action is near and the bound is wide); whether one starts. */
  hurry() {
    if (!this.schedule.hurry(this.pageNow() * 1e6)) return false;
    this.wait();
    return true;
  }

  /** Whether replies must carry the token's tag. */
  get authenticated() {
    return this.key !== null;
  }

  /** WebCrypto's subtle, where this page has it. */
  subtle() {
    return (this.env.crypto ?? globalThis.crypto)?.subtle ?? null;
  }

  /** Opens the socket and starts exchanging; resolves once one reply came. */
  async start() {
    if (this.token !== null) {
      const subtle = this.subtle();
      if (subtle === null) {
        throw new Error("skewscope clock: a token needs WebCrypto, which a browser gives only a secure context (https, or localhost)");
      }
      this.key = await timeKey(this.token, subtle);
    }
    return new Promise((resolve, reject) => {
      const ws = new this.WebSocketImpl(this.url);
      this.ws = ws;
      let settled = false;
      ws.onopen = () => this.wait();
      ws.onerror = () => {
        if (!settled) {
          settled = true;
          reject(new Error(`skewscope clock: cannot reach ${this.url}`));
        }
      };
      ws.onclose = () => {
        this.closed = true;
        this.dispatchEvent(new Event("close"));
      };
      ws.onmessage = async (event) => {
        await this.receive(event.data);
        if (!settled && this.model.size > 0) {
          settled = true;
          resolve(this);
        }
      };
      if (this.env.document?.addEventListener) {
        // Timers were throttled while hidden: exchange again at once.
        this.env.document.addEventListener("visibilitychange", () => {
          if (this.env.document.visibilityState === "visible") this.hurry();
        });
      }
    });
  }

  /** Closes the socket and stops exchanging. */
  close() {
    this.closed = true;
    if (this.timer !== null) this.env.clearTimeout(this.timer);
    this.ws?.close();
  }

  /** Waits for the schedule's next request (one is out at most). */
  wait() {
    if (this.closed || this.pending !== null) return;
    if (this.timer !== null) this.env.clearTimeout(this.timer);
    const due = this.schedule.nextRequestAt() / 1e6;
    this.timer = this.env.setTimeout(() => {
      this.timer = null;
      this.request();
    }, Math.max(0, due - this.pageNow()));
  }

  request() {
    if (this.closed || this.ws?.readyState !== 1) return;
    const id = this.nextId++;
    const t1 = this.pageNow();
    const text = JSON.stringify({ id, t1 });
    this.pending = { id, t1, text, timer: this.env.setTimeout(() => this.answered(null), ANSWER_WAIT_MS) };
    this.ws.send(text);
  }

  async receive(data) {
    const t4 = this.pageNow();
    let reply;
    try {
      reply = JSON.parse(data);
    } catch {
      return;
    }
    const pending = this.pending;
    if (pending === null || reply.id !== pending.id) return;
    let { t2, t3 } = reply;
    if (this.key !== null) {
      const checked = await checkReply(this.key, pending.text, reply, this.subtle());
      if (checked === null) {
        // Never used; the exchange waits on for the real reply.
        this.refused += 1;
        this.dispatchEvent(Object.assign(new Event("refused"), { refused: this.refused }));
        return;
      }
      ({ t2, t3 } = checked);
      if (this.pending !== pending) return;
    }
    this.answered({ t1: pending.t1, t2, t3, t4 });
  }

  /** One exchange done (null: no reply in time): into the model, then the next. */
  answered(exchange) {
    if (this.pending === null) return;
    this.env.clearTimeout(this.pending.timer);
    this.pending = null;
    const now = this.pageNow();
    this.checkJump(now);
    if (exchange !== null && this.model.add(exchange)) {
      this.model.forgetBefore(now - HORIZON_NS / 1e6);
      this.dispatchEvent(Object.assign(new Event("exchange"), { exchange }));
      const bound = this.bound();
      if (this.lastBound === null || Math.abs(bound - this.lastBound) > 0.05) {
        this.lastBound = bound;
        this.dispatchEvent(Object.assign(new Event("bound"), { bound }));
      }
    }
    this.schedule.done(now * 1e6, this.model.at(now));
    this.wait();
  }

  /** A page clock that moved unlike the wall clock (the device slept) drops what was learned. */
  checkJump(page) {
    const wall = this.env.Date ? this.env.Date.now() : Date.now();
    if (this.lastSeen !== null) {
      const pageMoved = page - this.lastSeen.page;
      const wallMoved = wall - this.lastSeen.wall;
      if (Math.abs(pageMoved - wallMoved) > 1000) {
        this.model = new ClockModel({ nsPerUnit: 1e6 });
        this.schedule = new Schedule(page * 1e6, this.every * 1e6);
        this.lastBound = null;
        this.dispatchEvent(new Event("jump"));
      }
    }
    this.lastSeen = { page, wall };
  }
}

/** A Clock on `url` (ws://server:port/clock), resolved once it has synced. */
export async function connectClock(url, options = {}) {
  return new Clock(url, options).start();
}
