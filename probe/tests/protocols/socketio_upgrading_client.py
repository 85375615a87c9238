"""A Socket.IO client as browsers run one by default, for
collector/tests/tap_protocols.rs: Engine.IO 4 over HTTP long-polling first
(the open packet, the namespace's CONNECT), then upgraded to a WebSocket
(2probe, 3probe, 5), on which the server's first message is "3probe", not
an open packet.

Usage: socketio_upgrading_client.py PORT COUNT
Prints "upgraded" once on the WebSocket, answers the server's pings, and
prints "done" after COUNT "show" events. Every wait is bounded (30 s).
"""

import asyncio
import json
import sys
import urllib.request

import websockets

PORT, COUNT = int(sys.argv[1]), int(sys.argv[2])
WAIT = 30
POLLING = f"http://127.0.0.1:{PORT}/socket.io/?EIO=4&transport=polling"


def get(url):
    return urllib.request.urlopen(url, timeout=WAIT).read().decode()


def post(url, body):
    request = urllib.request.Request(
        url, data=body.encode(), method="POST",
        headers={"Content-Type": "text/plain;charset=UTF-8"})
    return urllib.request.urlopen(request, timeout=WAIT).read().decode()


opened = get(POLLING)
assert opened.startswith("0{"), opened
sid = json.loads(opened[1:])["sid"]
post(f"{POLLING}&sid={sid}", "40")
answer = get(f"{POLLING}&sid={sid}")
assert "40" in answer, answer


async def main():
    url = f"ws://127.0.0.1:{PORT}/socket.io/?EIO=4&transport=websocket&sid={sid}"
    async with websockets.connect(url) as ws:
        await ws.send("2probe")
        probe = await asyncio.wait_for(ws.recv(), WAIT)
        assert probe == "3probe", probe
        await ws.send("5")
        print("upgraded", flush=True)
        shows = 0
        while shows < COUNT:
            message = await asyncio.wait_for(ws.recv(), WAIT)
            if message == "2":
                await ws.send("3")
            elif message.startswith('42["show"'):
                shows += 1
        print("done", flush=True)


asyncio.run(main())
