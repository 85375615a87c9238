// skewscope-clock.js: the server's wall clock in a page (or a node app), and
// actions at a time in it. No dependencies; an ES module. The skewscope agent
// serves it at GET /skewscope-clock.js and the time exchange at
// ws://SERVER:PORT/clock.
//
//   import { connectClock } from "http://server:8080/skewscope-clock.js";
//   const clock = await connectClock("ws://server:8080/clock", { name: "lobby-tv" });
//   const hub = clock.subscribe("ws://server:8080/ws");
//   hub.addEventListener("message", (event) =>
//     clock.actAt(JSON.parse(event.data).at * 1000, ({ late }) => show("go"), { message: event }));
//
// What it promises: clock.now() is the server's wall time to within
// clock.bound() milliseconds, while the page is visible. A page's timers are
// throttled when it is hidden, and what a screen shows waits for its next
// frame: those are outside the bound. With a `name`, the app's own actions
// (and, in a browser, the frames they were drawn in) are uploaded to the
// agent exactly once, so the report judges what the app did.

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
/** A pair that leaves the bound over this many times the best of the horizon did not find the link at its best: the next pair comes in half the interval. */
export const LOOSE_AFTER_PAIR = 1.15;

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
        let interval = this.intervalFor(estimate);
        if (bound !== null && this.best.length > 0 && bound > this.best[0][1] * LOOSE_AFTER_PAIR) {
          // The pair did not find the link at its best: the next sooner.
          interval = Math.max(Math.floor(interval / 2), Math.min(FASTEST_NS, interval));
        }
        this.roundStarted = Math.max(this.roundStarted + interval, nowNs);
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

// ---------------------------------------------------------------------------
// Acting at a time.
// ---------------------------------------------------------------------------

/** The largest time the agent takes in an upload, ms: 2^64 ns, to the whole ms below it. */
export const MAX_TIME_MS = 18446744073709;
/** setTimeout's largest delay (a larger one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/**
 * The shortest coarse wait worth a timer, ms. Browsers and node keep only
 * the whole milliseconds of a delay, fire a timer up to about 1 ms early,
 * and clamp a timer set from the fifth nested one to 4 ms: a wait shorter
 * than this would go through a chain of timers that ends late. Such a rest
 * is read out instead (a read-out of at most spinMs + 1 ms).
 */
const SHORTEST_WAIT_MS = 1;

/**
 * The delay to give setTimeout for a coarse wait of `ms`: rounded up, since
 * the timer truncates it, and a wait cut short by a fraction would end
 * before the read-out and need another timer.
 */
function coarseDelay(ms) {
  return Math.min(Math.ceil(ms), MAX_TIMER_MS);
}

/** Whether `t` is a time the agent takes: a finite number in [0, MAX_TIME_MS). */
function isTimeMs(t) {
  return typeof t === "number" && Number.isFinite(t) && t >= 0 && t < MAX_TIME_MS;
}

/**
 * Runs `fn` when `clock`'s time reaches `at` (server ms since the epoch):
 * one coarse timer to `spinMs` before (give or take the timer's
 * millisecond), then reading the clock until it has come. `fn` gets {at, late}: `late` is how long after `at` it ran (0 when
 * on time; a time already past runs at once, late). Returns a function that
 * cancels it. `env` is for tests: {now, setTimeout, clearTimeout}. A time
 * that is not a finite number is refused (TypeError): it would make a timer
 * that never ends, or one that fires at once forever.
 *
 * `lookAgain`, when given, is asked for the moment again as the coarse wait
 * ends, just before the final read-out (it returns the new `at`, or null to
 * keep it): a plan made with what was learned during the wait costs no
 * second coarse timer, which may fire milliseconds late, and no longer
 * read-out, which holds a core other apps need at that same moment.
 */
export function scheduleAt(clock, at, fn, { spinMs = 4, env = globalThis, lookAgain = null } = {}) {
  if (typeof at !== "number" || !Number.isFinite(at)) throw new TypeError(`skewscope clock: not a time to act: ${at}`);
  if (typeof spinMs !== "number" || !Number.isFinite(spinMs) || spinMs < 0) throw new TypeError(`skewscope clock: not a spin: ${spinMs}`);
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
    timer = null;
    if (cancelled) return;
    const left = at - clock.now();
    if (left < spinMs + SHORTEST_WAIT_MS) {
      const again = lookAgain === null ? null : lookAgain();
      if (typeof again === "number" && Number.isFinite(again) && again !== at) {
        at = again;
        // Moved further than a read-out: a coarse wait again, not a long
        // busy one (the look is asked again as it ends).
        const rest = at - clock.now();
        if (rest >= spinMs + SHORTEST_WAIT_MS) {
          timer = env.setTimeout(wait, coarseDelay(rest - spinMs));
          return;
        }
      }
      return fire();
    }
    timer = env.setTimeout(wait, coarseDelay(left - spinMs));
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
/** A /clock reply is far shorter; a longer frame is not parsed. */
const MAX_REPLY_CHARS = 16 * 1024;

/** What the agent binds its token to for the time exchange's key. */
const KEY_LABEL = "skewscope time exchange tag v2";
/** Bytes of the tag kept. */
const TAG_LEN = 16;
const TWO_TO_THE_64 = 2n ** 64n;

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

/** A random key per WebCrypto, to compare tags with (see checkReply). */
const comparisonKeys = new WeakMap();

function comparisonKey(subtle) {
  let key = comparisonKeys.get(subtle);
  if (key === undefined) {
    key = subtle.generateKey({ name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);
    comparisonKeys.set(subtle, key);
  }
  return key;
}

/** A tagged time: 7 to 20 decimal digits of ns, below 2^64. */
function taggedNs(digits) {
  return typeof digits === "string" && /^[0-9]{7,20}$/.test(digits) && BigInt(digits) < TWO_TO_THE_64;
}

/**
 * A tagged reply's t2 and t3 (ms, from the tagged ns digits) when its tag
 * is the one `key` gives the request's exact `text` and those digits; null
 * when untagged, malformed, out of range (over 20 digits, or 2^64 ns and
 * more: compared as BigInt) or when the tag does not verify (altered, or
 * another token). The tags are compared by WebCrypto's `verify` (an HMAC
 * under a random key of both, compared in constant time), never with
 * `===`: how long a comparison took must not tell how much of a forged tag
 * was right.
 */
export async function checkReply(key, text, reply, subtle) {
  if (reply === null || typeof reply !== "object") return null;
  const auth = reply.auth;
  if (auth === null || typeof auth !== "object") return null;
  const { t2_ns: t2ns, t3_ns: t3ns, tag } = auth;
  if (!taggedNs(t2ns) || !taggedNs(t3ns)) return null;
  if (typeof tag !== "string" || !/^[0-9a-f]{32}$/.test(tag)) return null;
  const mac = new Uint8Array(await subtle.sign("HMAC", key, new TextEncoder().encode(`${text}\n${t2ns}\n${t3ns}`)));
  const given = new Uint8Array(TAG_LEN);
  for (let i = 0; i < TAG_LEN; i++) given[i] = parseInt(tag.slice(2 * i, 2 * i + 2), 16);
  const compare = await comparisonKey(subtle);
  const expected = await subtle.sign("HMAC", compare, mac.subarray(0, TAG_LEN));
  if (!(await subtle.verify("HMAC", compare, expected, given))) return null;
  const ms = (ns) => Number(ns.slice(0, -6)) + Number(ns.slice(-6)) / 1e6;
  return { t2: ms(t2ns), t3: ms(t3ns) };
}

// ---------------------------------------------------------------------------
// Uploading the app's own actions: the agent's /ingest, JSON dialect
// (core/src/page_ingest.rs). Every event gets the run's next sequence
// number and is saved (localStorage, or the storage given) before anything
// else is done with it; the agent acknowledges what it stored durably, and
// only then is it dropped here. See the README's "What is uploaded".
// ---------------------------------------------------------------------------

/** This module's name in what it uploads. */
export const MODULE_VERSION = "skewscope-clock.js 1";
const INGEST_VERSION = 1;
/** A batch's JSON is kept under this (bytes), well inside the agent's 1 MiB. */
const MAX_BATCH_BYTES = 256 * 1024;
/** An event that cannot go in a batch alone is not recorded. */
const MAX_EVENT_BYTES = MAX_BATCH_BYTES - 64;
/** Longest text field the agent takes, bytes. */
const MAX_TEXT_BYTES = 1024;
const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 10_000;
/** After "busy", the next batch waits this long. */
const BUSY_WAIT_MS = 1000;
/** An answer later than this means a dead connection: it is opened again. */
const ACK_WAIT_MS = 30_000;
/** Storage keys: a name's runs, and each run's state and events. */
const INDEX_PREFIX = "skewscope-app:";
const RUN_PREFIX = "skewscope-app-run:";

function hex(bytes) {
  let s = "";
  for (const b of bytes) s += (b < 16 ? "0" : "") + b.toString(16);
  return s;
}

function randomHex(bytes, env = globalThis) {
  const crypto = env.crypto ?? globalThis.crypto;
  if (typeof crypto?.getRandomValues !== "function") {
    throw new Error("skewscope clock: recording a run needs crypto.getRandomValues");
  }
  return hex(crypto.getRandomValues(new Uint8Array(bytes)));
}

function utf8Length(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      n += 4;
      i += 1;
    } else n += 3;
  }
  return n;
}

/** `s` cut to at most `max` bytes of UTF-8, never inside a character. */
function truncateUtf8(s, max) {
  if (utf8Length(s) <= max) return s;
  let out = "";
  for (const ch of s) {
    if (utf8Length(out + ch) > max) break;
    out += ch;
  }
  return out;
}

/** No lone surrogate: the agent's JSON reader refuses one (a socket never delivers one). */
function wellFormed(s) {
  if (typeof s.isWellFormed === "function") return s.isWellFormed();
  // (No regex lookbehind: older Safari cannot parse the module with one.)
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xdc00 && c <= 0xdfff) return false;
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (!(d >= 0xdc00 && d <= 0xdfff)) return false;
      i += 1;
    }
  }
  return true;
}

function isText(s) {
  return typeof s === "string" && utf8Length(s) <= MAX_TEXT_BYTES && wellFormed(s);
}

const TIME_FIELDS = ["at_ms", "t1_ms", "t2_ms", "t3_ms", "t4_ms", "act_at_ms", "target_ms", "done_ms", "late_ms", "frame_ms"];
const TEXT_FIELDS = ["name", "url", "version", "run_id", "clock_id", "module", "runtime", "reason", "error"];

/**
 * Whether the agent's decoder takes `event`: a batch with one it refuses
 * would be refused whole, again at every try, and the run would stop there.
 */
function agentTakes(event) {
  for (const f of TIME_FIELDS) if (f in event && !isTimeMs(event[f])) return false;
  for (const f of ["offset_ms", "bound_ms"]) {
    if (!(f in event) || event[f] === null) continue;
    const v = event[f];
    if (typeof v !== "number" || !Number.isFinite(v) || Math.abs(v) >= MAX_TIME_MS || (f === "bound_ms" && v < 0)) return false;
  }
  if ("conn" in event && !(Number.isInteger(event.conn) && event.conn >= 0 && event.conn <= 0xffffffff)) return false;
  for (const f of TEXT_FIELDS) if (f in event && !isText(event[f])) return false;
  if ("message" in event) {
    const m = event.message;
    if (!(Number.isInteger(m.occurrence) && m.occurrence >= 0 && m.occurrence <= 0xffffffff)) return false;
    if ("text" in m ? !(typeof m.text === "string" && wellFormed(m.text)) : !/^(?:[0-9a-f]{2})*$/.test(m.hex)) return false;
  }
  return true;
}

/** A storage that forgets with the process (node without `storage`). */
export function memoryStorage() {
  const map = new Map();
  return {
    getItem: (key) => (map.has(key) ? map.get(key) : null),
    setItem: (key, value) => void map.set(key, String(value)),
    removeItem: (key) => void map.delete(key),
  };
}

/** The browser's localStorage, where there is one and it may be used. */
function localStorageOf(env) {
  try {
    const ls = env.localStorage ?? globalThis.localStorage;
    return ls && typeof ls.getItem === "function" ? ls : null;
  } catch {
    return null; // a sandboxed frame, or storage turned off
  }
}

/** This process's clock id where no localStorage keeps one. */
let processClockId = null;

/** Names this clock (timeOrigin + now) as the browser probe does: one per browser profile, else per process. */
function clockIdOf(env) {
  const ls = localStorageOf(env);
  if (ls !== null) {
    try {
      let id = ls.getItem("skewscope-clock-id");
      if (!id) {
        id = `page-${randomHex(8, env)}`;
        ls.setItem("skewscope-clock-id", id);
      }
      return id;
    } catch {
      // fall through: one for this process
    }
  }
  processClockId ??= `page-${randomHex(8, env)}`;
  return processClockId;
}

/** What runs this code: the browser's user agent, or node's version. */
function runtimeOf(env) {
  const node = globalThis.process?.versions?.node;
  const text = node ? `node ${globalThis.process.version}` : String(env.navigator?.userAgent ?? globalThis.navigator?.userAgent ?? "unknown");
  return truncateUtf8(text, MAX_TEXT_BYTES);
}

function isRunMeta(m) {
  const count = (n) => Number.isSafeInteger(n) && n >= 0;
  return (
    m !== null &&
    typeof m === "object" &&
    /^[0-9a-f]{32}$/.test(m.runId) &&
    /^[0-9a-f]{32}$/.test(m.secret) &&
    typeof m.url === "string" &&
    [m.nextSeq, m.acked, m.sent, m.nextConn].every(count) &&
    m.acked <= m.nextSeq &&
    typeof m.lastMs === "number" &&
    Number.isFinite(m.lastMs) &&
    m.lastMs >= 0 &&
    Array.isArray(m.open) &&
    m.open.every(count)
  );
}

/**
 * One run, as kept in storage: its state (`RUN_PREFIX + runId`: run id,
 * secret, next sequence, acknowledged, sent, next connection, open
 * connections, stopped, halted, last time) and each event not yet
 * acknowledged (`RUN_PREFIX + runId + ":" + seq`). An event is written
 * before the state that counts it, so a kill between the two loses only
 * an event nobody saw.
 */
class AppRun {
  constructor(storage, meta, events, problem) {
    this.storage = storage;
    this.meta = meta;
    /** Events not yet acknowledged, in order: {seq, text, bytes}. */
    this.events = events;
    this.problem = problem;
    /** Whether every write so far reached the storage. */
    this.persistent = true;
    /** Events not recorded because the agent would refuse them. */
    this.dropped = 0;
  }

  static fresh(storage, name, url, problem, env) {
    const meta = {
      v: 1,
      runId: randomHex(16, env),
      // 128 random bits the agent binds the run to: only a hello with them
      // may upload it. Kept here, sent in the hello only, never shown.
      secret: randomHex(16, env),
      name,
      url,
      nextSeq: 0,
      acked: 0,
      sent: 0,
      nextConn: 0,
      open: [],
      stopped: false,
      halted: false,
      lastMs: 0,
    };
    const run = new AppRun(storage, meta, [], problem);
    run.save();
    return run;
  }

  /** The run `runId` from storage, with its events; null when missing or damaged. */
  static load(storage, runId, problem) {
    let meta;
    try {
      meta = JSON.parse(storage.getItem(RUN_PREFIX + runId));
    } catch {
      return null;
    }
    if (!isRunMeta(meta) || meta.runId !== runId) return null;
    const events = [];
    for (let seq = meta.acked; seq < meta.nextSeq; seq++) {
      let text = null;
      try {
        text = storage.getItem(`${RUN_PREFIX}${runId}:${seq}`);
      } catch {
        text = null;
      }
      if (typeof text !== "string") {
        // Its tail never reached storage (it was full): the run ends before
        // the gap, with a "stopped" of its own (the one it had may be past it).
        for (let past = seq + 1; past < meta.nextSeq; past++) {
          try {
            storage.removeItem(`${RUN_PREFIX}${runId}:${past}`);
          } catch {
            // never read again
          }
        }
        meta.nextSeq = seq;
        meta.truncated = true;
        meta.stopped = false;
        break;
      }
      events.push({ seq, text, bytes: utf8Length(text) });
    }
    return new AppRun(storage, meta, events, problem);
  }

  get runId() {
    return this.meta.runId;
  }

  /** Stopped and every event acknowledged: nothing is left to do. */
  get finished() {
    return this.meta.stopped && this.meta.acked === this.meta.nextSeq;
  }

  write(key, value) {
    try {
      this.storage.setItem(key, value);
    } catch (e) {
      if (this.persistent) {
        this.persistent = false;
        this.problem(`cannot save run ${this.runId} (${e?.name ?? e}): events are kept in memory, and a restart before they are stored loses them`);
      }
    }
  }

  save() {
    this.write(RUN_PREFIX + this.runId, JSON.stringify(this.meta));
  }

  /** Gives `event` the run's next sequence number and keeps it until acknowledged; whether it did. */
  emit(event) {
    if (this.meta.stopped || this.meta.halted) return false;
    const text = JSON.stringify(event);
    const bytes = utf8Length(text);
    if (bytes > MAX_EVENT_BYTES || !agentTakes(event)) {
      this.dropped += 1;
      this.problem(`a ${event.kind} event the agent would refuse was not recorded (${bytes} bytes)`);
      return false;
    }
    const seq = this.meta.nextSeq;
    this.write(`${RUN_PREFIX}${this.runId}:${seq}`, text);
    this.meta.nextSeq = seq + 1;
    for (const f of ["at_ms", "done_ms", "frame_ms", "t4_ms"]) {
      if (typeof event[f] === "number" && event[f] > this.meta.lastMs) this.meta.lastMs = event[f];
    }
    if (event.kind === "stopped") this.meta.stopped = true;
    this.save();
    this.events.push({ seq, text, bytes });
    return true;
  }

  /** The agent stored every event before `next`: they are dropped here. */
  ack(next) {
    let removed = false;
    while (this.events.length > 0 && this.events[0].seq < next) {
      const { seq } = this.events.shift();
      try {
        this.storage.removeItem(`${RUN_PREFIX}${this.runId}:${seq}`);
      } catch {
        // left behind; never read again (below acked)
      }
      removed = true;
    }
    if (next > this.meta.acked || removed) {
      this.meta.acked = Math.max(this.meta.acked, next);
      this.save();
    }
  }

  /** Events up to `upTo` are about to be sent (an ack beyond what was sent is refused). */
  sentTo(upTo) {
    if (upTo > this.meta.sent) {
      this.meta.sent = upTo;
      this.save();
    }
  }

  /** Removes the run from storage. */
  remove() {
    for (const { seq } of this.events) {
      try {
        this.storage.removeItem(`${RUN_PREFIX}${this.runId}:${seq}`);
      } catch {
        // nothing more to do
      }
    }
    try {
      this.storage.removeItem(RUN_PREFIX + this.runId);
    } catch {
      // nothing more to do
    }
  }
}

/** The agent's /ingest for a clock URL: same scheme, host and port. */
function ingestUrlOf(clockUrl) {
  const u = new URL(clockUrl, globalThis.location?.href);
  u.pathname = "/ingest";
  u.search = "";
  u.hash = "";
  return u.href;
}

/** The next back-off: doubled up to RETRY_MAX_MS; the delay to wait is jittered. */
function backoff(retryMs) {
  const delay = Math.min(RETRY_MAX_MS, Math.max(RETRY_MIN_MS, retryMs * (0.75 + Math.random() / 2)));
  return { delay, next: Math.min(RETRY_MAX_MS, retryMs * 2) };
}

/**
 * Uploads one run to /ingest: a hello, then batches from the last
 * acknowledgement, one out at a time. A lost connection is opened again
 * after a jittered back-off (250 ms to 10 s, reset once the agent
 * answered), for as long as the clock is open. Never on the path of an
 * action: everything here runs from socket events and timers.
 */
class Uploader {
  constructor(run, { url, token, WebSocketImpl, env, problem, settled }) {
    this.run = run;
    this.url = url;
    this.token = token;
    this.WebSocketImpl = WebSocketImpl;
    this.env = env;
    this.problem = problem;
    this.settled = settled;
    this.ws = null;
    this.inFlight = false;
    this.retryMs = RETRY_MIN_MS;
    this.retryTimer = null;
    this.busyTimer = null;
    this.answerTimer = null;
    this.ended = false;
    /** Acknowledgements refused: beyond what was sent (a broken or hostile agent). */
    this.refusedAcks = 0;
    /** Answers that were not an ingest answer at all. */
    this.malformed = 0;
    this.state = "not started";
  }

  /** Nothing more to do: every event stored and the run stopped, or the run halted. */
  get done() {
    return this.run.finished || this.run.meta.halted;
  }

  start() {
    if (this.done) return this.finish();
    this.connect();
  }

  connect() {
    this.retryTimer = null;
    if (this.ended) return;
    const protocols = ["skewscope-ingest"];
    if (this.token) protocols.push(`skewscope-bearer.${this.token}`);
    let ws;
    try {
      ws = new this.WebSocketImpl(this.url, protocols);
    } catch (e) {
      this.state = `cannot open ${this.url}: ${e?.message ?? e}`;
      return this.retry();
    }
    this.ws = ws;
    this.inFlight = false;
    this.state = "connecting";
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.state = "connected";
      const { runId, secret } = this.run.meta;
      this.send(ws, JSON.stringify({ hello: { version: INGEST_VERSION, run_id: runId, secret } }));
    };
    ws.onmessage = (event) => {
      if (this.ws === ws) this.answer(event?.data);
    };
    ws.onerror = () => {};
    ws.onclose = (event) => {
      if (this.ws !== ws) return;
      this.state = `lost (${event?.code ?? "?"}${event?.reason ? `: ${event.reason}` : ""})`;
      this.drop();
      this.retry();
    };
  }

  send(ws, text) {
    this.inFlight = true;
    this.env.clearTimeout(this.answerTimer);
    this.answerTimer = this.env.setTimeout(() => {
      this.answerTimer = null;
      if (this.ws !== ws) return;
      this.state = `no answer in ${ACK_WAIT_MS / 1000} s`;
      this.drop();
      this.retry();
    }, ACK_WAIT_MS);
    try {
      ws.send(text);
    } catch {
      this.drop();
      this.retry();
    }
  }

  /** Forgets the connection (closing it); its events come no more. */
  drop() {
    const ws = this.ws;
    this.ws = null;
    this.inFlight = false;
    this.env.clearTimeout(this.answerTimer);
    this.env.clearTimeout(this.busyTimer);
    this.answerTimer = null;
    this.busyTimer = null;
    if (ws === null) return;
    ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    try {
      ws.close(1000);
    } catch {
      // already closed
    }
  }

  retry() {
    if (this.ended || this.retryTimer !== null) return;
    const { delay, next } = backoff(this.retryMs);
    this.retryMs = next;
    this.retryTimer = this.env.setTimeout(() => this.connect(), delay);
  }

  answer(data) {
    let reply = null;
    try {
      reply = typeof data === "string" ? JSON.parse(data) : null;
    } catch {
      reply = null;
    }
    const body = reply !== null && typeof reply === "object" ? (reply.ack ?? reply.busy) : undefined;
    const next = body !== null && typeof body === "object" ? body.next_seq : undefined;
    if (!Number.isSafeInteger(next) || next < 0) {
      this.malformed += 1;
      return;
    }
    const busy = reply.ack === undefined;
    this.env.clearTimeout(this.answerTimer);
    this.answerTimer = null;
    this.inFlight = false;
    const meta = this.run.meta;
    if (next > meta.sent || next > meta.nextSeq) {
      // It cannot have stored what it never got: a broken or hostile agent.
      // Nothing is dropped; the connection is opened again later.
      this.refusedAcks += 1;
      this.problem(`refused an acknowledgement of run ${meta.runId} up to ${next}: only ${meta.sent} event(s) were sent`);
      this.state = "refused an acknowledgement beyond what was sent";
      this.drop();
      return this.retry();
    }
    this.retryMs = RETRY_MIN_MS;
    if (next < meta.acked) {
      // The agent lost events it had stored (its data directory was replaced):
      // said, not hidden, and never sent again from 0.
      meta.halted = true;
      this.run.save();
      this.problem(`the agent lost events ${next} to ${meta.acked - 1} of run ${meta.runId} it had stored; this run is no longer uploaded`);
      this.state = "halted: the agent lost part of this run";
      this.end();
      return;
    }
    this.run.ack(next);
    if (this.done) return this.finish();
    if (busy) {
      this.state = `agent busy (${String(body.reason ?? "").slice(0, 200)}); waiting`;
      this.busyTimer = this.env.setTimeout(() => {
        this.busyTimer = null;
        this.kick();
      }, BUSY_WAIT_MS);
      return;
    }
    this.kick();
  }

  /** Sends the next batch, if the connection is idle and there is one. */
  kick() {
    const ws = this.ws;
    if (this.ended || ws === null || ws.readyState !== 1 || this.inFlight || this.busyTimer !== null) return;
    const events = this.run.events;
    if (events.length === 0) {
      this.state = "every event stored";
      return;
    }
    const first = events[0].seq;
    let bytes = 0;
    let n = 0;
    while (n < events.length && (n === 0 || bytes + events[n].bytes + 1 <= MAX_BATCH_BYTES - 64)) {
      bytes += events[n].bytes + 1;
      n += 1;
    }
    const body = events
      .slice(0, n)
      .map((e) => e.text)
      .join(",");
    this.run.sentTo(first + n);
    this.state = "sending";
    this.send(ws, `{"events":{"first_seq":${first},"events":[${body}]}}`);
  }

  finish() {
    this.state = this.run.meta.halted ? this.state : "every event stored";
    this.end();
  }

  /** Stops for good: no connection, no timer. */
  end() {
    if (this.ended) return;
    this.ended = true;
    this.env.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.drop();
    this.settled(this);
  }
}

/**
 * A named clock's record: the run it writes to (new, or the one a
 * previous process of the same name left unfinished), the runs it finishes
 * uploading in the background, and their uploaders.
 */
class AppRecorder {
  constructor(clock, { name, storage }) {
    this.clock = clock;
    this.env = clock.env;
    this.name = name;
    this.storage = storage ?? localStorageOf(clock.env) ?? memoryStorage();
    this.run = null;
    this.resumed = false;
    this.uploaders = new Map();
    this.queue = [];
    this.drainTimer = null;
    this.rawConnIndex = null;
    this.rawOccurrences = new Map();
    this.waiters = new Set();
  }

  problem(message) {
    this.clock.dispatchEvent(Object.assign(new Event("uploaderror"), { message }));
  }

  indexKey() {
    return INDEX_PREFIX + this.name;
  }

  readIndex() {
    try {
      const index = JSON.parse(this.storage.getItem(this.indexKey()));
      if (Array.isArray(index?.runs)) return index.runs.filter((id) => typeof id === "string" && /^[0-9a-f]{32}$/.test(id));
    } catch {
      // damaged: its runs are not found again
    }
    return [];
  }

  writeIndex(ids) {
    try {
      if (ids.length === 0) this.storage.removeItem(this.indexKey());
      else this.storage.setItem(this.indexKey(), JSON.stringify({ runs: ids }));
    } catch {
      // a full storage: the runs are still uploaded from memory
    }
  }

  /** Finds or starts the run, writes its first events, and starts uploading. */
  open() {
    const problem = (m) => this.problem(m);
    const url = this.clock.url;
    const runs = this.readIndex()
      .map((id) => AppRun.load(this.storage, id, problem))
      .filter((r) => r !== null);
    let live = null;
    for (let i = runs.length - 1; i >= 0; i--) {
      const m = runs[i].meta;
      if (!m.stopped && !m.halted && !m.truncated && m.url === url) {
        live = runs[i];
        break;
      }
    }
    const ids = [];
    for (const run of runs) {
      if (run === live) continue;
      if (run.meta.halted) {
        run.remove();
        continue;
      }
      if (!run.meta.stopped) {
        // Another clock URL, or a tail lost: it cannot go on; it ends where it stopped.
        this.closeOpen(run, "app restarted");
        run.emit({ kind: "stopped", at_ms: run.meta.lastMs });
        run.meta.stopped = true;
        run.save();
      }
      if (run.finished) {
        run.remove();
        continue;
      }
      ids.push(run.runId);
      this.upload(run);
    }
    if (live !== null) {
      this.resumed = true;
      this.closeOpen(live, "app restarted");
    } else {
      live = AppRun.fresh(this.storage, this.name, url, problem, this.env);
    }
    this.run = live;
    ids.push(live.runId);
    this.writeIndex(ids);
    const at = this.clock.pageNow();
    if (!this.resumed) {
      this.emit({ kind: "started", name: this.name, url, connections: 0, version: MODULE_VERSION, at_ms: at });
      this.emit({ kind: "identity", run_id: live.runId, clock_id: clockIdOf(this.env) });
      this.emit({ kind: "app", module: MODULE_VERSION, runtime: runtimeOf(this.env) });
    }
    this.emit({ kind: "clock_tags", keyed: this.clock.authenticated, refused: this.clock.refused, at_ms: at });
    this.upload(live);
  }

  /** The connections a run had open in the process before: closed at its last event. */
  closeOpen(run, reason) {
    for (const conn of run.meta.open) run.emit({ kind: "closed", conn, at_ms: run.meta.lastMs, reason });
    run.meta.open = [];
    run.save();
  }

  upload(run) {
    const uploader = new Uploader(run, {
      url: ingestUrlOf(run.meta.url),
      token: this.clock.token,
      WebSocketImpl: this.clock.WebSocketImpl,
      env: this.env,
      problem: (m) => this.problem(m),
      settled: (u) => this.settled(u),
    });
    this.uploaders.set(run.runId, uploader);
    uploader.start();
  }

  /** An uploader has nothing more to do: a finished run leaves storage. */
  settled(uploader) {
    const run = uploader.run;
    if (run.finished || run.meta.halted) {
      if (run !== this.run || run.finished) {
        run.remove();
        this.writeIndex(this.readIndex().filter((id) => id !== run.runId));
      }
    }
    for (const wake of this.waiters) wake();
  }

  /** Records `event` in the live run and lets its uploader know. */
  emit(event) {
    const run = this.run;
    if (run === null || !run.emit(event)) return false;
    this.uploaders.get(run.runId)?.kick();
    return true;
  }

  /** Runs `fn` after the current task (after every action due now): where events of actions are written. */
  later(fn) {
    this.queue.push(fn);
    if (this.drainTimer === null) this.drainTimer = this.env.setTimeout(() => this.drain(), 0);
  }

  drain() {
    this.env.clearTimeout(this.drainTimer);
    this.drainTimer = null;
    while (this.queue.length > 0) {
      try {
        this.queue.shift()();
      } catch (e) {
        this.problem(`an event could not be recorded: ${e?.message ?? e}`);
      }
    }
  }

  get runId() {
    return this.run?.runId ?? null;
  }

  /** The run's next connection number (kept: a restart never reuses one). */
  allocConn() {
    const conn = this.run.meta.nextConn;
    this.run.meta.nextConn = conn + 1;
    this.run.save();
    return conn;
  }

  /** The connection this process names raw messages (from the app's own socket) by. */
  rawConn() {
    this.rawConnIndex ??= this.allocConn();
    return this.rawConnIndex;
  }

  /** How many times this process was handed this raw payload before. */
  rawOccurrence(key) {
    const k = this.rawOccurrences.get(key) ?? 0;
    this.rawOccurrences.set(key, k + 1);
    return k;
  }

  opened(conn, atMs) {
    if (this.run.meta.stopped) return;
    if (!this.run.meta.open.includes(conn)) this.run.meta.open.push(conn);
    this.emit({ kind: "opened", conn, at_ms: atMs });
  }

  closed(conn, atMs, reason) {
    if (this.run.meta.stopped) return;
    this.run.meta.open = this.run.meta.open.filter((c) => c !== conn);
    this.emit({ kind: "closed", conn, at_ms: atMs, reason: truncateUtf8(reason, MAX_TEXT_BYTES) });
  }

  status() {
    const run = this.run;
    const up = run ? this.uploaders.get(run.runId) : undefined;
    let refusedAcks = 0;
    let pendingRuns = 0;
    for (const u of this.uploaders.values()) {
      refusedAcks += u.refusedAcks;
      if (u.run !== run && !u.ended) pendingRuns += 1;
    }
    return {
      name: this.name,
      runId: run?.runId ?? null,
      resumed: this.resumed,
      events: run?.meta.nextSeq ?? 0,
      acked: run?.meta.acked ?? 0,
      dropped: run?.dropped ?? 0,
      refusedAcks,
      lost: run?.meta.halted ?? false,
      persistent: run?.persistent ?? true,
      otherRuns: pendingRuns,
      state: up?.state ?? "not started",
    };
  }

  /**
   * Resolves once no uploader has anything more to do, or after
   * `timeoutMs`: whether every run was stored to its end (false also for a
   * run the agent lost part of).
   */
  whenUploaded(timeoutMs) {
    const idle = () => [...this.uploaders.values()].every((u) => u.ended || u.done);
    const stored = () => [...this.uploaders.values()].every((u) => u.run.finished);
    if (idle()) return Promise.resolve(stored());
    return new Promise((resolve) => {
      let timer = null;
      const wake = () => {
        if (!idle()) return;
        this.waiters.delete(wake);
        this.env.clearTimeout(timer);
        resolve(stored());
      };
      this.waiters.add(wake);
      timer = this.env.setTimeout(() => {
        this.waiters.delete(wake);
        resolve(stored());
      }, Math.max(0, Math.min(timeoutMs, MAX_TIMER_MS)));
    });
  }

  /** Writes "stopped", uploads what is left (at most `timeoutMs`), and ends every upload. */
  async stop(timeoutMs) {
    this.drain();
    this.emit({ kind: "stopped", at_ms: this.clock.pageNow() });
    const all = await this.whenUploaded(timeoutMs);
    this.end();
    return all;
  }

  /** Ends every upload and timer, writing nothing (a start that failed). */
  end() {
    this.env.clearTimeout(this.drainTimer);
    this.drainTimer = null;
    for (const u of this.uploaders.values()) u.end();
  }
}

// ---------------------------------------------------------------------------
// Subscriptions: the hub's broadcasts, each message stamped on read.
// ---------------------------------------------------------------------------

/** What a subscription knew of each message it delivered: for actAt's `message`. */
const stamped = new WeakMap();

function messageEvent(data, origin) {
  if (typeof MessageEvent === "function") return new MessageEvent("message", { data, origin });
  return Object.assign(new Event("message"), { data, origin });
}

/**
 * A WebSocket to the hub (or any server) that stays open: a connection
 * that closes or fails is opened again after a jittered back-off (250 ms to
 * 10 s) until `close()`. Each message is stamped on the app's clock the
 * moment its socket delivers it, before any listener runs: the `message`
 * event has `data` (a string, or an ArrayBuffer or Blob for binary, by
 * `binaryType`), `readMs` (that stamp), `conn` and `occurrence` (how many
 * times this connection carried the same payload before). Hand the event
 * to `clock.actAt(at, fn, { message: event })`.
 *
 * Each connection gets a new number from the run's counter and, on a named
 * clock, the URL's `probe=app.RUNID.CONN` label, by which the report finds
 * the hub's side of it. Events: "open" (each connection), "message",
 * "error", "reconnecting" (a connection ended, another follows after
 * `event.delay` ms), "close" (once, after `close()`). `socket` is the
 * current WebSocket.
 */
export class Subscription extends EventTarget {
  constructor(clock, url, protocols) {
    super();
    this.clock = clock;
    this.baseUrl = String(url);
    this.protocols = protocols;
    this.socket = null;
    /** The current connection's number (null between connections). */
    this.conn = null;
    this.connOpen = false;
    this.ended = false;
    this.closeTold = false;
    this.retryMs = RETRY_MIN_MS;
    this.retryTimer = null;
    this.occurrences = new Map();
    this.kind = "blob";
    this.handlers = {};
    // The URL must parse now (a WebSocket constructor would throw too).
    this.labelled(0);
    this.open();
  }

  /** `baseUrl`, with `probe=app.RUNID.CONN` on a named clock. */
  labelled(conn) {
    const u = new URL(this.baseUrl, globalThis.location?.href);
    const runId = this.clock.recorder?.runId;
    if (runId) u.searchParams.set("probe", `app.${runId}.${conn}`);
    return u.href;
  }

  get url() {
    return this.labelled(this.conn ?? 0);
  }

  get readyState() {
    if (this.ended) return this.socket === null ? 3 : 2;
    return this.socket?.readyState === 1 ? 1 : 0;
  }

  get protocol() {
    return this.socket?.protocol ?? "";
  }

  get extensions() {
    return this.socket?.extensions ?? "";
  }

  get bufferedAmount() {
    return this.socket?.bufferedAmount ?? 0;
  }

  /** "blob" (a WebSocket's default) or "arraybuffer", for binary messages. */
  get binaryType() {
    return this.kind;
  }

  set binaryType(kind) {
    if (kind === "blob" || kind === "arraybuffer") this.kind = kind;
  }

  /** Sends on the current connection (throws when none is open, as a WebSocket does). */
  send(data) {
    if (this.socket === null || this.socket.readyState !== 1) {
      throw new Error("skewscope subscription: not connected now (it reconnects by itself)");
    }
    this.socket.send(data);
  }

  open() {
    this.retryTimer = null;
    if (this.ended || this.clock.closed) return;
    // A connection that never opened keeps its number: only opened ones are recorded.
    if (this.conn === null) this.conn = this.clock.allocConn();
    const conn = this.conn;
    let ws;
    try {
      const url = this.labelled(conn);
      ws = this.protocols === undefined ? new this.clock.WebSocketImpl(url) : new this.clock.WebSocketImpl(url, this.protocols);
    } catch {
      this.dispatchEvent(new Event("error"));
      return this.retry();
    }
    ws.binaryType = "arraybuffer";
    this.socket = ws;
    ws.onopen = () => {
      if (this.socket !== ws || this.ended) return;
      this.connOpen = true;
      this.retryMs = RETRY_MIN_MS;
      this.occurrences = new Map();
      this.clock.recorder?.opened(conn, this.clock.pageNow());
      this.dispatchEvent(new Event("open"));
    };
    ws.onmessage = (event) => {
      const readMs = this.clock.pageNow();
      if (this.socket !== ws || this.ended) return;
      this.deliver(event?.data, readMs, conn, event?.origin ?? "");
    };
    ws.onerror = () => {
      if (this.socket === ws) this.dispatchEvent(new Event("error"));
    };
    ws.onclose = (event) => {
      if (this.socket !== ws) return;
      this.socket = null;
      if (this.connOpen) this.connEnded(`closed (${event?.code ?? "?"})`);
      if (this.ended) return this.told(event);
      this.retry();
    };
  }

  /** The open connection ended: recorded, and the next one gets a new number. */
  connEnded(reason) {
    this.clock.recorder?.closed(this.conn, this.clock.pageNow(), reason);
    this.connOpen = false;
    this.conn = null;
  }

  retry() {
    if (this.ended || this.clock.closed || this.retryTimer !== null) return;
    const { delay, next } = backoff(this.retryMs);
    this.retryMs = next;
    this.dispatchEvent(Object.assign(new Event("reconnecting"), { delay }));
    this.retryTimer = this.clock.env.setTimeout(() => this.open(), delay);
  }

  deliver(data, readMs, conn, origin) {
    let text = null;
    let bytes = null;
    if (typeof data === "string") text = data;
    else if (data instanceof ArrayBuffer) bytes = new Uint8Array(data);
    else if (ArrayBuffer.isView(data)) bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    let event;
    if (text === null && bytes === null) {
      // Not readable at once (a Blob): passed on, unstamped.
      event = messageEvent(data, origin);
    } else {
      const key = text ?? hex(bytes);
      const occurrence = this.occurrences.get(key) ?? 0;
      this.occurrences.set(key, occurrence + 1);
      const message = text !== null ? { text, occurrence } : { hex: key, occurrence };
      const out = bytes !== null && this.kind === "blob" && typeof Blob === "function" ? new Blob([bytes]) : data;
      event = messageEvent(out, origin);
      event.readMs = readMs;
      event.conn = conn;
      event.occurrence = occurrence;
      stamped.set(event, { conn, message, readMs, receipted: false });
    }
    this.dispatchEvent(event);
  }

  /** Closes for good: no more connections. */
  close(code = 1000, reason = "") {
    if (this.ended) return;
    this.ended = true;
    this.clock.env.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.clock.subscriptions.delete(this);
    const ws = this.socket;
    if (this.connOpen) this.connEnded("closed by the app");
    if (ws === null) {
      queueMicrotask(() => this.told({ code, reason, wasClean: true }));
      return;
    }
    try {
      ws.close(code, reason);
    } catch {
      ws.close();
    }
  }

  told(event) {
    if (this.closeTold) return;
    this.closeTold = true;
    this.socket = null;
    const { code = 1006, reason = "", wasClean = false } = event ?? {};
    this.dispatchEvent(Object.assign(new Event("close"), { code, reason, wasClean }));
  }
}

for (const type of ["open", "message", "error", "close", "reconnecting"]) {
  Object.defineProperty(Subscription.prototype, `on${type}`, {
    get() {
      return this.handlers[type] ?? null;
    },
    set(fn) {
      if (this.handlers[type]) this.removeEventListener(type, this.handlers[type]);
      this.handlers[type] = typeof fn === "function" ? fn : null;
      if (this.handlers[type]) this.addEventListener(type, this.handlers[type]);
    },
  });
}

// ---------------------------------------------------------------------------
// The clock.
// ---------------------------------------------------------------------------

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
 * did not verify; event.refused is the count so far), "disconnect" (the
 * /clock connection ended; it is opened again), "uploaderror"
 * (event.message: what the upload could not do), "close".
 *
 * With `token` (the agent's, as the native probe's --token-file), only
 * replies tagged under it are used: anyone on the path could otherwise move
 * this clock. It needs WebCrypto, which a browser gives a secure context
 * (https, or localhost) only; `authenticated` says whether it checks.
 *
 * With `name`, the app's own actions are recorded and uploaded to the
 * agent's /ingest (the clock URL's host, path /ingest) exactly once, as a
 * run the report lists under that name: see the README.
 *
 * Every /clock reply is checked before it is used: a frame that is not a
 * JSON object with the pending request's id, times that are not finite
 * numbers in (0, 2^64 ns), tagged digits over 20 or at 2^64 and more, are
 * ignored and counted (`malformed`, `refused`), never thrown or used.
 */
export class Clock extends EventTarget {
  constructor(url, { every = 1000, token = null, WebSocketImpl = globalThis.WebSocket, env = globalThis, name = null, storage = null } = {}) {
    super();
    if (typeof every !== "number" || !Number.isFinite(every) || every <= 0) {
      throw new TypeError(`skewscope clock: every must be a positive number of ms, not ${every}`);
    }
    if (name !== null && name !== undefined) {
      if (typeof name !== "string" || name === "" || !isText(name)) {
        throw new TypeError("skewscope clock: a name is a non-empty string of at most 1024 bytes");
      }
      if (!isText(String(url))) throw new TypeError("skewscope clock: a clock URL of at most 1024 bytes, to record a run");
      if (typeof (env.crypto ?? globalThis.crypto)?.getRandomValues !== "function") {
        throw new TypeError("skewscope clock: recording a run needs crypto.getRandomValues");
      }
      if (storage !== null && storage !== undefined && !["getItem", "setItem", "removeItem"].every((f) => typeof storage[f] === "function")) {
        throw new TypeError("skewscope clock: storage needs getItem, setItem and removeItem");
      }
    }
    this.token = token;
    this.key = null;
    this.refused = 0;
    /** Frames from /clock that were not a usable reply (ignored). */
    this.malformed = 0;
    /** Well-formed replies to an earlier request (past its window). */
    this.stale = 0;
    this.url = url;
    this.every = every;
    this.WebSocketImpl = WebSocketImpl;
    this.env = env;
    this.name = name ?? null;
    this.storage = storage ?? null;
    this.recorder = null;
    this.subscriptions = new Set();
    this.localConn = 0;
    this.model = new ClockModel({ nsPerUnit: 1e6 });
    this.schedule = new Schedule(this.pageNow() * 1e6, every * 1e6);
    this.pending = null;
    this.timer = null;
    this.nextId = 1;
    this.lastBound = null;
    this.lastSeen = null;
    this.closed = false;
    this.closing = null;
    this.starting = null;
    this.retryMs = RETRY_MIN_MS;
    this.retryTimer = null;
    this.ws = null;
  }

  /** The page's own clock (see pageNow), ms. */
  pageNow() {
    return this.env.pageNow ? this.env.pageNow() : pageNow();
  }

  /** performance.timeOrigin: where requestAnimationFrame's times start, on the page's clock. */
  timeOrigin() {
    return this.env.timeOrigin ?? performance.timeOrigin;
  }

  /** The server's clock at page time `at` (ms): {offset, bound} in ms (server = page + offset), or null. */
  estimate(at) {
    const e = this.model.at(at);
    if (e === null) return null;
    const offset = e.agentMinusMonoNs / 1e6;
    const bound = e.boundNs / 1e6;
    // Never a NaN or an infinity out: the model took only finite exchanges.
    if (!Number.isFinite(offset) || !Number.isFinite(bound)) return null;
    return { offset, bound, driftPpm: e.driftPpb / 1e3 };
  }

  /** The server's wall time now, ms since the epoch. */
  now() {
    const at = this.pageNow();
    this.checkJump(at);
    const e = this.estimate(at);
    if (e === null) throw new Error("skewscope clock: not synced yet");
    return at + e.offset;
  }

  /** How far now() can be from the server's clock, ± ms (Infinity before the first exchange). */
  bound() {
    const at = this.pageNow();
    this.checkJump(at);
    const e = this.estimate(at);
    return e === null ? Infinity : e.bound;
  }

  /** The run being recorded (32 hex digits), with a name; else null. */
  get runId() {
    return this.recorder?.runId ?? null;
  }

  /** The upload's state, with a name; else null. */
  get upload() {
    return this.recorder?.status() ?? null;
  }

  /** A connection number: the run's (kept across restarts) with a name, else this clock's. */
  allocConn() {
    return this.recorder ? this.recorder.allocConn() : this.localConn++;
  }

  /**
   * The hub's broadcasts (or any server's messages), each stamped on read:
   * a WebSocket-like Subscription that reconnects by itself, labelled
   * `probe=app.RUNID.CONN` on a named clock. See Subscription.
   */
  subscribe(url, protocols) {
    if (this.closed) throw new Error("skewscope clock: closed");
    const subscription = new Subscription(this, url, protocols);
    this.subscriptions.add(subscription);
    return subscription;
  }

  /**
   * Runs fn at server time `at` (ms since the epoch), never before it by
   * this clock; `fn` gets {at, late} (late: ms after `at` it ran; a time
   * already past runs at once). Returns a function that cancels it.
   *
   * The moment is planned on the page's clock as the browser probe plans
   * it: mapped with the model at the message's read; a timer to `spinMs`
   * (4) before, then mapped again with the exchanges that came during the
   * lead, and the clock is read until it has come. A bound wider
   * than the time left asks for a burst of exchanges.
   *
   * `message` (a Subscription's message event, the raw text or bytes from
   * the app's own socket, or its MessageEvent): on a named clock the
   * receipt and the action are recorded (and, in a browser, the frame it
   * was drawn in, the next animation frame), after the callback, never
   * before it. A time that is not a finite number is a TypeError, one
   * outside [0, 2^64 ns) a RangeError.
   */
  actAt(at, fn, options = {}) {
    if (typeof at !== "number" || !Number.isFinite(at)) throw new TypeError(`skewscope clock: not a time to act: ${at}`);
    if (at < 0 || at >= MAX_TIME_MS) throw new RangeError(`skewscope clock: not a time to act (ms since the epoch): ${at}`);
    if (typeof fn !== "function") throw new TypeError("skewscope clock: actAt needs a function");
    const { message, spinMs = 4, env = this.env } = options ?? {};
    if (typeof spinMs !== "number" || !Number.isFinite(spinMs) || spinMs < 0) throw new TypeError(`skewscope clock: not a spin: ${spinMs}`);
    const seen = message === undefined || message === null ? null : this.messageOf(message);
    const read = seen?.readMs ?? this.pageNow();
    const recorder = this.recorder;
    if (recorder !== null && seen !== null && !seen.receipted) {
      seen.receipted = true;
      recorder.later(() => recorder.emit({ kind: "receipt", conn: seen.conn, message: seen.message, at_ms: seen.readMs }));
    }
    const plan = () => {
      const first = this.estimate(read);
      if (first === null) return { target: at, estimate: null };
      const estimate = this.estimate(at - first.offset) ?? first;
      return { target: at - estimate.offset, estimate };
    };
    let { target, estimate } = plan();
    if (estimate === null || estimate.bound > target - read) this.hurry();
    const page = { now: () => this.pageNow() };
    let cancelled = false;
    const fire = () => {
      if (cancelled) return;
      const done = this.pageNow();
      try {
        fn({ at, late: Math.max(0, done - target) });
      } finally {
        if (recorder !== null && seen !== null) this.recordAction(recorder, seen, { at, estimate, target, done, read });
      }
    };
    // The last look is where the coarse wait ends, before the read-out:
    // the exchanges that came during the lead count, at no cost in time.
    const lookAgain = () => {
      const again = plan();
      if (again.estimate !== null) ({ target, estimate } = again);
      return target;
    };
    const cancel = scheduleAt(page, target, fire, { spinMs, env, lookAgain });
    return () => {
      cancelled = true;
      cancel();
    };
  }

  /** The action's event, then (in a browser) the frame it was drawn in: written after the callback. */
  recordAction(recorder, seen, { at, estimate, target, done, read }) {
    recorder.later(() =>
      recorder.emit({
        kind: "action",
        conn: seen.conn,
        message: seen.message,
        act_at_ms: at,
        offset_ms: estimate ? estimate.offset : null,
        bound_ms: estimate ? estimate.bound : null,
        target_ms: target,
        done_ms: done,
        late_ms: Math.max(0, read - target),
      }),
    );
    const raf = this.env.requestAnimationFrame;
    if (typeof raf === "function") {
      raf.call(this.env, (frameTime) => {
        const frameMs = this.timeOrigin() + frameTime;
        recorder.later(() => recorder.emit({ kind: "frame", conn: seen.conn, message: seen.message, frame_ms: frameMs }));
      });
    }
  }

  /** What actAt's `message` names: {conn, message, readMs, receipted}; null when nothing is recorded. */
  messageOf(message) {
    const known = typeof message === "object" ? stamped.get(message) : undefined;
    if (known !== undefined) return known;
    let data = message;
    if (typeof message === "object" && !(message instanceof ArrayBuffer) && !ArrayBuffer.isView(message) && "data" in message) {
      data = message.data; // another socket's MessageEvent: its payload, read now
    }
    const text = typeof data === "string";
    const bytes = data instanceof ArrayBuffer || ArrayBuffer.isView(data);
    if (!text && !bytes) {
      if (typeof Blob === "function" && data instanceof Blob) {
        // Not readable at once: acted on, not recorded.
        this.recorder?.problem('a Blob message cannot be recorded (set the socket\'s binaryType = "arraybuffer")');
        return null;
      }
      throw new TypeError("skewscope clock: message is a subscription's message event, or a message's text or bytes");
    }
    const recorder = this.recorder;
    if (recorder === null) return null;
    const payload = text ? { text: data } : { hex: hex(data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength)) };
    const occurrence = recorder.rawOccurrence(payload.text ?? payload.hex);
    return { conn: recorder.rawConn(), message: { ...payload, occurrence }, readMs: this.pageNow(), receipted: false };
  }

  /** Asks for a burst now (an action is near and the bound is wide); whether one starts. */
  hurry() {
    if (this.closed || !this.schedule.hurry(this.pageNow() * 1e6)) return false;
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

  /** Opens the socket and starts exchanging (and, with a name, recording); resolves once one reply was kept. */
  async start() {
    if (typeof this.WebSocketImpl !== "function") {
      throw new Error("skewscope clock: no WebSocket here (node 20 needs --experimental-websocket; or pass WebSocketImpl)");
    }
    if (this.token !== null) {
      const subtle = this.subtle();
      if (subtle === null) {
        throw new Error("skewscope clock: a token needs WebCrypto, which a browser gives only a secure context (https, or localhost)");
      }
      this.key = await timeKey(this.token, subtle);
    }
    if (this.name !== null) {
      this.recorder = new AppRecorder(this, { name: this.name, storage: this.storage });
      this.recorder.open();
      this.addEventListener("exchange", (e) => {
        const x = e.exchange;
        this.recorder.emit({ kind: "exchange", t1_ms: x.t1, t2_ms: x.t2, t3_ms: x.t3, t4_ms: x.t4 });
      });
      this.addEventListener("refused", (e) => {
        this.recorder.emit({ kind: "clock_tags", keyed: this.authenticated, refused: e.refused, at_ms: this.pageNow() });
      });
    }
    if (this.env.document?.addEventListener) {
      // Timers were throttled while hidden: exchange again at once.
      this.env.document.addEventListener("visibilitychange", () => {
        if (this.env.document.visibilityState === "visible") this.hurry();
      });
    }
    return new Promise((resolve, reject) => {
      this.starting = {
        resolve,
        reject: (error) => {
          this.starting = null;
          // The run stays as it is for the next start: no "stopped".
          this.closed = true;
          this.teardown();
          this.recorder?.end();
          reject(error);
        },
      };
      this.connect();
    });
  }

  /** Opens /clock; a connection that ends once synced is opened again (jittered back-off). */
  connect() {
    this.retryTimer = null;
    if (this.closed) return;
    let ws;
    try {
      ws = new this.WebSocketImpl(this.url);
    } catch (e) {
      if (this.starting) return this.starting.reject(new Error(`skewscope clock: cannot reach ${this.url}: ${e?.message ?? e}`));
      return this.reconnect();
    }
    this.ws = ws;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.retryMs = RETRY_MIN_MS;
      this.wait();
    };
    ws.onerror = () => {
      if (this.ws === ws && this.starting) this.starting.reject(new Error(`skewscope clock: cannot reach ${this.url}`));
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.lose();
      if (this.closed) return;
      if (this.starting) return this.starting.reject(new Error(`skewscope clock: ${this.url} closed before one exchange`));
      this.dispatchEvent(new Event("disconnect"));
      this.reconnect();
    };
    ws.onmessage = (event) => {
      const t4 = this.pageNow();
      if (this.ws !== ws) return;
      this.receive(event?.data, t4);
    };
  }

  reconnect() {
    if (this.closed || this.retryTimer !== null) return;
    const { delay, next } = backoff(this.retryMs);
    this.retryMs = next;
    this.retryTimer = this.env.setTimeout(() => this.connect(), delay);
  }

  /** The request out, if any, will not be answered. */
  lose() {
    if (this.pending !== null) {
      this.env.clearTimeout(this.pending.timer);
      this.pending = null;
    }
  }

  /** Stops exchanging: no timer, no socket. */
  teardown() {
    if (this.timer !== null) this.env.clearTimeout(this.timer);
    this.timer = null;
    if (this.retryTimer !== null) this.env.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.lose();
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onerror = ws.onclose = null;
      try {
        ws.close();
      } catch {
        // already closed
      }
    }
  }

  /**
   * Closes the socket and stops exchanging, and every subscription. With a
   * name: writes "stopped" and uploads what is left, for at most `timeout`
   * ms (5000); resolves to whether every event was stored (what was not
   * stays in storage for the next start). Pending actions still run, on
   * what was learned, but are not recorded.
   */
  close({ timeout = 5000 } = {}) {
    if (this.closing !== null) return this.closing;
    const wasStarting = this.starting;
    this.closed = true;
    this.teardown();
    // Actions already done are written before their connections close.
    this.recorder?.drain();
    for (const s of [...this.subscriptions]) s.close(1000, "clock closed");
    const limit = typeof timeout === "number" && Number.isFinite(timeout) && timeout >= 0 ? timeout : 5000;
    if (wasStarting) {
      this.starting = null;
      this.recorder?.end();
      wasStarting.reject(new Error("skewscope clock: closed before it synced"));
      this.closing = Promise.resolve(false);
    } else {
      this.closing = this.recorder ? this.recorder.stop(limit) : Promise.resolve(true);
    }
    this.dispatchEvent(new Event("close"));
    return this.closing;
  }

  /** Waits for the schedule's next request (one is out at most). */
  wait() {
    if (this.closed || this.pending !== null) return;
    if (this.timer !== null) this.env.clearTimeout(this.timer);
    const due = this.schedule.nextRequestAt() / 1e6;
    this.timer = this.env.setTimeout(() => {
      this.timer = null;
      this.request();
    }, Math.min(Math.max(0, due - this.pageNow()), MAX_TIMER_MS));
  }

  request() {
    if (this.closed || this.ws?.readyState !== 1) return;
    const id = this.nextId++;
    const t1 = this.pageNow();
    const text = JSON.stringify({ id, t1 });
    this.pending = { id, t1, text, timer: this.env.setTimeout(() => this.answered(null), ANSWER_WAIT_MS) };
    try {
      this.ws.send(text);
    } catch {
      // counted lost when its wait ends
    }
  }

  /**
   * One frame from /clock (t4: when it came). Never throws, and its
   * promise never rejects: whatever came is used, or ignored and counted.
   */
  receive(data, t4 = this.pageNow()) {
    return this.check(data, t4).catch(() => {
      this.malformed += 1;
    });
  }

  async check(data, t4) {
    if (this.closed) return;
    // The frame itself: a JSON object's text, short, with the pending id.
    if (typeof data !== "string" || data.length > MAX_REPLY_CHARS) return void (this.malformed += 1);
    let reply;
    try {
      reply = JSON.parse(data);
    } catch {
      return void (this.malformed += 1);
    }
    if (reply === null || typeof reply !== "object" || Array.isArray(reply)) return void (this.malformed += 1);
    const id = reply.id;
    if (!Number.isSafeInteger(id)) return void (this.malformed += 1);
    const pending = this.pending;
    if (pending === null || id !== pending.id) return void (this.stale += 1);
    let t2;
    let t3;
    if (this.key !== null) {
      const checked = await checkReply(this.key, pending.text, reply, this.subtle());
      if (checked === null) {
        // Never used; the exchange waits on for the real reply.
        this.refused += 1;
        this.dispatchEvent(Object.assign(new Event("refused"), { refused: this.refused }));
        return;
      }
      ({ t2, t3 } = checked);
      if (this.pending !== pending || this.closed) return;
    } else {
      ({ t2, t3 } = reply);
    }
    // In range, and possible: the agent answered after it received, and in
    // less time than the request took there and back.
    const inRange = (t) => typeof t === "number" && Number.isFinite(t) && t > 0 && t < MAX_TIME_MS;
    if (!inRange(t2) || !inRange(t3) || t3 < t2 || t3 - t2 > t4 - pending.t1) return void (this.malformed += 1);
    this.answered({ t1: pending.t1, t2, t3, t4 });
  }

  /** One exchange done (null: no reply in time): into the model, then the next. */
  answered(exchange) {
    if (this.pending === null || this.closed) return;
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
      if (this.starting !== null && this.model.size > 0) {
        const { resolve } = this.starting;
        this.starting = null;
        resolve(this);
      }
    }
    this.schedule.done(now * 1e6, this.model.at(now));
    this.wait();
  }

  /**
   * A page clock that moved unlike the wall clock (the device slept) drops
   * what was learned: checked at each exchange and at each now() and
   * bound(), so an answer after a wake never comes from the model of
   * before it. A page sees only sleeps over 1 s (a wall clock stepped by
   * less is not told apart); Python's module, on Linux, sees any over 1 ms.
   */
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

/**
 * A Clock on `url` (ws://server:port/clock), resolved once it has synced.
 * Options: every, token, and, to upload the app's own actions, name and
 * storage (see Clock and the README).
 */
export async function connectClock(url, options = {}) {
  return new Clock(url, options).start();
}
