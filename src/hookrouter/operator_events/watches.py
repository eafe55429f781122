"""The conditions operator events report, each polled once a second. Sans-IO.

Each watch reads numbers the router keeps anyway (the delivery engine's
backlog, the ingest refusal counts, the limiter's Redis health, each
source's accepted count) and returns the events to emit, as
``(type, data)`` pairs; none adds work per ingested event.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hookrouter.operator_events.latch import Change, Latch

Emitted = list[tuple[str, dict[str, Any]]]

# At most this many endpoints are summarised per period; the rest wait for the
# next one (their counts keep adding up), so a mass failure cannot flood the hooks.
MAX_DEAD_SUMMARIES: Final = 100
# source.quiet visits every source once per sweep: a quarter of the quiet
# time, at least one poll and at most this long.
MAX_SWEEP_SECONDS: Final = 60.0


class BacklogWatch:
    """``tenant.backlog_high`` after ``window`` seconds above ``high``; cleared when below."""

    def __init__(self, high: int, window: float) -> None:
        self._high_mark, self._window = high, window
        self._above_since: dict[str, float] = {}
        self._high: set[str] = set()  # tenants told about

    def poll(self, now: float, tenants: Iterable[str], backlog: Callable[[str], int]) -> Emitted:
        out: Emitted = []
        for tenant in sorted(set(tenants) | self._high | set(self._above_since)):
            count = backlog(tenant)
            if count > self._high_mark:
                since = self._above_since.setdefault(tenant, now)
                if tenant not in self._high and now - since >= self._window:
                    self._high.add(tenant)
                    out.append(("tenant.backlog_high", {"tenant": tenant, "backlog": count}))
            else:
                self._above_since.pop(tenant, None)
                if tenant in self._high:
                    self._high.discard(tenant)
                    out.append(("tenant.backlog_cleared", {"tenant": tenant, "backlog": count}))
        return out


class DeadLetterSummary:
    """``delivery.dead_lettered``: one event per endpoint per period, with the count."""

    def __init__(self, period: float) -> None:
        self._period = period
        self._counts: dict[tuple[str, str], int] = {}  # (tenant, endpoint) -> since last summary
        self._last = 0.0

    def dead(self, tenant: str, endpoint: str) -> None:
        key = (tenant, endpoint)
        self._counts[key] = self._counts.get(key, 0) + 1

    def poll(self, now: float) -> Emitted:
        if now - self._last < self._period or not self._counts:
            return []
        self._last = now
        out: Emitted = []
        for key in list(self._counts)[:MAX_DEAD_SUMMARIES]:
            tenant, endpoint = key
            count = self._counts.pop(key)
            data = {"tenant": tenant, "endpoint": endpoint, "count": count,
                    "period_seconds": self._period}  # fmt: skip
            out.append(("delivery.dead_lettered", data))
        return out


class SaturationWatch:
    """``store.saturated`` while ingest answers 429/503 for lack of room; then ``recovered``.

    ``refusals`` is the ingest path's running count per saturation reason
    (``ingress.ingest_metrics.SATURATION_REFUSALS``); a poll that sees it grow
    is a bad sample.
    """

    def __init__(self, refusals: Mapping[str, int], recovery: float) -> None:
        self._refusals = refusals
        self._seen = dict(refusals)
        self._latch = Latch(recovery)
        self._episode: dict[str, int] = {}

    def poll(self, now: float) -> Emitted:
        grown = {}
        for reason, count in list(self._refusals.items()):
            new = count - self._seen.get(reason, 0)
            if new > 0:
                grown[reason] = new
                self._episode[reason] = self._episode.get(reason, 0) + new
            self._seen[reason] = count
        change = self._latch.observe(bool(grown), now)
        if change is Change.RAISED:
            return [("store.saturated", {"refused": grown})]
        if change is Change.CLEARED:
            episode, self._episode = self._episode, {}
            data = {"refused": episode, "seconds": round(now - self._latch.raised_at, 1)}
            return [("store.recovered", data)]
        return []


class RedisWatch:
    """``ratelimit.redis_unavailable`` when the limiter stops using Redis; then ``recovered``."""

    def __init__(self, redis_up: Callable[[], bool], recovery: float) -> None:
        self._up = redis_up
        self._latch = Latch(recovery)

    def poll(self, now: float) -> Emitted:
        change = self._latch.observe(not self._up(), now)
        if change is Change.RAISED:
            return [("ratelimit.redis_unavailable", {})]
        if change is Change.CLEARED:
            seconds = round(now - self._latch.raised_at, 1)
            return [("ratelimit.redis_recovered", {"seconds": seconds})]
        return []


@dataclass(slots=True)
class _SourceSeen:
    count: float  # events accepted since the process started
    changed_at: float  # when a sweep first saw ``count`` at this value
    usual: float  # events since it last went quiet (or since start)
    quiet: bool = False


class QuietSources:
    """``source.quiet``: a source that had events has had none for ``quiet_after`` seconds.

    Nothing per event: the ingest path already counts each source's accepted
    events. Nothing per source per poll either: each poll visits the next
    slice of the sources, so every source is seen once per sweep and the
    poll's cost is the number of sources divided by the polls per sweep.
    A source counts as usually busy after ``min_events`` events; once quiet,
    it needs as many again before it can be reported quiet again, so a
    trickle source does not alternate quiet/resumed.
    """

    def __init__(
        self,
        quiet_after: float,
        min_events: int,
        sources: Callable[[], Mapping[str, str]],  # source id -> tenant id
        accepted: Callable[[str], float],
        poll_seconds: float,
    ) -> None:
        self._quiet_after, self._min_events = quiet_after, min_events
        self._sources, self._accepted = sources, accepted
        sweep = min(MAX_SWEEP_SECONDS, max(poll_seconds, quiet_after / 4))
        self._slices = max(1, round(sweep / poll_seconds))
        self._order: list[tuple[str, str]] = []
        self._cursor = 0
        self._seen: dict[str, _SourceSeen] = {}

    def poll(self, now: float) -> Emitted:
        if self._cursor >= len(self._order):
            self._new_sweep()
        step = math.ceil(len(self._order) / self._slices)
        visit = self._order[self._cursor : self._cursor + step]
        self._cursor += max(step, 1)
        out: Emitted = []
        for source, tenant in visit:
            event = self._visit(source, tenant, now)
            if event is not None:
                out.append(event)
        return out

    def _new_sweep(self) -> None:
        """The sources as of now; those removed since the last sweep are forgotten."""
        current = self._sources()
        self._order = list(current.items())
        self._cursor = 0
        for gone in self._seen.keys() - current.keys():
            del self._seen[gone]

    def _visit(self, source: str, tenant: str, now: float) -> tuple[str, dict[str, Any]] | None:
        count = self._accepted(source)
        seen = self._seen.get(source)
        if seen is None:
            self._seen[source] = _SourceSeen(count, now, count)
            return None
        if count > seen.count:
            seen.usual += count - seen.count
            seen.count, quiet_for = count, now - seen.changed_at
            seen.changed_at = now
            if seen.quiet:
                seen.quiet = False
                data = {"source": source, "tenant": tenant, "quiet_seconds": round(quiet_for)}
                return ("source.resumed", data)
            return None
        idle = now - seen.changed_at
        if seen.quiet or seen.usual < self._min_events or idle < self._quiet_after:
            return None
        seen.quiet, seen.usual = True, 0
        return ("source.quiet", {"source": source, "tenant": tenant, "quiet_seconds": round(idle)})
