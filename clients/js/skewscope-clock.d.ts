// Types for skewscope-clock.js.

/** A time since the epoch in `unit` (or read from its magnitude), in ms. */
export function toEpochMs(value: number | string, unit?: "auto" | "s" | "ms" | "us" | "ns"): number;

/** The page's clock: performance.timeOrigin + performance.now(), ms. */
export function pageNow(): number;

/** The clock model's constants, as in skewscope-core's clock module. */
export const MAX_DRIFT: number;
export const WANDER: number;
export const HORIZON_NS: number;

/** One four-timestamp exchange: t1/t4 on the page's monotonic clock, t2/t3 on the server's wall clock. */
export interface Exchange {
  t1: number;
  t2: number;
  t3: number;
  t4: number;
}

/** The region's extent at a moment, ns, relative to baseNs (the raw numbers the shared vectors hold). */
export interface Interval {
  baseNs: number;
  originNs: number;
  extent: { lo: number; hi: number; driftLo: number; driftHi: number };
}

/** The server's clock at a moment: server = page + agentMinusMonoNs, within ±boundNs. */
export interface ModelEstimate {
  agentMinusMonoNs: number;
  boundNs: number;
  driftPpb: number;
  driftBoundPpb: number;
}

/** The clock model without I/O: a port of skewscope-core's, held to its bits by shared vectors. */
export class ClockModel {
  constructor(options?: { nsPerUnit?: number });
  readonly size: number;
  readonly breaks: number;
  add(exchange: Exchange): boolean;
  forgetBefore(t: number): void;
  interval(t: number): Interval | null;
  at(t: number): ModelEstimate | null;
}

export function estimateOf(interval: Interval): ModelEstimate;

/** When to exchange: a port of skewscope-core's schedule; times in ns. */
export class Schedule {
  constructor(nowNs: number, intervalNs: number);
  readonly bursting: boolean;
  nextRequestAt(): number;
  done(nowNs: number, estimate: { boundNs: number; driftBoundPpb: number } | null): void;
  hurry(nowNs: number): boolean;
}

/** The server's clock at a page time, ms: server = page + offset, within ±bound. */
export interface Estimate {
  offset: number;
  bound: number;
  driftPpm: number;
}

/** What an action is told when it runs. */
export interface Acted {
  /** The server time it was asked for, ms since the epoch. */
  at: number;
  /** How long after `at` it ran, ms (0 when on time). */
  late: number;
}

/** Anything with the server's time. */
export interface TimeSource {
  now(): number;
}

export function scheduleAt(
  clock: TimeSource,
  at: number,
  fn: (acted: Acted) => void,
  options?: { spinMs?: number; env?: object },
): () => void;

/** The server's clock over the agent's /clock. Events: "exchange" (event.exchange), "bound" (event.bound), "jump", "close". */
export class Clock extends EventTarget implements TimeSource {
  constructor(url: string, options?: { every?: number; token?: string | null; WebSocketImpl?: typeof WebSocket; env?: object });
  readonly model: ClockModel;
  /** Whether only replies tagged under the token are used. */
  readonly authenticated: boolean;
  /** Replies refused for their tag so far (never used). */
  readonly refused: number;
  /** The server's clock at page time `at` (ms), or null before the first exchange. */
  estimate(at: number): Estimate | null;
  /** Asks for a burst of exchanges now; whether one starts. */
  hurry(): boolean;
  /** The server's wall time now, ms since the epoch. */
  now(): number;
  /** How far now() can be from the server's clock, ± ms. */
  bound(): number;
  /** Runs fn at server time `at` (ms since the epoch); returns a cancel function. */
  actAt(at: number, fn: (acted: Acted) => void, options?: { spinMs?: number }): () => void;
  start(): Promise<Clock>;
  close(): void;
}

/** A Clock on `url` (ws://server:port/clock), once it has synced. */
export function connectClock(url: string, options?: { every?: number; token?: string | null }): Promise<Clock>;

/** The time exchange's key from the agent's token, as the agent derives it (WebCrypto). */
export function timeKey(token: string, subtle: SubtleCrypto): Promise<CryptoKey>;

/** A reply's tagged t2 and t3 (ms) when its tag verifies for the request's exact text; else null. */
export function checkReply(key: CryptoKey, text: string, reply: object, subtle: SubtleCrypto): Promise<{ t2: number; t3: number } | null>;
