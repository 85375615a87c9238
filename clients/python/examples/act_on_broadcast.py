"""Act on a broadcast at its time to act, in the server's clock.

A FastAPI server that wants its clients to act together puts the moment in
each message, in its own wall clock (docs/acting.md):

    await ws.send_text(json.dumps({"type": "go", "at": time.time() + 0.3}))

This client syncs to the skewscope agent on that server (GET /clock) and
runs its action when the server's clock reaches "at", whatever the fan-out
and the network took:

    python3 act_on_broadcast.py ws://server:8000/ws ws://server:8080/clock \\
        [--token-file /etc/skewscope/token] [--field at] [--unit auto]
"""

import argparse
import asyncio
import json

from websockets.asyncio.client import connect

from skewscope_clock import connect_clock, to_epoch_seconds


def go(message, acted, bound):
    """The app's action: here, a line. A late one says so."""
    state = f"LATE by {acted.late * 1e3:.3f} ms" if acted.late > 0.001 else "on time"
    print(f"act: {message.get('type', 'message')} at {acted.target:.6f} ({state}, clock ±{bound * 1e3:.3f} ms)", flush=True)


async def main(args):
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()  # as the agent reads its --token-file
    clock = await connect_clock(args.clock_url, token=token)
    print(f"synced to {args.clock_url}: ±{clock.bound() * 1e3:.3f} ms", flush=True)
    async with clock, connect(args.broadcast_url) as ws:
        async for text in ws:
            try:
                message = json.loads(text)
                at = to_epoch_seconds(message[args.field], args.unit)
            except (ValueError, KeyError, TypeError):
                continue  # not a message with a time to act
            spare = at - clock.now()
            if clock.bound() > spare:
                clock.hurry()  # the bound is wider than the time left: a burst may narrow it
            bound = clock.bound()
            clock.act_at(at, lambda acted, m=message, b=bound: go(m, acted, b))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("broadcast_url", help="the app's broadcast WebSocket, e.g. ws://server:8000/ws")
    parser.add_argument("clock_url", help="the agent's clock, e.g. ws://server:8080/clock")
    parser.add_argument("--token-file", help="the agent's --token-file: use only replies it tagged")
    parser.add_argument("--field", default="at", help="the message's field holding the time to act (default: at)")
    parser.add_argument("--unit", default="auto", choices=["auto", "s", "ms", "us", "ns"])
    try:
        asyncio.run(main(parser.parse_args()))
    except KeyboardInterrupt:
        pass
