"""A broadcast server the way people write one with FastAPI on uvicorn: a list
of connected websockets guarded by an asyncio lock; /ws accepts and keeps
reading; a broadcast is asyncio.gather of send_text to every connection,
timing each send and the whole. Written for skewscope's side-by-side benchmark
(bench/run); it knows nothing of skewscope."""

import asyncio
import json
import time

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

MESSAGE = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 8)[:450]

app = FastAPI()
connections: list[WebSocket] = []
lock = asyncio.Lock()


@app.websocket("/ws")
async def ws(websocket: WebSocket) -> None:
    await websocket.accept()
    async with lock:
        connections.append(websocket)
    try:
        while True:
            await websocket.receive_text()
    except WebSocketDisconnect:
        pass
    finally:
        async with lock:
            if websocket in connections:
                connections.remove(websocket)


def with_time_to_act(lead: float) -> str:
    """The message as an app that wants its clients to act together sends
    it: JSON with the moment to act in the server's clock, `lead` seconds
    from now (the one line that matters: "at": time.time() + lead), padded
    to the same 450 bytes."""
    body = {"type": "go", "at": time.time() + lead, "pad": ""}
    room = 450 - len(json.dumps(body))
    body["pad"] = MESSAGE[: max(room, 0)]
    return json.dumps(body)


async def timed_send_text(websocket: WebSocket, text: str) -> float:
    start = time.perf_counter()
    try:
        await websocket.send_text(text)
    except Exception:
        pass
    return time.perf_counter() - start


@app.get("/start_test")
async def start_test(lead: float | None = None) -> dict:
    """One broadcast; with ?lead=SECONDS it carries a time to act."""
    start = time.perf_counter()
    text = MESSAGE if lead is None else with_time_to_act(lead)
    async with lock:
        targets = list(connections)
    sends = await asyncio.gather(*(timed_send_text(w, text) for w in targets))
    total = time.perf_counter() - start
    return {
        "clients": len(targets),
        "total_ms": total * 1000,
        "slowest_send_ms": max(sends, default=0) * 1000,
    }


@app.get("/healthz")
async def healthz() -> dict:
    async with lock:
        return {"clients": len(connections)}
