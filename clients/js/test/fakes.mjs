// Fakes for the clock module's tests, in process and without a network: an
// agent that answers /clock, /ingest (the JSON dialect, with the agent's
// exactly-once rules and its decoder's refusal of unknown kinds and fields)
// and a hub on /ws; timers that can all be stopped at once (a kill).

import { createHmac, webcrypto } from "node:crypto";

/** The fields each event kind has, besides `kind` (core/src/page_ingest.rs, with the app's kinds). */
export const EVENT_FIELDS = {
  started: ["name", "url", "connections", "version", "at_ms"],
  identity: ["run_id", "clock_id"],
  app: ["module", "runtime"],
  page: ["user_agent", "clock_step_ms", "isolated"],
  act_plan: ["pointer", "unit", "at_ms"],
  clock_tags: ["keyed", "refused", "at_ms"],
  exchange: ["t1_ms", "t2_ms", "t3_ms", "t4_ms"],
  opened: ["conn", "at_ms"],
  failed: ["conn", "at_ms", "error"],
  closed: ["conn", "at_ms", "reason"],
  receipt: ["conn", "message", "at_ms"],
  payload: ["message"],
  action: ["conn", "message", "act_at_ms", "offset_ms", "bound_ms", "target_ms", "done_ms", "late_ms"],
  frame: ["conn", "message", "frame_ms"],
  stopped: ["at_ms"],
};

const MAX_MS = 18446744073709;

/** Why the agent's decoder would refuse `e`, or null. */
export function refusal(e) {
  const fields = EVENT_FIELDS[e?.kind];
  if (!fields) return `unknown kind ${e?.kind}`;
  const keys = Object.keys(e).filter((k) => k !== "kind");
  if (keys.length !== fields.length || !fields.every((f) => keys.includes(f))) return `fields of ${e.kind}: ${keys}`;
  for (const [k, v] of Object.entries(e)) {
    if (k.endsWith("_ms") && k !== "offset_ms" && k !== "bound_ms" && !(typeof v === "number" && Number.isFinite(v) && v >= 0 && v < MAX_MS)) {
      return `${k} = ${v}`;
    }
    if (typeof v === "string" && new TextEncoder().encode(v).length > 1024) return `${k} too long`;
  }
  if (e.message) {
    const m = e.message;
    const ks = Object.keys(m).sort().join(",");
    if (ks !== "occurrence,text" && ks !== "hex,occurrence" && !(e.kind === "payload" && (ks === "text" || ks === "hex"))) return `message ${ks}`;
  }
  return null;
}

/** Timers that a test can stop all at once, as a killed process's. */
export function killableEnv(extra = {}) {
  const live = new Set();
  const env = {
    setTimeout(fn, ms) {
      const id = setTimeout(() => {
        live.delete(id);
        fn();
      }, ms);
      live.add(id);
      return id;
    },
    clearTimeout(id) {
      if (id === null || id === undefined) return;
      live.delete(id);
      clearTimeout(id);
    },
    // Node 18 has Web Crypto in node:crypto only; later ones also as a global.
    crypto: globalThis.crypto ?? webcrypto,
    kill() {
      for (const id of live) clearTimeout(id);
      live.clear();
      env.dead = true;
    },
    dead: false,
    ...extra,
  };
  return env;
}

/** Resolves once `cond()` holds (checked every few ms), or rejects after `ms`; `what` may be a function, called then. */
export async function until(cond, ms = 10_000, what = "a condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${typeof what === "function" ? what() : what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A storage (getItem/setItem/removeItem) over a Map, that can be made to fail. */
export function mapStorage() {
  const map = new Map();
  return {
    map,
    failAfter: Infinity,
    writes: 0,
    getItem(k) {
      return map.has(k) ? map.get(k) : null;
    },
    setItem(k, v) {
      this.writes += 1;
      if (this.writes > this.failAfter) {
        const e = new Error("full");
        e.name = "QuotaExceededError";
        throw e;
      }
      map.set(k, String(v));
    },
    removeItem(k) {
      map.delete(k);
    },
  };
}

/**
 * The agent, faked: `offsetMs` ahead of this process's clock. `ingest` is
 * how /ingest answers batches: "ack", "silent" (stores, never answers),
 * "busy" (stores nothing, answers busy), "deaf" (takes batches in, stores
 * nothing, never answers), "high" (acks 5 past what it stored), "low"
 * (acks 0). A hello is always answered.
 */
export class FakeAgent {
  constructor({ offsetMs = 7, now = () => performance.timeOrigin + performance.now(), token = null } = {}) {
    this.offsetMs = offsetMs;
    this.key = token === null ? null : createHmac("sha256", token).update("skewscope time exchange tag v2").digest();
    this.now = now;
    this.runs = new Map();
    this.ingest = "ack";
    this.sockets = new Set();
    this.hub = new Set();
    this.labels = [];
    this.hellos = [];
    this.refusals = [];
    this.duplicates = 0;
    this.busyAnswers = 0;
    this.batches = 0;
  }

  /** A WebSocket class whose sockets reach this agent, tagged `tag` (for sever). */
  socketClass(tag = "") {
    const agent = this;
    return class FakeWebSocket {
      constructor(url, protocols) {
        this.url = url;
        this.protocols = protocols;
        this.tag = tag;
        this.readyState = 0;
        this.protocol = "";
        this.binaryType = "blob";
        agent.accept(this);
      }
      send(data) {
        if (this.readyState !== 1) throw new Error("not open");
        setImmediate(() => agent.receive(this, data));
      }
      close(code = 1000, reason = "") {
        if (this.readyState >= 2) return;
        this.readyState = 2;
        agent.end(this, code, reason);
      }
    };
  }

  accept(ws) {
    const url = new URL(ws.url);
    ws.path = url.pathname;
    if (ws.path === "/ws") this.labels.push(url.searchParams.get("probe"));
    this.sockets.add(ws);
    setImmediate(() => {
      if (ws.readyState !== 0) return;
      if (this.refuseAll) return this.end(ws, 1006, "");
      ws.readyState = 1;
      if (ws.path === "/ws") this.hub.add(ws);
      ws.onopen?.({});
    });
  }

  end(ws, code, reason) {
    this.sockets.delete(ws);
    this.hub.delete(ws);
    setImmediate(() => {
      ws.readyState = 3;
      ws.onclose?.({ code, reason, wasClean: code === 1000 });
    });
  }

  /** Closes every socket (tagged `tag`, if given), as a restart of the agent does. */
  dropAll(tag) {
    for (const ws of [...this.sockets]) if (tag === undefined || ws.tag === tag) this.end(ws, 1006, "");
  }

  /** Forgets the sockets tagged `tag` without a word to them: their process was killed. */
  sever(tag) {
    for (const ws of [...this.sockets]) {
      if (ws.tag !== tag) continue;
      this.sockets.delete(ws);
      this.hub.delete(ws);
      ws.readyState = 3;
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    }
  }

  reply(ws, value) {
    const data = typeof value === "string" || value instanceof ArrayBuffer ? value : JSON.stringify(value);
    setImmediate(() => {
      if (ws.readyState === 1) ws.onmessage?.({ data });
    });
  }

  /** Sends `data` to every open hub connection. */
  broadcast(data) {
    for (const ws of this.hub) this.reply(ws, data);
  }

  receive(ws, data) {
    if (!this.sockets.has(ws)) return;
    if (ws.path === "/clock") {
      const { id, t1 } = JSON.parse(data);
      const t2 = this.now() + this.offsetMs;
      const reply = { id, t1, t2, t3: t2 + 0.01 };
      if (this.key !== null) {
        const ns = (ms) => String(Math.round(ms * 1e6));
        const [t2ns, t3ns] = [ns(reply.t2), ns(reply.t3)];
        const tag = createHmac("sha256", this.key).update(`${data}\n${t2ns}\n${t3ns}`).digest("hex").slice(0, 32);
        reply.auth = { t2_ns: t2ns, t3_ns: t3ns, tag };
      }
      return this.reply(ws, reply);
    }
    if (ws.path === "/ingest") return this.ingestMessage(ws, data);
  }

  refuse(ws, why) {
    this.refusals.push(why);
    this.end(ws, 1008, why);
  }

  ingestMessage(ws, data) {
    if (typeof data !== "string") return this.refuse(ws, "binary");
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      return this.refuse(ws, "not json");
    }
    if (msg.hello) {
      const { version, run_id: runId, secret } = msg.hello;
      const keys = Object.keys(msg.hello).sort().join(",");
      if (version !== 1 || keys !== "run_id,secret,version" || !/^[0-9a-f]{32}$/.test(runId) || !/^[0-9a-f]{32}$/.test(secret)) {
        return this.refuse(ws, `hello ${data}`);
      }
      this.hellos.push({ runId, secret });
      let run = this.runs.get(runId);
      if (!run) this.runs.set(runId, (run = { secret, events: [] }));
      if (run.secret !== secret) return this.refuse(ws, "wrong secret");
      ws.run = run;
      return this.reply(ws, { ack: { next_seq: this.answerFor(run) } });
    }
    if (!msg.events || !ws.run) return this.refuse(ws, "batch before hello");
    const { first_seq: first, events } = msg.events;
    if (new TextEncoder().encode(data).length > 256 * 1024) return this.refuse(ws, "batch over 256 KiB");
    for (const e of events) {
      const why = refusal(e);
      if (why) return this.refuse(ws, why);
    }
    const run = ws.run;
    this.batches += 1;
    if (this.ingest === "deaf") return;
    if (this.ingest === "busy") {
      this.busyAnswers += 1;
      return this.reply(ws, { busy: { next_seq: run.events.length, reason: "budget" } });
    }
    if (first > run.events.length) return this.refuse(ws, `gap: ${first} > ${run.events.length}`);
    const skip = run.events.length - first;
    this.duplicates += Math.min(skip, events.length);
    run.events.push(...events.slice(skip));
    if (this.ingest === "silent") return;
    this.reply(ws, { ack: { next_seq: this.answerFor(run) } });
  }

  answerFor(run) {
    if (this.ingest === "high") return run.events.length + 5;
    if (this.ingest === "low") return 0;
    return run.events.length;
  }
}
