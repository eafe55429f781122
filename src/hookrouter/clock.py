"""Time as an argument.

Pure code takes ``now`` (seconds, float) as a parameter; I/O shells hold a
:class:`Clock`. Tests drive a :class:`ManualClock` instead of sleeping.
Wall time (``time()``) is for timestamps that leave the process (stored
``received_at``, signature tolerance); monotonic time (``monotonic()``) is for
timeouts and rates inside the process.
"""

from __future__ import annotations

import time as _time_module
from collections.abc import Callable
from typing import Final

# Bound once, as C statics of the compiled module: a call through the module
# (``time.monotonic()``) looks the attribute up each time, and a plain
# module-level name is still a globals-dict lookup per call.
_monotonic: Final[Callable[[], float]] = _time_module.monotonic
_wall_time: Final[Callable[[], float]] = _time_module.time


class Clock:
    """Source of time for I/O shells: :class:`SystemClock` or :class:`ManualClock`.

    A base class rather than a Protocol: compiled code calls a Protocol's
    methods through the generic Python path (a method lookup by name, then
    the call), and a native base class's through its vtable; the router
    reads a clock several times per event.
    """

    __slots__ = ()

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        raise NotImplementedError

    def monotonic(self) -> float:
        """Monotonic seconds, for intervals and deadlines."""
        raise NotImplementedError


class SystemClock(Clock):
    """The real clocks of the machine."""

    __slots__ = ()

    def time(self) -> float:
        return _wall_time()

    def monotonic(self) -> float:
        return _monotonic()

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock(Clock):
    """A clock that only moves when a test moves it."""

    __slots__ = ("_mono", "_wall")

    def __init__(self, wall: float = 1_700_000_000.0, mono: float = 1000.0) -> None:
        self._wall = wall
        self._mono = mono

    def time(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward; time never goes backwards."""
        if seconds < 0:
            raise ValueError("a ManualClock cannot go backwards")
        self._wall += seconds
        self._mono += seconds

    def __repr__(self) -> str:
        return f"ManualClock(wall={self._wall:.3f}, mono={self._mono:.3f})"


SYSTEM_CLOCK = SystemClock()
