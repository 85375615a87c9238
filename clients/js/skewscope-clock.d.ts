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

/** Refuses (TypeError) a time that is not a finite number, and a spin that is not one ≥ 0. */
export function scheduleAt(
  clock: TimeSource,
  at: number,
  fn: (acted: Acted) => void,
  options?: {
    spinMs?: number;
    env?: object;
    /** Asked for the moment again as the coarse wait ends; returns the new `at`, or null to keep it. */
    lookAgain?: (() => number | null) | null;
  },
): () => void;

/** The largest time the agent takes in an upload, ms (2^64 ns, to the whole ms below). */
export const MAX_TIME_MS: number;
/** This module's name in what it uploads: "skewscope-clock.js 1". */
export const MODULE_VERSION: string;

/** localStorage's three calls: where a named clock keeps its run until the agent has it. Synchronous. */
export interface RunStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

/** A storage that forgets with the process (what a named clock uses in node without `storage`). */
export function memoryStorage(): RunStorage;

export interface ClockOptions {
  /** How often to exchange once the bound has settled, ms (1000). */
  every?: number;
  /** The agent's token: only replies tagged under it are used; also offered to /ingest as `skewscope-bearer.TOKEN`. */
  token?: string | null;
  /**
   * What the report lists this app as. With it, the app's own actions are
   * uploaded to the agent's /ingest (the clock URL's host, path /ingest)
   * exactly once; without it nothing is uploaded. At most 1024 bytes.
   */
  name?: string | null;
  /** Where the run is kept: localStorage in a browser; this if given; else memory (a restart loses what was not acknowledged). */
  storage?: RunStorage | null;
  /** For node 20 (no global WebSocket without --experimental-websocket) and tests. */
  WebSocketImpl?: typeof WebSocket;
  /** For tests: {pageNow, setTimeout, clearTimeout, Date, crypto, requestAnimationFrame, timeOrigin, ...}. */
  env?: object;
}

/** A subscription's message: a MessageEvent stamped on read. */
export interface StampedMessageEvent extends MessageEvent {
  /** When the socket delivered it, on the app's clock (performance.timeOrigin + performance.now()), ms. */
  readMs: number;
  /** The connection it came on (the run's connection number). */
  conn: number;
  /** How many times this connection carried the same payload before (0 the first). */
  occurrence: number;
}

/**
 * The hub's broadcasts (or any server's messages): a WebSocket-like object
 * that reconnects by itself (250 ms to 10 s, jittered) until close(). Each
 * connection gets a new number and, on a named clock, the URL's
 * `probe=app.RUNID.CONN` label. Events: "open" (each connection),
 * "message" (a StampedMessageEvent, or a plain one for data it could not
 * read at once), "error", "reconnecting" (event.delay ms until the next
 * connection), "close" (once, after close()).
 */
export class Subscription extends EventTarget {
  /** The current connection's number; null between connections. */
  readonly conn: number | null;
  /** The current WebSocket, if any. */
  readonly socket: WebSocket | null;
  /** The URL of the current (or next) connection, label included. */
  readonly url: string;
  /** 0 connecting (or waiting to reconnect), 1 open, 2 closing, 3 closed for good. */
  readonly readyState: number;
  readonly protocol: string;
  readonly extensions: string;
  readonly bufferedAmount: number;
  /** "blob" (the default, as a WebSocket's) or "arraybuffer". */
  binaryType: "blob" | "arraybuffer";
  onopen: ((event: Event) => void) | null;
  onmessage: ((event: StampedMessageEvent) => void) | null;
  onerror: ((event: Event) => void) | null;
  onclose: ((event: Event) => void) | null;
  onreconnecting: ((event: Event) => void) | null;
  /** Sends on the current connection; throws when none is open. */
  send(data: string | ArrayBufferLike | ArrayBufferView | Blob): void;
  /** Closes for good (recorded as "closed by the app"). */
  close(code?: number, reason?: string): void;
}

/** What actAt's `message` may be: a subscription's event, or the raw payload (or MessageEvent) from the app's own socket. */
export type ActedMessage = StampedMessageEvent | MessageEvent | string | ArrayBuffer | ArrayBufferView;

/** A named clock's upload, as it stands. */
export interface UploadState {
  name: string;
  /** The run being recorded, 32 hex digits. */
  runId: string | null;
  /** Whether it is a run a previous process of this name left unfinished. */
  resumed: boolean;
  /** Events the run has written. */
  events: number;
  /** Events the agent has acknowledged (stored durably). */
  acked: number;
  /** Events not recorded because the agent would refuse them (e.g. a payload over 256 KiB). */
  dropped: number;
  /** Acknowledgements refused: beyond what was sent. */
  refusedAcks: number;
  /** The agent lost events it had acknowledged: this run is no longer uploaded. */
  lost: boolean;
  /** False once a write to the storage failed (it was full): a restart may lose events. */
  persistent: boolean;
  /** Earlier runs of this name still being uploaded. */
  otherRuns: number;
  state: string;
}

/**
 * The server's clock over the agent's /clock. Events: "exchange"
 * (event.exchange), "bound" (event.bound), "jump", "refused"
 * (event.refused), "disconnect" (/clock is opened again), "uploaderror"
 * (event.message), "close".
 */
export class Clock extends EventTarget implements TimeSource {
  constructor(url: string, options?: ClockOptions);
  readonly model: ClockModel;
  /** Whether only replies tagged under the token are used. */
  readonly authenticated: boolean;
  /** Replies refused for their tag (or its digits) so far (never used). */
  readonly refused: number;
  /** Frames from /clock that were not a usable reply: not a JSON object with the pending id, times not finite or out of range (never used). */
  readonly malformed: number;
  /** Well-formed replies to an earlier request, past its window. */
  readonly stale: number;
  /** The name given (null: nothing is uploaded). */
  readonly name: string | null;
  /** The run being recorded, with a name; else null. */
  readonly runId: string | null;
  /** The upload's state, with a name; else null. */
  readonly upload: UploadState | null;
  /** The server's clock at page time `at` (ms), or null before the first exchange. */
  estimate(at: number): Estimate | null;
  /** Asks for a burst of exchanges now; whether one starts. */
  hurry(): boolean;
  /** The server's wall time now, ms since the epoch (throws before the first exchange). */
  now(): number;
  /** How far now() can be from the server's clock, ± ms (Infinity before the first exchange). */
  bound(): number;
  /** The hub's broadcasts, each message stamped on read; labelled `probe=app.RUNID.CONN` on a named clock. */
  subscribe(url: string, protocols?: string | string[]): Subscription;
  /**
   * Runs fn at server time `at` (ms since the epoch); returns a cancel
   * function. With `message` on a named clock, the receipt and the action
   * (and, in a browser, the frame it was drawn in) are uploaded, after the
   * callback. TypeError for a time that is not a finite number, RangeError
   * for one outside [0, MAX_TIME_MS).
   */
  actAt(at: number, fn: (acted: Acted) => void, options?: { spinMs?: number; message?: ActedMessage }): () => void;
  start(): Promise<Clock>;
  /**
   * Closes /clock and every subscription. With a name: writes "stopped",
   * uploads what is left for at most `timeout` ms (5000), and resolves to
   * whether every event was stored (what was not stays for the next start).
   */
  close(options?: { timeout?: number }): Promise<boolean>;
}

/** A Clock on `url` (ws://server:port/clock), once it has synced. */
export function connectClock(url: string, options?: ClockOptions): Promise<Clock>;

/** The time exchange's key from the agent's token, as the agent derives it (WebCrypto). */
export function timeKey(token: string, subtle: SubtleCrypto): Promise<CryptoKey>;

/**
 * A reply's tagged t2 and t3 (ms) when its tag verifies for the request's
 * exact text (compared with subtle.verify); null when untagged, malformed,
 * over 20 digits or at 2^64 ns and more, or when it does not verify.
 */
export function checkReply(key: CryptoKey, text: string, reply: unknown, subtle: SubtleCrypto): Promise<{ t2: number; t3: number } | null>;
