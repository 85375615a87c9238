"""A python-socketio server (ASGI, under uvicorn) for probe/tests/protocols.rs.

Usage: socketio_server.py PING_SECONDS
Prints its port, then serves on 127.0.0.1:
  GET /emit?count=N&every_ms=M&lead_ms=L&namespace=/&noise=1   emits N "show"
      events ({"n": i, "at": time.time() + L/1000}), one every M ms, each
      after a "noise" event the probe is told not to record (none with
      noise=0, as bench/sweep asks: a receipt then costs one message, as
      with the other servers); answers at once
  GET /kick   disconnects every client from the namespace "/" (the server
      ending a session mid-run)
  GET /stats  {"connected": n, "disconnects": n, "emitted": n}
Its Engine.IO pings come every PING_SECONDS and must be answered within
PING_SECONDS, so a client that does not answer is dropped within the run.
"""

import asyncio
import json
import socket
import sys
import time
from urllib.parse import parse_qs

import socketio
import uvicorn

PING = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
sio = socketio.AsyncServer(async_mode="asgi", ping_interval=PING, ping_timeout=PING)
stats = {"connected": 0, "disconnects": 0, "emitted": 0}
sids = set()


@sio.event
async def connect(sid, environ, auth=None):
    stats["connected"] += 1
    sids.add(sid)


@sio.event
async def disconnect(sid, *reason):
    stats["connected"] -= 1
    stats["disconnects"] += 1
    sids.discard(sid)


@sio.on("connect", namespace="/lobby")
async def connect_lobby(sid, environ, auth=None):
    pass


async def emit(count, every_ms, lead_ms, namespace, noise):
    for i in range(count):
        if i:
            await asyncio.sleep(every_ms / 1000)
        if noise:
            await sio.emit("noise", {"n": i}, namespace=namespace)
        await sio.emit("show", {"n": i, "at": time.time() + lead_ms / 1000}, namespace=namespace)
        stats["emitted"] += 1


async def http(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
    path = scope["path"]
    if path == "/emit":
        asyncio.get_running_loop().create_task(
            emit(
                int(query.get("count", "1")),
                int(query.get("every_ms", "0")),
                int(query.get("lead_ms", "300")),
                query.get("namespace", "/"),
                query.get("noise", "1") != "0",
            )
        )
        body = b"ok"
    elif path == "/kick":
        for sid in list(sids):
            await sio.disconnect(sid)
        body = b"ok"
    elif path == "/stats":
        body = json.dumps(stats).encode()
    else:
        body = b"?"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


app = socketio.ASGIApp(sio, other_asgi_app=http)

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])
