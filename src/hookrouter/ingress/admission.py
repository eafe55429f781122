"""Ingest admission: the tenant's backlog cap, store pressure, then rate limits.

Runs before verification and storage (a flood costs us a decision, not an
HMAC and an fsync). ``BacklogAdmission`` is checked first because it is a
local dictionary read (``flow/backlog.py``): a shed answers 429 (backlog) or
503 (slow commits) with Retry-After; an at-risk acceptance (a sender that
never retries, near or over the cap) counts ``hookrouter_backlog_at_risk_total``
and logs a warning at most once a minute per tenant. It reads the backlog
from the delivery engine through a callable, so ingress owns admission and
delivery knows nothing of it.

Then ``RateLimitAdmission`` decides: the tenant bucket (scope ``ingest``)
first, then the source's (``src:<id>``); a denial answers 429 with
``Retry-After`` rounded up from the bucket's ``retry_after``. Decisions that
the limiter can make locally (the in-process bucket, leased tokens, a cached
denial) cost no task; a decision waiting for a lease is a future chained to
the answer (still no task), and only the rarer cases (an exact Redis call, a
second bucket after the first waited) run as a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial

import orjson
from prometheus_client import Counter

from hookrouter.clock import Clock
from hookrouter.config.catalog import LiveSource, RateCheck
from hookrouter.core.http1 import Response
from hookrouter.flow.backlog import BacklogCount, Shed, decide_backlog, decide_pressure
from hookrouter.ingress.handler import AdmissionControl, Refusal
from hookrouter.metrics import REGISTRY
from hookrouter.ratelimit import Decision, RateLimiter, decide, retry_after_header
from hookrouter.ratelimit.slots import LeaseBook

log = logging.getLogger(__name__)

SHED = Counter(
    "hookrouter_backlog_shed",
    "Ingest requests answered 429 because the tenant's backlog is at max_backlog.",
    ["tenant", "source"],
    registry=REGISTRY,
)
AT_RISK = Counter(
    "hookrouter_backlog_at_risk",
    "Events accepted from a sender that never retries while its tenant's backlog is "
    "at 90 % of max_backlog or more: shedding would lose them, growing may exhaust the disk.",
    ["tenant", "source"],
    registry=REGISTRY,
)
PRESSURE_SHED = Counter(
    "hookrouter_store_pressure_shed",
    "Ingest requests answered 503 because store commits were slower than max_commit_latency_ms.",
    ["tenant", "source"],
    registry=REGISTRY,
)
PRESSURE_AT_RISK = Counter(
    "hookrouter_store_pressure_at_risk",
    "Events accepted from a sender that never retries while store commits were too slow.",
    ["tenant", "source"],
    registry=REGISTRY,
)
WARN_EVERY = 60.0
# Healthy commits take milliseconds; a second means the disk is in trouble.
DEFAULT_MAX_COMMIT_LATENCY_MS = 1000.0


class BacklogAdmission(AdmissionControl):
    """``AdmissionControl``: backlog cap first, then ``inner`` (rate limits)."""

    def __init__(
        self,
        backlog: Callable[[str], int],
        clock: Clock,
        inner: AdmissionControl | None = None,
        *,
        backlog_count: Callable[[str], BacklogCount | int] | None = None,
        commit_latency_ms: Callable[[float], float] | None = None,
        max_commit_latency_ms: float = DEFAULT_MAX_COMMIT_LATENCY_MS,
    ) -> None:
        self._backlog = backlog
        # The engine's count of a tenant with work (a plain number when it has
        # none); kept per source, so most events read it without a lookup.
        self._find_count = backlog_count
        self._clock = clock
        self.inner = inner
        self._commit_latency_ms = commit_latency_ms
        self._max_commit_ms = max_commit_latency_ms
        self._warned: dict[str, float] = {}

    def check(self, live: LiveSource) -> Refusal | asyncio.Future[Refusal | None] | None:
        retries = live.sender_retries
        tenant_id, cap = live.tenant_id, live.max_backlog
        backlog = self._backlog_of(live, tenant_id)
        decision = decide_backlog(backlog, cap, retries)
        if isinstance(decision, Shed):
            SHED.labels(tenant_id, live.source_id).inc()
            return _shed_response(
                decision,
                f"tenant {tenant_id} has {backlog} undelivered events "
                f"(max_backlog {cap}); retry later",
            )
        if decision.at_risk:
            self._at_risk(tenant_id, live.source_id, backlog, cap)
        slow = self._store_pressure(live, retries)
        if slow is not None:
            return slow
        return self.inner.check(live) if self.inner is not None else None

    def _backlog_of(self, live: LiveSource, tenant_id: str) -> int:
        """The tenant's open deliveries: from the engine's count kept with the source,
        looked up (and kept) when there is none yet or the engine released it."""
        count = live.backlog_count
        if count is None or not count.live:
            find = self._find_count
            if find is None:
                return self._backlog(tenant_id)
            found = find(tenant_id)
            if isinstance(found, int):  # no work in memory: nothing to keep
                return max(0, found)
            count = live.backlog_count = found
        return max(0, count.open)

    def _store_pressure(self, live: LiveSource, retries: bool) -> Refusal | None:
        """503 + Retry-After for retrying senders while commits are too slow."""
        if self._commit_latency_ms is None:
            return None
        commit_ms = self._commit_latency_ms(self._clock.monotonic())
        decision = decide_pressure(commit_ms, self._max_commit_ms, retries)
        if isinstance(decision, Shed):
            PRESSURE_SHED.labels(live.tenant_id, live.source_id).inc()
            return _shed_response(
                decision, f"the event store commits slowly ({commit_ms:.0f} ms); retry later"
            )
        if decision.at_risk:
            PRESSURE_AT_RISK.labels(live.tenant_id, live.source_id).inc()
        return None

    def _at_risk(self, tenant_id: str, source_id: str, backlog: int, cap: int) -> None:
        AT_RISK.labels(tenant_id, source_id).inc()
        now = self._clock.monotonic()
        if now - self._warned.get(tenant_id, float("-inf")) >= WARN_EVERY:
            self._warned[tenant_id] = now
            log.warning(
                "tenant %s: %d undelivered events (max_backlog %d) and source %s never "
                "retries: still accepting, but the endpoint must recover or the disk fills",
                tenant_id,
                backlog,
                cap,
                source_id,
            )

    def __repr__(self) -> str:
        return f"BacklogAdmission(inner={self.inner!r})"


def _shed_response(decision: Shed, message: str) -> Refusal:
    """The 429/503 answer for a shed: the reason, a message and ``Retry-After``."""
    body = orjson.dumps({"error": decision.reason, "message": message})
    retry_after = str(int(decision.retry_after))
    response = Response(decision.status, body, headers=(("retry-after", retry_after),))
    return Refusal(decision.reason, response)


def rate_limited(decision: Decision, scope: str) -> Refusal:
    """The 429 answer for a denial."""
    body = orjson.dumps(
        {
            "error": "rate_limited",
            "message": f"rate limit of {scope} exceeded; retry later",
            "retry_after": round(decision.retry_after, 3),
        }
    )
    headers = (("retry-after", retry_after_header(decision)),)
    return Refusal("rate_limited", Response(429, body, headers=headers))


class RateLimitAdmission(AdmissionControl):
    """``AdmissionControl`` over a ``RateLimiter``."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter
        # A limiter with leases (Redis) exposes them: the usual grant then
        # costs no interpreted call (slots.LeaseBook).
        leases = getattr(limiter, "leases", None)
        self._leases: LeaseBook | None = leases if isinstance(leases, LeaseBook) else None
        self._tasks: set[asyncio.Task[Refusal | None]] = set()

    def check(self, live: LiveSource) -> Refusal | asyncio.Future[Refusal | None] | None:
        checks = live.rate_checks
        if not checks:
            return None
        limiter, leases = self.limiter, self._leases
        for index, (tenant_id, scope, limit) in enumerate(checks):
            decision = leases.take(tenant_id, scope, limit) if leases is not None else None
            if decision is None:
                decision = limiter.try_acquire_nowait(tenant_id, scope, limit)
            if decision is None:
                return self._later(limiter.acquire(tenant_id, scope, limit), checks, index)
            if not decision.allowed:
                return rate_limited(decision, scope)
        return None

    def _later(
        self, pending: Awaitable[Decision], checks: tuple[RateCheck, ...], index: int
    ) -> asyncio.Future[Refusal | None]:
        if index == len(checks) - 1 and asyncio.isfuture(pending):
            # The common case under load (the last bucket waits for a lease).
            answer: asyncio.Future[Refusal | None] = asyncio.get_running_loop().create_future()
            pending.add_done_callback(partial(_answer, answer, checks[index][1]))
            return answer
        task = asyncio.ensure_future(self._remote(pending, checks, index))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _remote(
        self, pending: Awaitable[Decision], checks: tuple[RateCheck, ...], index: int
    ) -> Refusal | None:
        decision = await pending
        if not decision.allowed:
            return rate_limited(decision, checks[index][1])
        for tenant_id, scope, limit in checks[index + 1 :]:
            decision = await decide(self.limiter, tenant_id, scope, limit)
            if not decision.allowed:
                return rate_limited(decision, scope)
        return None

    async def close(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.limiter.close()


def _answer(
    answer: asyncio.Future[Refusal | None], scope: str, pending: asyncio.Future[Decision]
) -> None:
    if answer.done():  # the request went away
        return
    if pending.cancelled():
        answer.cancel()
    elif (error := pending.exception()) is not None:
        answer.set_exception(error)
    else:
        decision = pending.result()
        answer.set_result(None if decision.allowed else rate_limited(decision, scope))


__all__ = [
    "AT_RISK",
    "PRESSURE_AT_RISK",
    "PRESSURE_SHED",
    "SHED",
    "BacklogAdmission",
    "RateLimitAdmission",
    "rate_limited",
]
