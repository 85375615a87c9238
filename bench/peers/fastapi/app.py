"""A broadcast server the way people write one with FastAPI on uvicorn: a list
of connected websockets guarded by an asyncio lock; /ws accepts and keeps
reading; a broadcast is asyncio.gather of send_text to every connection,
timing each send and the whole. Written for skewscope's side-by-side benchmark
(bench/run); it knows nothing of skewscope."""

import asyncio
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


async def timed_send(websocket: WebSocket) -> float:
    start = time.perf_counter()
    try:
        await websocket.send_text(MESSAGE)
    except Exception:
        pass
    return time.perf_counter() - start


@app.get("/start_test")
async def start_test() -> dict:
    start = time.perf_counter()
    async with lock:
        targets = list(connections)
    sends = await asyncio.gather(*(timed_send(w) for w in targets))
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
