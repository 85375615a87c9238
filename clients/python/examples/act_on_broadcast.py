"""Act on a broadcast at its time to act, in the server's clock.

A FastAPI server that wants its clients to act together puts the moment in
each message, in its own wall clock (docs/acting.md):

    await ws.send_text(json.dumps({"type": "go", "at": time.time() + 0.3}))

This client syncs to the skewscope agent on that server (GET /clock) and
runs its action when the server's clock reaches "at", whatever the fan-out
and the network took. Any action that did not run at its moment (its
message came after it, or the host woke the process late) says MISSED,
by how much. (The report's "late" is narrower: a message that came after
its time to act. An action the host woke late for is MISSED here and
shows in the report's timer error.)

    python3 act_on_broadcast.py ws://server:8000/ws ws://server:8080/clock \\
        [--token-file /etc/skewscope/agent.token] [--field at] [--unit auto] \\
        [--name kiosk-1 [--state-dir DIR]]

With --name it reports its actions to the agent under that name (each
message's read, the moment aimed at, the moment acted), uploaded exactly
once; `skewscope audit` then lists it as a device. Stop it with Ctrl-C or
SIGTERM: it uploads what is left before it exits.
"""

import argparse
import asyncio
import json
import signal

from skewscope_clock import connect_clock, to_epoch_seconds


def describe(message, acted, bound) -> str:
    """The line for one action. MISSED whenever it did not run at its
    moment (``acted.missed``), however little after it: such an action is
    never shown as on time."""
    what = message.get("type", "message") if isinstance(message, dict) else "message"
    if acted.missed:
        state = f"MISSED its moment by {acted.late * 1e3:.3f} ms"
    else:
        state = f"on time, +{acted.late * 1e6:.1f} us"
    return f"act: {what} at {acted.target:.6f} ({state}, clock ±{bound * 1e3:.3f} ms)"


def go(message, acted, bound):
    """The app's action: here, a line."""
    print(describe(message, acted, bound), flush=True)


async def main(args):
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()  # as the agent reads its --token-file
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)
    clock = await connect_clock(args.clock_url, token=token, name=args.name, state_dir=args.state_dir)
    print(f"synced to {args.clock_url}: ±{clock.bound() * 1e3:.3f} ms", flush=True)
    if args.name:
        print(f"reporting as {args.name!r}, run {clock.run_id}", flush=True)
    try:
        # The broadcasts, each stamped when it was read (it reconnects by itself).
        async with clock.subscribe(args.broadcast_url) as broadcasts:
            async for received in broadcasts:
                try:
                    message = json.loads(received.text)
                    at = to_epoch_seconds(message[args.field], args.unit)
                except (ValueError, KeyError, TypeError):
                    continue  # not a message with a time to act
                spare = at - clock.now()
                if clock.bound() > spare:
                    clock.hurry()  # the bound is wider than the time left: a burst may narrow it
                bound = clock.bound()
                clock.act_at(at, lambda acted, m=message, b=bound: go(m, acted, b), message=received)
    except asyncio.CancelledError:
        pass
    finally:
        # Uploads what is left (at most 5 s) before the process ends.
        await clock.close()
        status = clock.upload_status()
        if status is not None:
            print(f"stopped: {status.acked} of {status.events} events stored at the agent", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("broadcast_url", help="the app's broadcast WebSocket, e.g. ws://server:8000/ws")
    parser.add_argument("clock_url", help="the agent's clock, e.g. ws://server:8080/clock")
    parser.add_argument("--token-file", help="the agent's --token-file: use only replies it tagged, upload with it")
    parser.add_argument("--field", default="at", help="the message's field holding the time to act (default: at)")
    parser.add_argument("--unit", default="auto", choices=["auto", "s", "ms", "us", "ns"])
    parser.add_argument("--name", help="report this client's actions to the agent under this name (a device)")
    parser.add_argument("--state-dir", help="where the run is kept until the agent has it (default: $SKEWSCOPE_STATE_DIR, else ~/.local/state/skewscope-clock)")
    try:
        asyncio.run(main(parser.parse_args()))
    except KeyboardInterrupt:
        pass
