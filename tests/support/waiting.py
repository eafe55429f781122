"""Waiting for what a background thread or another process changes, bounded.

Timeouts driven by a clock are tested with ``ManualClock`` instead; these only
poll for real I/O to land.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def wait_until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    """Poll ``predicate`` from a coroutine until true, letting the loop run between."""
    interval = 0.005
    for _ in range(int(within / interval)):
        if predicate():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not reached within {within} s")


def poll_until(
    predicate: Callable[[], bool],
    within: float = 20.0,
    what: str = "the condition",
    interval: float = 0.05,
) -> None:
    """Poll ``predicate`` (which may act, e.g. post an event) until it holds once."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        time.sleep(interval)
