"""An SSE endpoint (Starlette's StreamingResponse under uvicorn) for
probe/tests/protocols.rs.

Prints its port, then serves on 127.0.0.1:
  GET /events   text/event-stream: "retry: 300", then each event as
      "id: K", "event: show" (or "other"), "data: {...}"; a comment line
      every 0.5 s keeps the stream alive. With Last-Event-ID: K the events
      after K are sent first (what a reconnecting EventSource asks for).
  GET /emit?count=N&every_ms=M&lead_ms=L   N "show" events, each after an
      "other" one (none with other=0), one every M ms, data
      {"n": i, "at": time.time() + L/1000}
  GET /drop     ends every stream (the server restarting, say)
  GET /stats    {"streams": n, "last_event_ids": [...], "emitted": n}
"""

import asyncio
import json
import socket
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

history = []  # (id, event, data): ids from 1
queues = set()
stats = {"last_event_ids": [], "emitted": 0}


def frame(item):
    event_id, event, data = item
    return f"id: {event_id}\nevent: {event}\ndata: {data}\n\n"


async def events(request: Request):
    last = request.headers.get("last-event-id")
    stats["last_event_ids"].append(last)
    start = int(last) if last else len(history)
    replay = history[start:]
    queue = asyncio.Queue()
    queues.add(queue)

    async def stream():
        try:
            yield "retry: 300\n\n"
            for item in replay:
                yield frame(item)
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), 0.5)
                except asyncio.TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if item is None:
                    return
                yield frame(item)
        finally:
            queues.discard(queue)

    return StreamingResponse(stream(), media_type="text/event-stream")


def publish(event, data):
    item = (len(history) + 1, event, json.dumps(data))
    history.append(item)
    for queue in queues:
        queue.put_nowait(item)


async def emit_all(count, every_ms, lead_ms, other):
    for i in range(count):
        if i:
            await asyncio.sleep(every_ms / 1000)
        if other:
            publish("other", {"n": i})
        publish("show", {"n": i, "at": time.time() + lead_ms / 1000})
        stats["emitted"] += 1


async def emit(request: Request):
    q = request.query_params
    asyncio.get_running_loop().create_task(
        emit_all(int(q.get("count", "1")), int(q.get("every_ms", "0")), int(q.get("lead_ms", "300")),
                 q.get("other", "1") != "0")
    )
    return PlainTextResponse("ok")


async def drop(request: Request):
    for queue in list(queues):
        queue.put_nowait(None)
    return PlainTextResponse("ok")


async def show_stats(request: Request):
    return JSONResponse({"streams": len(queues), **stats})


app = Starlette(routes=[
    Route("/events", events),
    Route("/emit", emit),
    Route("/drop", drop),
    Route("/stats", show_stats),
])

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])
