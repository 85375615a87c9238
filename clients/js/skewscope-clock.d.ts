// Types for skewscope-clock.js.

/** A time since the epoch in `unit` (or read from its magnitude), in ms. */
export function toEpochMs(value: number | string, unit?: "auto" | "s" | "ms" | "us" | "ns"): number;

/** The page's clock: performance.timeOrigin + performance.now(), ms. */
export function pageNow(): number;

export const DRIFT_UNFITTED: number;
export const DRIFT_FITTED: number;
export const FIT_SPAN_MS: number;

/** One four-timestamp exchange, ms: t1/t4 on the page, t2/t3 on the server. */
export interface Exchange {
  t1: number;
  t2: number;
  t3: number;
  t4: number;
}

/** The server's clock at a page time: server = page + offset, within ±bound ms. */
export interface Estimate {
  offset: number;
  bound: number;
  /** Fitted drift (ms per ms), or null before FIT_SPAN_MS of exchanges. */
  drift: number | null;
}

/** The clock model without I/O. */
export class ClockFilter {
  constructor(options?: { window?: number });
  add(exchange: Exchange): boolean;
  reset(): void;
  readonly size: number;
  estimate(at: number): Estimate | null;
  drift(): number | null;
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
  constructor(url: string, options?: { burst?: number; every?: number; WebSocketImpl?: typeof WebSocket; env?: object });
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
export function connectClock(url: string, options?: { burst?: number; every?: number }): Promise<Clock>;
