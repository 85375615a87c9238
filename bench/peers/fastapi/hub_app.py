"""An app that hands its broadcasts to the skewscope agent's hub, the way
docs/acting.md recommends: it keeps its own logic and its own trigger
endpoint, and instead of a send loop of its own it makes one HTTP call,
POST /publish?lead=..., and the hub writes the time to act into the JSON
(in the hub's own clock) and sends one encoding of it to every client.

    SKEWSCOPE_AGENT=http://server:8080 SKEWSCOPE_TOKEN_FILE=/etc/skewscope/token \
        uvicorn hub_app:app --port 8000

GET /start_test?lead=0.3 publishes one {"type": "go", ...} message acted
on 0.3 s after the hub builds it (lead=auto: the agent picks it). GET
/kiosk?name=lobby-tv is the app's own page for its screens: it imports
the agent's clock module, listens to the hub and shows GO at each time to
act, reporting its actions (and the frames they were drawn in) under its
name. Written for skewscope's tests (audit --trigger against the hub path,
pages that report their own actions).
"""

import asyncio
import json
import os
import urllib.error
import urllib.request

from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse

AGENT = os.environ.get("SKEWSCOPE_AGENT", "http://127.0.0.1:8080")
TOKEN_FILE = os.environ.get("SKEWSCOPE_TOKEN_FILE")

app = FastAPI()
sent = 0


def token() -> str | None:
    """The agent's token, as its --token-file holds it (trimmed)."""
    if not TOKEN_FILE:
        return None
    with open(TOKEN_FILE, encoding="utf-8") as f:
        return f.read().strip()


def publish(body: bytes, lead: str) -> dict:
    """One POST /publish: the hub stamps "at" (seconds) into the message."""
    request = urllib.request.Request(
        f"{AGENT}/publish?lead={lead}&pointer=/at&unit=s",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    bearer = token()
    if bearer is not None:
        request.add_header("Authorization", f"Bearer {bearer}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@app.get("/start_test")
async def start_test(lead: str = "30ms") -> dict:
    """One broadcast through the hub; ?lead= as the hub takes it (a
    duration like 300ms, seconds as a bare number, or auto)."""
    global sent
    sent += 1
    if lead.replace(".", "", 1).isdigit():
        lead = f"{float(lead) * 1000:.3f}ms"
    body = json.dumps({"type": "go", "n": sent}).encode()
    try:
        answer = await asyncio.to_thread(publish, body, lead)
    except urllib.error.HTTPError as e:
        raise HTTPException(status_code=502, detail=f"the agent answered {e.code}: {e.read()!r}") from e
    return {"published": sent, "hub": answer}


@app.get("/healthz")
async def healthz() -> dict:
    return {"published": sent}


KIOSK = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kiosk</title></head>
<body><p id="state">wait</p><p id="acted">0</p><p id="run"></p>
<script type="module">
  import { connectClock, toEpochMs } from "AGENT/skewscope-clock.js";
  const name = new URLSearchParams(location.search).get("name");
  const clock = await connectClock("AGENT_WS/clock", { name });
  document.getElementById("run").textContent = clock.runId + (clock.upload.resumed ? " (resumed)" : "");
  const state = document.getElementById("state");
  let acted = 0;
  const hub = clock.subscribe("AGENT_WS/ws");
  hub.addEventListener("message", (event) => {
    const message = JSON.parse(event.data);
    if (message.type !== "go") return;
    clock.actAt(toEpochMs(message.at), ({ late }) => {
      state.textContent = late > 0 ? "GO late" : "GO";
      document.getElementById("acted").textContent = String(++acted);
    }, { message: event });
  });
  state.textContent = "ready";
</script></body></html>
"""


@app.get("/kiosk", response_class=HTMLResponse)
async def kiosk(agent: str | None = None) -> str:
    """The app's own page for its screens (see the module's docstring);
    ?agent=HOST:PORT reaches the agent there instead (a device behind its
    own emulated link, in bench/apps)."""
    base = f"http://{agent}" if agent else AGENT
    return KIOSK.replace("AGENT_WS", base.replace("http", "ws", 1)).replace("AGENT", base)
