"""skewscope_clock: the server's wall clock in a Python app, from the
skewscope agent's ``GET /clock`` WebSocket, and actions at a time in it.

    clock = await connect_clock("ws://server:8080/clock", token=token)
    clock.now()     # the server's wall time, seconds since the epoch
    clock.bound()   # how far off that can be, ± seconds
    clock.act_at(message["at"], lambda acted: go(acted.late))

With ``name=`` the app reports its own actions to the agent (uploaded
exactly once, across reconnects, kills and restarts):

    clock = await connect_clock(url, token=token, name="kiosk-1")
    async with clock.subscribe("ws://server:8080/ws") as hub:
        async for message in hub:
            clock.act_at(json.loads(message.text)["at"], show, message=message)
    await clock.close()

A port of the page module ``clients/js/skewscope-clock.js``: the same
clock model (checked to the bit against ``clients/clock-vectors``), the same
schedule, the same tag check.
"""

from .client import (
    ANSWER_WAIT_NS,
    CLOSE_TIMEOUT_S,
    SPIN_GAP_NS,
    SPIN_S,
    UPLOAD_TIMEOUT_S,
    Acted,
    Action,
    Clock,
    ClockError,
    ClockEstimate,
    Exchange,
    Received,
    Subscription,
    UploadStatus,
    check_reply,
    connect_clock,
    parse_reply,
    reply_tag,
    time_key,
    to_epoch_seconds,
)
from .steady import STEADY_CLOCK, monotonic_minus_steady_ns, steady_ns
from .model import (
    BURST_GAP_NS,
    FASTEST_NS,
    GROWTH_BETWEEN_PAIRS,
    HORIZON_NS,
    HURRY_GAP_NS,
    LOOSE_AFTER_PAIR,
    MAX_BURST_ROUNDS,
    MAX_DRIFT,
    MIN_BURST_ROUNDS,
    NEGLIGIBLE_GROWTH_NS,
    REBURST_GAP_NS,
    STILL_IMPROVING,
    WANDER,
    ClockModel,
    Estimate,
    Extent,
    Interval,
    Schedule,
    estimate_of,
    solve,
)

__version__ = "0.1.0"

__all__ = [
    "ANSWER_WAIT_NS",
    "CLOSE_TIMEOUT_S",
    "SPIN_GAP_NS",
    "SPIN_S",
    "UPLOAD_TIMEOUT_S",
    "Acted",
    "Action",
    "Clock",
    "ClockError",
    "ClockEstimate",
    "Exchange",
    "Received",
    "Subscription",
    "UploadStatus",
    "check_reply",
    "connect_clock",
    "parse_reply",
    "reply_tag",
    "time_key",
    "to_epoch_seconds",
    "BURST_GAP_NS",
    "FASTEST_NS",
    "GROWTH_BETWEEN_PAIRS",
    "HORIZON_NS",
    "HURRY_GAP_NS",
    "LOOSE_AFTER_PAIR",
    "MAX_BURST_ROUNDS",
    "MAX_DRIFT",
    "MIN_BURST_ROUNDS",
    "NEGLIGIBLE_GROWTH_NS",
    "REBURST_GAP_NS",
    "STILL_IMPROVING",
    "WANDER",
    "ClockModel",
    "Estimate",
    "Extent",
    "Interval",
    "Schedule",
    "estimate_of",
    "solve",
    "STEADY_CLOCK",
    "monotonic_minus_steady_ns",
    "steady_ns",
]
