"""A kiosk for the tests: a named clock that acts on each hub broadcast's
"at" through subscribe(), printing one JSON line per step so the test can
follow it (and kill it mid-run). SIGTERM closes it: it uploads what is left
and prints its upload status.

    python3 kiosk.py CLOCK_URL HUB_URL --name NAME --state-dir DIR [--token T]
"""

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skewscope_clock import connect_clock  # noqa: E402


def say(**fields):
    print(json.dumps(fields), flush=True)


async def main(args):
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    clock = await connect_clock(args.clock_url, token=args.token, name=args.name, state_dir=args.state_dir, timeout=30)
    status = clock.upload_status()
    say(ready=clock.run_id, resumed=status.resumed, events=status.events)

    def acted(acted, text):
        say(acted=text, late=acted.late, missed=acted.missed)

    async def follow():
        async with clock.subscribe(args.hub_url) as hub:
            while hub.conn is None:
                await asyncio.sleep(0.01)
            say(subscribed=hub.conn)
            async for message in hub:
                say(read=message.text, conn=message.conn, occurrence=message.occurrence)
                try:
                    at = json.loads(message.text)["at"]
                except (ValueError, KeyError, TypeError):
                    continue
                clock.act_at(at, lambda a, t=message.text: acted(a, t), message=message)

    reader = asyncio.ensure_future(follow())
    await stop.wait()
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    await clock.close(upload_timeout=args.upload_timeout)
    s = clock.upload_status()
    say(status={"run_id": s.run_id, "events": s.events, "acked": s.acked, "state": s.state, "error": s.error,
                "unrecorded": s.unrecorded, "earlier_runs": s.earlier_runs, "refused": s.refused})


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("clock_url")
    p.add_argument("hub_url")
    p.add_argument("--name", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--token")
    p.add_argument("--upload-timeout", type=float, default=20.0)
    asyncio.run(main(p.parse_args()))
