// A kiosk app in node that acts on the hub's broadcasts at their time to act
// and reports its own actions to the agent, exactly once across restarts.
//
//   node --experimental-websocket examples/kiosk.mjs ws://server:8080 kiosk-1 /var/lib/kiosk
//   (node 22 and later: no flag; node 18: the ws package instead;
//   SKEWSCOPE_TOKEN=… when the agent has a token)
//
// The server broadcasts through the hub, which writes the time to act:
//   curl -X POST 'http://server:8080/publish?lead=200ms' -d '{"type":"go"}'
//
// It prints one JSON line per thing that happened; "stop" on stdin (or
// SIGTERM) closes the clock, which writes "stopped" and uploads the rest.
// The run is kept in STATE_DIR (one file per key, replaced by rename): a
// restart with the same name resumes it, and a SIGKILL loses nothing that
// was written.
import { webcrypto } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { connectClock, toEpochMs } from "../skewscope-clock.js";

// Node 18 has Web Crypto in node:crypto only, and no WebSocket: take the ws
// package there (Debian: node-ws; required, not imported, so Debian's
// global module directory is searched).
globalThis.crypto ??= webcrypto;
const WebSocketImpl = globalThis.WebSocket ?? createRequire(import.meta.url)("ws");

/** localStorage's three calls over a directory, one file per key. */
function fileStorage(dir) {
  mkdirSync(dir, { recursive: true });
  const path = (key) => join(dir, encodeURIComponent(key));
  return {
    getItem(key) {
      try {
        return readFileSync(path(key), "utf8");
      } catch {
        return null;
      }
    },
    setItem(key, value) {
      const tmp = `${path(key)}.tmp`;
      writeFileSync(tmp, String(value));
      renameSync(tmp, path(key));
    },
    removeItem(key) {
      rmSync(path(key), { force: true });
    },
  };
}

const [agent, name, stateDir = `./kiosk-state-${name}`] = process.argv.slice(2);
if (!agent || !name) {
  console.error("usage: kiosk.mjs ws://server:8080 NAME [STATE_DIR]");
  process.exit(2);
}
const say = (fields) => console.log(JSON.stringify(fields));

const clock = await connectClock(`${agent}/clock`, {
  name,
  token: process.env.SKEWSCOPE_TOKEN ?? null,
  storage: fileStorage(stateDir),
  WebSocketImpl,
});
clock.addEventListener("uploaderror", (e) => say({ uploaderror: e.message }));
say({ synced: clock.bound(), run: clock.runId, resumed: clock.upload.resumed });

const hub = clock.subscribe(`${agent}/ws`);
hub.addEventListener("open", () => say({ open: hub.conn }));
let acted = 0;
hub.addEventListener("message", (event) => {
  let at;
  try {
    at = toEpochMs(JSON.parse(event.data).at);
  } catch {
    return; // not a message with a time to act
  }
  clock.actAt(at, ({ late }) => say({ acted: ++acted, late, conn: event.conn }), { message: event });
});

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  const stored = await clock.close({ timeout: 5000 });
  say({ closed: stored, upload: clock.upload });
  process.exit(0);
}
process.on("SIGTERM", stop);
process.stdin.on("data", (d) => {
  if (String(d).includes("stop")) stop();
});
