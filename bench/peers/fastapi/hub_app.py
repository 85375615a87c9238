"""An app that hands its broadcasts to the skewscope agent's hub, the way
docs/acting.md recommends: it keeps its own logic and its own trigger
endpoint, and instead of a send loop of its own it makes one HTTP call,
POST /publish?lead=..., and the hub writes the time to act into the JSON
(in the hub's own clock) and sends one encoding of it to every client.

    SKEWSCOPE_AGENT=http://server:8080 SKEWSCOPE_TOKEN_FILE=/etc/skewscope/token \
        uvicorn hub_app:app --port 8000

GET /start_test?lead=0.3 publishes one {"type": "go", ...} message acted
on 0.3 s after the hub builds it (lead=auto: the agent picks it). Written
for skewscope's tests (audit --trigger against the hub path).
"""

import asyncio
import json
import os
import urllib.error
import urllib.request

from fastapi import FastAPI, HTTPException

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
