"""Rate-limit admission for ingest: the tenant's and the source's token buckets.

Runs before verification and storage (a flood costs us a bucket decision,
not an HMAC and an fsync). The tenant bucket (scope ``ingest``) is checked
first, then the source's (``src:<id>``); a denial answers 429 with
``Retry-After`` rounded up from the bucket's ``retry_after``. Decisions that
the limiter can make locally (the in-process bucket, leased tokens, a cached
denial) cost no task; a decision waiting for a lease is a future chained to
the answer (still no task), and only the rarer cases (an exact Redis call, a
second bucket after the first waited) run as a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from functools import partial

import orjson

from hookrouter.config.catalog import LiveSource, RateCheck
from hookrouter.core.http1 import Response
from hookrouter.ingress.handler import AdmissionControl, Refusal
from hookrouter.ratelimit import Decision, RateLimiter, decide, retry_after_header
from hookrouter.ratelimit.slots import LeaseBook


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
