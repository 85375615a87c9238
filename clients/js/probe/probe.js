// The skewscope browser probe: the page the agent serves at /probe. It
// connects to a broadcast server as the device's own pages do, stamps each
// message's receipt (and its action, with act-at) on the page's clock,
// syncs that clock with the agent's /clock, and uploads every event to the
// agent's /ingest exactly once, across reloads and dropped connections.
//
//   /probe?url=ws://server:8000/ws&name=lobby-tv[&act-at=/at][&act-unit=s]
//          [&connections=1][&token=T][&new-run=1][&spin-ms=4]
//
// Exactly once: every event gets the next sequence number of the run and
// is saved in localStorage before anything else happens to it; the agent
// acknowledges what it stored durably, and only then is it dropped here.
// After a reload the page resumes the same run (same name and url) and
// sends from what the agent acknowledges.

import { Clock, pageNow, scheduleAt, toEpochMs } from "/skewscope-clock.js";

const INGEST_VERSION = 1;
/** A batch's JSON is kept under this, well inside the agent's 1 MiB. */
const MAX_BATCH_CHARS = 256 * 1024;
const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 10_000;

const params = new URLSearchParams(location.search);
const url = params.get("url");
const name = params.get("name") || "browser";
const actPointer = params.get("act-at");
const actUnit = params.get("act-unit") || "auto";
const connections = Math.max(1, Math.min(64, Number(params.get("connections") || 1)));
const token = params.get("token");
/** How long before an action the page stops waiting on a timer and reads the clock in a loop. */
const spinMs = Math.max(0, Math.min(50, Number(params.get("spin-ms") ?? 4)));
const agentWs = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}`;

const $ = (id) => document.getElementById(id);
const shown = { connected: 0, messages: 0, actions: 0, late: 0, lost: 0 };

function show(id, text) {
  $(id).textContent = text;
}

function setState(text, bad = false) {
  const el = $("state");
  el.textContent = text;
  el.className = bad ? "state bad" : "state";
}

function randomHex(bytes) {
  return hex(crypto.getRandomValues(new Uint8Array(bytes)));
}

// ---- the run and its outbox, kept in localStorage ----

const storeKey = `skewscope-probe:${name}`;

function loadRun() {
  try {
    const saved = JSON.parse(localStorage.getItem(storeKey) || "null");
    // A stopped run whose events are all stored is over; one with events
    // left resumes to upload them.
    const over = saved?.stopped && saved.events.length === 0;
    if (saved && saved.url === url && !over && !params.has("new-run")) {
      // A run saved before runs had a secret gets one now (kept from here on).
      if (!/^[0-9a-f]{32}$/.test(saved.secret ?? "")) saved.secret = randomHex(16);
      return { run: saved, resumed: true };
    }
  } catch {
    // A damaged entry starts a new run.
  }
  return {
    // secret: 128 random bits the agent binds the run to (only a hello with
    // them may upload it); kept with the run, sent in the hello only, never shown.
    run: { runId: randomHex(16), secret: randomHex(16), url, nextSeq: 0, acked: 0, events: [], nextConn: 0, open: [], lastMs: 0 },
    resumed: false,
  };
}

function clockId() {
  // Names this browser profile's clock: pages of one profile share it.
  let id = localStorage.getItem("skewscope-clock-id");
  if (!id) {
    id = `page-${randomHex(8)}`;
    localStorage.setItem("skewscope-clock-id", id);
  }
  return id;
}

const { run, resumed } = loadRun();

function save() {
  try {
    localStorage.setItem(storeKey, JSON.stringify(run));
  } catch (e) {
    // Storage full: the events stay in memory and upload while the page
    // is open; a reload before then would lose them, so say so.
    shown.lost = run.events.length;
    setState(`cannot save the outbox (${e.name}): a reload now loses ${shown.lost} event(s)`, true);
  }
}

/** Gives an event the run's next sequence number and keeps it until acknowledged. */
function emit(event) {
  // A stopped run records nothing more (its clock goes on exchanging
  // while the page is open): else it would never be over.
  if (run.stopped && event.kind !== "stopped") return;
  run.events.push(event);
  run.nextSeq += 1;
  if (event.at_ms !== undefined) run.lastMs = event.at_ms;
  save();
  uploader.kick();
}

// ---- upload to the agent's /ingest ----

const uploader = {
  ws: null,
  inFlight: false,
  halted: false,
  retryMs: RETRY_MIN_MS,
  timer: null,
  state: "not started",

  start() {
    const protocols = ["skewscope-ingest"];
    if (token) protocols.push(`skewscope-bearer.${token}`);
    const ws = new WebSocket(`${agentWs}/ingest`, protocols);
    this.ws = ws;
    this.inFlight = false;
    ws.onopen = () => {
      ws.send(JSON.stringify({ hello: { version: INGEST_VERSION, run_id: run.runId, secret: run.secret } }));
      this.inFlight = true;
      this.report("connected");
    };
    ws.onmessage = (e) => this.answer(JSON.parse(e.data));
    ws.onclose = (e) => {
      this.ws = null;
      this.inFlight = false;
      if (this.halted) return;
      this.report(`lost (${e.code}${e.reason ? `: ${e.reason}` : ""}); retrying`);
      this.timer = setTimeout(() => this.start(), this.retryMs);
      this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2) * (0.75 + Math.random() / 2);
    };
  },

  answer(reply) {
    const next = reply.ack?.next_seq ?? reply.busy?.next_seq;
    if (next === undefined) return;
    this.retryMs = RETRY_MIN_MS;
    if (next < run.acked) {
      // The agent has less than it acknowledged (its data directory was
      // replaced): what it lost is gone from here too. Said, not hidden.
      this.report(`the agent lost events ${next} to ${run.acked - 1} it had stored; start a new run (new-run=1)`);
      setState("the agent lost part of this run: see upload", true);
      this.halted = true;
      this.ws.close(1000, "run lost");
      return;
    }
    if (next > run.acked) {
      run.events.splice(0, next - run.acked);
      run.acked = next;
      save();
    }
    this.inFlight = false;
    if (reply.busy) {
      this.report(`agent busy (${reply.busy.reason}); waiting`);
      setTimeout(() => this.kick(), 1000);
      return;
    }
    this.kick();
  },

  kick() {
    const ws = this.ws;
    if (!ws || ws.readyState !== 1 || this.inFlight) {
      this.report();
      return;
    }
    if (run.events.length === 0) {
      this.report("every event stored");
      return;
    }
    const batch = [];
    let chars = 0;
    for (const e of run.events) {
      const size = JSON.stringify(e).length;
      if (batch.length > 0 && chars + size > MAX_BATCH_CHARS) break;
      batch.push(e);
      chars += size;
    }
    ws.send(JSON.stringify({ events: { first_seq: run.acked, events: batch } }));
    this.inFlight = true;
    this.report("sending");
  },

  report(state) {
    if (state) this.state = state;
    show("upload", `${run.acked} of ${run.nextSeq} events stored; ${this.state}`);
  },
};

// ---- the broadcast connections ----

/** A JSON pointer (RFC 6901) into a parsed payload. */
function lookUp(value, pointer) {
  if (pointer === "") return value;
  for (const raw of pointer.slice(1).split("/")) {
    const part = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (value === null || typeof value !== "object" || !(part in value)) return undefined;
    value = value[part];
  }
  return value;
}

/** Bytes (an ArrayBuffer or a typed array) as lowercase hex. */
function hex(bytes) {
  return [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

const payloadsSeen = new Set();
/** The open broadcast connections, closed when the run stops. */
const sockets = new Set();

/**
 * The URL a connection opens. On the agent's own hub (the server this page
 * came from), a `probe` label names the connection, `page.RUNID.CONN`: a
 * page cannot read the hub's connection id, the report finds it by this.
 */
function connectionUrl(conn) {
  const target = new URL(url);
  if (target.host === location.host && target.pathname === "/ws") {
    target.searchParams.set("probe", `page.${run.runId}.${conn}`);
  }
  return target.href;
}

function connect(conn, clock) {
  const occurrences = new Map();
  let retryMs = RETRY_MIN_MS;
  const open = () => {
    let opened = false;
    const ws = new WebSocket(connectionUrl(conn));
    ws.binaryType = "arraybuffer";
    sockets.add(ws);
    ws.onopen = () => {
      if (run.stopped) return;
      opened = true;
      retryMs = RETRY_MIN_MS;
      if (!run.open.includes(conn)) run.open.push(conn);
      emit({ kind: "opened", conn, at_ms: pageNow() });
      shown.connected += 1;
      show("connected", `${shown.connected} of ${connections}`);
    };
    ws.onmessage = (e) => {
      const at = pageNow();
      if (run.stopped) return;
      const text = typeof e.data === "string";
      const key = text ? e.data : hex(e.data);
      const occurrence = occurrences.get(key) ?? 0;
      occurrences.set(key, occurrence + 1);
      const message = text ? { text: e.data, occurrence } : { hex: key, occurrence };
      emit({ kind: "receipt", conn, message, at_ms: at });
      if (!payloadsSeen.has(key)) {
        payloadsSeen.add(key);
        emit({ kind: "payload", message: text ? { text: e.data } : { hex: key } });
      }
      shown.messages += 1;
      show("messages", String(shown.messages));
      if (actPointer !== null && text) act(conn, message, at, clock);
    };
    ws.onclose = (e) => {
      sockets.delete(ws);
      if (run.stopped) return;
      if (opened) {
        run.open = run.open.filter((c) => c !== conn);
        emit({ kind: "closed", conn, at_ms: pageNow(), reason: `closed (${e.code})` });
        shown.connected -= 1;
        show("connected", `${shown.connected} of ${connections}`);
      } else {
        emit({ kind: "failed", conn, at_ms: pageNow(), error: "the connection could not be opened" });
      }
      setTimeout(open, retryMs);
      retryMs = Math.min(RETRY_MAX_MS, retryMs * 2);
    };
  };
  open();
}

/** Acts on a message at its time to act, in the agent's clock. */
function act(conn, message, arrived, clock) {
  let at;
  try {
    const value = lookUp(JSON.parse(message.text), actPointer);
    if (value === undefined) return;
    at = toEpochMs(value, actUnit);
  } catch {
    return;
  }
  // Mapped as the native probe maps it: the page-clock moment the agent's
  // `at` is, on the clock model; planned again as the coarse wait ends,
  // with the exchanges that came during the lead.
  const plan = () => {
    const first = clock.estimate(arrived);
    if (first === null) return { target: at, estimate: null };
    const estimate = clock.estimate(at - first.offset) ?? first;
    return { target: at - estimate.offset, estimate };
  };
  let { target, estimate } = plan();
  // A bound wider than the time left cannot tell in time from late: a
  // burst of exchanges may narrow it before the last look.
  if (estimate === null || estimate.bound > target - arrived) clock.hurry?.();
  const fire = () => {
    const done = pageNow();
    if (run.stopped) return;
    const late = Math.max(0, arrived - target);
    const action = {
      kind: "action",
      conn,
      message,
      act_at_ms: at,
      offset_ms: estimate ? estimate.offset : null,
      bound_ms: estimate ? estimate.bound : null,
      target_ms: target,
      done_ms: done,
      late_ms: late,
    };
    // Written after the moment: another connection's action due at the
    // same time fires first (saving the outbox takes a while). Then the
    // frame the action was drawn in: the next animation frame's time, on
    // the page's clock, written after the action.
    let frameMs = null;
    let actionWritten = false;
    const emitFrame = () => {
      if (!run.stopped) emit({ kind: "frame", conn, message, frame_ms: performance.timeOrigin + frameMs });
    };
    requestAnimationFrame((t) => {
      frameMs = t;
      if (actionWritten) emitFrame();
    });
    setTimeout(() => {
      emit(action);
      actionWritten = true;
      if (frameMs !== null) emitFrame();
    }, 0);
    shown.actions += 1;
    if (late > 0) shown.late += 1;
    show("actions", `${shown.actions} (${shown.late})`);
  };
  // The last look is where the coarse wait ends, before the read-out: the
  // exchanges that came during the lead count, at no cost in time.
  const lookAgain = () => {
    const again = plan();
    if (again.estimate !== null) ({ target, estimate } = again);
    return target;
  };
  scheduleAt({ now: pageNow }, target, fire, { spinMs, lookAgain });
}

/** The smallest step of the page's clock, ms: what the browser coarsens it to. */
function clockStep() {
  let step = Infinity;
  let last = performance.now();
  for (let i = 0; i < 2000 && step > 0.001; i++) {
    const now = performance.now();
    if (now > last) {
      step = Math.min(step, now - last);
      last = now;
    }
  }
  return Number.isFinite(step) ? step : 0;
}

async function main() {
  show("name", name);
  show("url", url ?? "(none)");
  show("run", `${run.runId}${resumed ? " (resumed)" : ""}`);
  if (!url) {
    setState("give the broadcast server: /probe?url=ws://server:port/path&name=NAME", true);
    return;
  }
  const at = pageNow();
  if (!resumed) {
    emit({ kind: "started", name, url, connections, version: "page 1", at_ms: at });
    emit({ kind: "identity", run_id: run.runId, clock_id: clockId() });
    emit({
      kind: "page",
      user_agent: navigator.userAgent,
      clock_step_ms: clockStep(),
      isolated: Boolean(globalThis.crossOriginIsolated),
    });
    if (actPointer !== null) emit({ kind: "act_plan", pointer: actPointer, unit: actUnit, at_ms: at });
  } else {
    // The connections of the page before the reload ended with it.
    for (const conn of run.open) {
      emit({ kind: "closed", conn, at_ms: Math.max(run.lastMs, 0), reason: "page reloaded" });
    }
    run.open = [];
    save();
  }
  uploader.start();
  if (run.stopped) {
    setState("this run was stopped: uploading what is left");
    return;
  }
  setState("syncing with the agent's clock");
  // The native probe's schedule: a pair a second once the bound settles.
  // With the agent's token and WebCrypto (a secure context: https, or
  // localhost), only replies tagged under the token are used; otherwise the
  // clock is unauthenticated, said in the log, and the report names it.
  const keyed = Boolean(token) && Boolean(globalThis.crypto?.subtle);
  const clock = new Clock(`${agentWs}/clock`, { every: 1000, token: keyed ? token : null });
  emit({ kind: "clock_tags", keyed, refused: 0, at_ms: pageNow() });
  clock.addEventListener("refused", (e) => {
    emit({ kind: "clock_tags", keyed, refused: e.refused, at_ms: pageNow() });
  });
  clock.addEventListener("exchange", (e) => {
    const x = e.exchange;
    emit({ kind: "exchange", t1_ms: x.t1, t2_ms: x.t2, t3_ms: x.t3, t4_ms: x.t4 });
  });
  clock.addEventListener("bound", () => {
    const e = clock.estimate(pageNow());
    if (e) show("offset", `${e.offset.toFixed(3)} ms ± ${e.bound.toFixed(3)} ms`);
  });
  try {
    await clock.start();
  } catch (e) {
    setState(`${e.message}; stamps are taken but not mapped to the agent's clock`, true);
  }
  setState("running");
  for (let i = 0; i < connections; i++) connect(run.nextConn++, clock);
  save();
  $("stop").addEventListener("click", () => {
    if (run.stopped) return;
    run.stopped = true;
    emit({ kind: "stopped", at_ms: pageNow() });
    setState("stopped: the run is over once every event is stored; reload for a new run");
    for (const ws of sockets) ws.close(1000, "run stopped");
  });
}

main();
