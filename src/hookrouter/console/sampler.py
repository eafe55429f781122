"""The overview's last hour: the router's own counters, sampled into a ring buffer.

Every ``interval`` seconds the sampler reads the cumulative counters (ingest
results from the ingest metric family, delivery outcomes from the delivery
engine's counters, not its per-tenant stats) and keeps the last ``size`` readings.
Charts and rates are differences between neighbouring readings, so the
sampler does no work per event and costs the ingest path nothing; no
Prometheus server is needed to see the last hour.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from hookrouter.clock import Clock
from hookrouter.ingress.ingest_metrics import INGEST_REQUESTS

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 5.0
SIZE = 720  # an hour of 5 s readings
_RECEIVED = frozenset({"accepted", "duplicate"})

DeliveryCounters = Callable[[], Awaitable[dict[str, int]]]


@dataclass(frozen=True, slots=True)
class Reading:
    at: float  # wall clock seconds
    received: float
    refused: dict[str, float]  # by reason
    delivery: dict[str, int]  # delivered, retried, dead, ...


def ingest_totals() -> tuple[float, dict[str, float]]:
    """(events accepted or duplicate, refusals by reason) since the process started."""
    received, refused, _ = _ingest_reading()
    return received, refused


def received_by_source() -> dict[str, float]:
    """Events each source had accepted (or recognised as duplicates) since the start."""
    return _ingest_reading()[2]


def _ingest_reading() -> tuple[float, dict[str, float], dict[str, float]]:
    """Received total, refusals by reason and received by source, in one pass.

    Read from the counter's cells, not ``collect()``: with a series per source
    (up to ``[telemetry] labelled_tenants``), building prometheus_client samples twice
    per reading was the sampler's whole cost, paid on the event loop.
    """
    received = 0.0
    refused: dict[str, float] = {}
    by_source: dict[str, float] = {}
    for (source, result), cell in INGEST_REQUESTS.cells():
        value = cell.value
        if result in _RECEIVED:
            received += value
            by_source[source] = by_source.get(source, 0.0) + value
        else:
            refused[result] = refused.get(result, 0.0) + value
    return received, refused, by_source


class Sampler:
    def __init__(
        self,
        clock: Clock,
        delivery: DeliveryCounters,
        *,
        interval: float = INTERVAL_SECONDS,
        size: int = SIZE,
    ) -> None:
        self._clock = clock
        self._delivery = delivery
        self.interval = interval
        self.readings: deque[Reading] = deque(maxlen=size)
        self.started_at = clock.time()
        # When each source's count last grew (to within one interval): a source
        # that went quiet shows, without a query per source.
        self.last_received: dict[str, float] = {}
        self._by_source: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def sample(self) -> Reading:
        received, refused, by_source = _ingest_reading()
        reading = Reading(self._clock.time(), received, refused, await self._delivery())
        self.readings.append(reading)
        for source, total in by_source.items():
            if total > self._by_source.get(source, 0.0):
                self.last_received[source] = reading.at
            self._by_source[source] = total
        return reading

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:  # a missed reading leaves a gap, never stops the sampler
                log.exception("console sampler: reading failed")
            await asyncio.sleep(self.interval)

    def series(self, pick: Callable[[Reading], float]) -> list[float]:
        """Per-second rates of ``pick`` between neighbouring readings, oldest first."""
        values = list(self.readings)
        rates = []
        for before, after in itertools.pairwise(values):
            elapsed = after.at - before.at
            rates.append(max(0.0, pick(after) - pick(before)) / elapsed if elapsed > 0 else 0.0)
        return rates


def received(reading: Reading) -> float:
    return reading.received


def refused(reading: Reading) -> float:
    return sum(reading.refused.values())


def delivered(reading: Reading) -> float:
    return float(reading.delivery.get("delivered", 0))


def failed(reading: Reading) -> float:
    return float(reading.delivery.get("retried", 0) + reading.delivery.get("dead", 0))


__all__ = [
    "INTERVAL_SECONDS",
    "SIZE",
    "Reading",
    "Sampler",
    "delivered",
    "failed",
    "ingest_totals",
    "received",
    "received_by_source",
    "refused",
]
