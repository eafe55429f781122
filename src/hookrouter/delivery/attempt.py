"""One delivery attempt, from endpoint state to the outcome record to store.

Order of decisions: endpoint removed, disabled or gone (410 earlier) ->
disabled without a request; breaker refuses -> parked without a request;
otherwise resolve and SSRF-check the host (cached), sign with the endpoint's
secret and the attempt's time, POST within the attempt deadline, feed the
breaker, and let the endpoint's retry policy classify the result.

Callbacks, not coroutines: with the host cached and a pooled connection idle,
an attempt is started synchronously and finished from the transport's
callback, with no task and no future. A task per attempt plus the coroutine
chain under it cost more router CPU than the POST itself (figures in
docs/performance.md, "Delivery engine").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from hookrouter.clock import Clock
from hookrouter.core.http1client import HttpResponse
from hookrouter.delivery.breaker import BreakerState, Transition
from hookrouter.delivery.endpoints import EndpointRuntime
from hookrouter.delivery.outcomes import attempt_record, breaker_success, outcome_record
from hookrouter.delivery.policy import AttemptResult, Disable, Park, RetryAt
from hookrouter.delivery.resolver import Resolver
from hookrouter.delivery.signing import delivery_headers
from hookrouter.delivery.ssrf import IPAddress
from hookrouter.delivery.transport import HttpTransport, RequestHandle
from hookrouter.errors import DeliveryError
from hookrouter.flow.credits import DeliveryRef
from hookrouter.ratelimit import RateLimiter
from hookrouter.store.ledger import OutcomeRecord, Payload
from hookrouter.telemetry.logs import context
from hookrouter.telemetry.tracing import (
    TRACEPARENT,
    AttemptTrace,
    Tracing,
    untraced_traceparent,
)

log = logging.getLogger(__name__)

OnTransition = Callable[[Transition | None], None]
Finish = Callable[[OutcomeRecord | None], None]  # None: abandoned, still pending in the store


# The first bytes of a failed answer kept with the attempt (what the console
# shows); Svix and Hook0 keep a receiver's answer for the same reason.
EXCERPT_BYTES = 256


def excerpt_of(body: bytes) -> str | None:
    return body[:EXCERPT_BYTES].decode("utf-8", "replace") if body else None


class Attempt:
    """One attempt in progress; ``cancel`` abandons it (shutdown)."""

    __slots__ = (
        "attempter",
        "finish",
        "handle",
        "number",
        "on_transition",
        "payload",
        "ref",
        "runtime",
        "started",
        "started_mono",
        "task",
        "trace",
    )

    def __init__(
        self,
        attempter: Attempter,
        runtime: EndpointRuntime,
        ref: DeliveryRef,
        *,
        payload: Payload,
        number: int,
        hooks: tuple[OnTransition, Finish],
        started: tuple[float, float],
    ) -> None:
        self.attempter = attempter
        self.runtime = runtime
        self.ref = ref
        self.payload = payload
        self.number = number
        self.on_transition, self.finish = hooks
        self.started, self.started_mono = started  # wall, monotonic
        self.handle: RequestHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.trace: AttemptTrace | None = None  # its span, when tracing is on

    def done(self, response: HttpResponse | None, error: DeliveryError | None) -> None:
        """The transport's callback."""
        if response is not None:
            status = response.status
            # Why a receiver refused is often in its answer; a success's body is not kept.
            excerpt = None if 200 <= status < 300 else excerpt_of(response.body)
            result = AttemptResult(status, None, response.headers.get("retry-after"), excerpt)
        else:
            result = AttemptResult(None, error.reason if error else "unknown_error")
        self.attempter.complete(self, result)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        if self.task is not None:
            self.task.cancel()
        self.runtime.breaker.cancel_probe()
        if self.trace is not None:
            self.trace.abandoned()
            self.trace = None
        finish, self.finish = self.finish, _ignore
        finish(None)


def _ignore(_record: OutcomeRecord | None) -> None:
    return None


def _log_context(attempt: Attempt) -> dict[str, Any]:
    """Identifiers of an attempt for a log line's ``extra`` (never its body or headers)."""
    ref = attempt.ref
    return context(
        event_id=ref.event_id,
        tenant=attempt.runtime.tenant_id,
        endpoint=ref.endpoint_id,
        attempt=attempt.number,
    )


class Attempter:
    """Starts attempts over a shared transport and resolver."""

    def __init__(
        self,
        transport: HttpTransport,
        resolver: Resolver,
        clock: Clock,
        rand: Callable[[], float],
        timeout_seconds: float,
    ) -> None:
        # Told the endpoint id when a 410 disables an endpoint, so the runtime
        # can persist ``enabled = false`` (otherwise a restart would re-enable it).
        self.on_gone: Callable[[str], None] | None = None
        # Endpoints with a ``rate_limit`` take a token per attempt from here.
        self.limiter: RateLimiter | None = None
        # A span per attempt when [telemetry] is on (None: off, one check per attempt).
        self.tracing: Tracing | None = None
        self.transport = transport
        self.resolver = resolver
        self.clock = clock
        self._rand = rand
        self.timeout_seconds = timeout_seconds
        self._tasks: set[asyncio.Task[None]] = set()

    def begin(
        self,
        runtime: EndpointRuntime | None,
        ref: DeliveryRef,
        payload: Payload,
        attempts_before: int,
        hooks: tuple[OnTransition, Finish],
    ) -> Attempt | None:
        """Start an attempt; ``finish(record)`` is called once, maybe before this returns.

        Returns the attempt in progress, or None when it was decided at once.
        """
        finish = hooks[1]
        if runtime is None or not runtime.enabled or runtime.gone:
            now = self.clock.time()
            finish(outcome_record(ref, Disable("endpoint_removed"), attempts_before, None, now))
            return None
        limit = runtime.rate_limit
        if limit is not None and self.limiter is not None:
            decision = self.limiter.try_acquire_nowait(
                runtime.tenant_id, f"ep:{ref.endpoint_id}", limit
            )
            if decision is None:  # the bucket lives in Redis: ask, then go on
                task = asyncio.get_running_loop().create_task(
                    self._throttled_begin(runtime, ref, payload, attempts_before, hooks)
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return None
            if not decision.allowed:
                now = self.clock.time()
                finish(self._deferred(runtime, ref, attempts_before, decision.retry_after, now))
                return None
        return self._admitted(runtime, ref, payload, attempts_before, hooks)

    async def _throttled_begin(
        self,
        runtime: EndpointRuntime,
        ref: DeliveryRef,
        payload: Payload,
        attempts_before: int,
        hooks: tuple[OnTransition, Finish],
    ) -> None:
        limit = runtime.rate_limit
        assert self.limiter is not None and limit is not None
        # begin() already tried try_acquire_nowait: go straight to the wait.
        decision = await self.limiter.acquire(runtime.tenant_id, f"ep:{ref.endpoint_id}", limit)
        if decision.allowed:
            self._admitted(runtime, ref, payload, attempts_before, hooks)
        else:
            now = self.clock.time()
            hooks[1](self._deferred(runtime, ref, attempts_before, decision.retry_after, now))

    def _deferred(
        self,
        runtime: EndpointRuntime,
        ref: DeliveryRef,
        attempts_before: int,
        retry_after: float,
        now: float,
    ) -> OutcomeRecord:
        """No token for this endpoint: retry later without an attempt, slot or credit.

        Each deferred delivery is spaced one token's time after the previous
        one, so a backlog behind a slow rate comes back paced rather than all
        at once (and is deferred about once, not over and over).
        """
        limit = runtime.rate_limit
        step = 1.0 / limit.refill_per_second if limit is not None else 0.0
        at = max(now + retry_after, runtime.throttled_until + step)
        runtime.throttled_until = at
        outcome = RetryAt(at, attempts_before + 1, "rate_limited")
        tenant = runtime.tenant_id
        return outcome_record(ref, outcome, attempts_before, None, now, tenant_id=tenant)

    def _admitted(
        self,
        runtime: EndpointRuntime,
        ref: DeliveryRef,
        payload: Payload,
        attempts_before: int,
        hooks: tuple[OnTransition, Finish],
    ) -> Attempt | None:
        on_transition, finish = hooks
        # The clocks are read once here and once in complete(): each read goes
        # through the Clock protocol, and reading them per step showed up in
        # profiles of the router end to end.
        clock = self.clock
        now, mono = clock.time(), clock.monotonic()
        allowed, transition = runtime.breaker.allow(mono)
        on_transition(transition)
        if not allowed:
            park = Park("breaker_open")
            tenant = runtime.tenant_id
            finish(outcome_record(ref, park, attempts_before, None, now, tenant_id=tenant))
            return None
        attempt = Attempt(
            self,
            runtime,
            ref,
            payload=payload,
            number=attempts_before + 1,
            hooks=hooks,
            started=(now, mono),
        )
        try:
            address = self.resolver.cached(runtime.host, runtime.port)
        except DeliveryError as exc:
            self.complete(attempt, AttemptResult(None, exc.reason))
            return None
        if address is None:  # first use of this host (or its TTL ran out): look it up
            attempt.task = asyncio.get_running_loop().create_task(self._resolve_then_send(attempt))
        else:
            self._send(attempt, address)
        return attempt

    async def _resolve_then_send(self, attempt: Attempt) -> None:
        runtime = attempt.runtime
        try:
            address = await self.resolver.resolve(runtime.host, runtime.port)
        except DeliveryError as exc:
            attempt.task = None
            self.complete(attempt, AttemptResult(None, exc.reason))
            return
        attempt.task = None
        # The lookup took time: the attempt (and its timing) starts now.
        attempt.started, attempt.started_mono = self.clock.time(), self.clock.monotonic()
        self._send(attempt, address)

    def _send(self, attempt: Attempt, address: IPAddress) -> None:
        """POST, signed at the attempt's start."""
        now = attempt.started
        runtime = attempt.runtime
        origin = runtime.origin(address)
        payload = attempt.payload
        body = payload.body
        headers = delivery_headers(
            runtime.signer,
            msg_id=attempt.ref.event_id,
            now=now,
            body=body,
            content_type=payload.content_type,
            extra=runtime.headers,
        )
        if self.tracing is not None:
            self._trace(attempt, headers)
        attempt.handle = self.transport.start(
            origin,
            "POST",
            runtime.path,
            headers,
            body,
            total_timeout=self.timeout_seconds,
            on_done=attempt.done,
        )

    def _trace(self, attempt: Attempt, headers: list[tuple[str, str]]) -> None:
        """Start the attempt's span (a child of the stored ingest span); maybe tell the receiver."""
        tracing = self.tracing
        assert tracing is not None
        ref = attempt.ref
        trace = tracing.attempt(
            attempt.payload.trace,
            ref.event_id,
            attempt.runtime.tenant_id,
            ref.endpoint_id,
            attempt.number,
        )
        attempt.trace = trace
        if tracing.propagates_to(ref.endpoint_id):
            if trace is None:  # ingested untraced: the same trace id for every attempt
                headers.append((TRACEPARENT, untraced_traceparent(ref.event_id)))
            else:
                headers.append((TRACEPARENT, trace.traceparent()))

    def complete(self, attempt: Attempt, result: AttemptResult) -> None:
        """Feed the breaker, classify, and report the outcome record."""
        clock = self.clock
        runtime = attempt.runtime
        breaker = runtime.breaker
        mono = clock.monotonic()
        elapsed_ms = (mono - attempt.started_mono) * 1000.0
        attempt.on_transition(breaker.record(breaker_success(result), mono))
        now = clock.time()
        outcome = runtime.policy.classify(
            attempt.number,
            result,
            now,
            self._rand,
            breaker_open=breaker.state is BreakerState.OPEN,
        )
        if isinstance(outcome, Disable):
            runtime.gone = True
            log.warning(
                "endpoint %s answered 410 Gone: disabling it",
                attempt.ref.endpoint_id,
                extra=_log_context(attempt),
            )
            if self.on_gone is not None:
                self.on_gone(attempt.ref.endpoint_id)
        failed = result.error is not None or not 200 <= (result.status_code or 0) < 300
        if failed and log.isEnabledFor(logging.DEBUG):  # one check per failure when quiet
            log.debug(
                "delivery attempt failed: status %s, error %s, next %s",
                result.status_code,
                result.error,
                type(outcome).__name__,
                extra=_log_context(attempt),
            )
        if attempt.trace is not None:
            state = breaker.state.value
            attempt.trace.finished(result.status_code, result.error, type(outcome).__name__, state)
            attempt.trace = None
        history = attempt_record(attempt.number, attempt.started, elapsed_ms, result)
        finish, attempt.finish = attempt.finish, _ignore
        tenant = runtime.tenant_id
        record = outcome_record(
            attempt.ref, outcome, attempt.number, history, now, tenant_id=tenant
        )
        finish(record)

    def __repr__(self) -> str:
        return f"Attempter(timeout={self.timeout_seconds}s)"


__all__ = ["Attempt", "Attempter"]
