"""One delivery attempt, from endpoint state to the outcome record to store.

Order of decisions: endpoint removed, disabled or gone (410 earlier) ->
disabled without a request; breaker refuses -> parked without a request;
otherwise resolve and SSRF-check the host (cached), sign with the endpoint's
secret and the attempt's time, POST within the attempt deadline, feed the
breaker, and let the endpoint's retry policy classify the result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from hookrouter.clock import Clock
from hookrouter.delivery.breaker import BreakerState, Transition
from hookrouter.delivery.endpoints import EndpointRuntime
from hookrouter.delivery.outcomes import attempt_record, breaker_success, outcome_record
from hookrouter.delivery.policy import AttemptResult, Disable, Park
from hookrouter.delivery.resolver import Resolver
from hookrouter.delivery.signing import delivery_headers
from hookrouter.delivery.transport import HttpTransport, Origin
from hookrouter.errors import DeliveryError
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.ledger import OutcomeRecord

log = logging.getLogger(__name__)

OnTransition = Callable[[Transition | None], None]


class Attempter:
    """Runs attempts over a shared transport and resolver."""

    def __init__(
        self,
        transport: HttpTransport,
        resolver: Resolver,
        clock: Clock,
        rand: Callable[[], float],
        timeout_seconds: float,
    ) -> None:
        self.transport = transport
        self.resolver = resolver
        self._clock = clock
        self._rand = rand
        self.timeout_seconds = timeout_seconds

    async def run(
        self,
        runtime: EndpointRuntime | None,
        ref: DeliveryRef,
        body: bytes,
        attempts_before: int,
        on_transition: OnTransition,
    ) -> OutcomeRecord:
        """Decide, maybe send, and return the delivery's new durable state."""
        clock = self._clock
        now = clock.time()
        if runtime is None or not runtime.config.enabled or runtime.gone:
            return outcome_record(ref, Disable("endpoint_removed"), attempts_before, None, now)
        breaker = runtime.breaker
        allowed, transition = breaker.allow(clock.monotonic())
        on_transition(transition)
        if not allowed:
            return outcome_record(ref, Park("breaker_open"), attempts_before, None, now)
        attempt = attempts_before + 1
        started, mono = clock.time(), clock.monotonic()
        result = await self.post(runtime, ref, body, started)
        elapsed_ms = (clock.monotonic() - mono) * 1000.0
        on_transition(breaker.record(breaker_success(result), clock.monotonic()))
        now = clock.time()
        outcome = runtime.policy.classify(
            attempt, result, now, self._rand, breaker_open=breaker.state is BreakerState.OPEN
        )
        if isinstance(outcome, Disable):
            runtime.gone = True
            log.warning("endpoint %s answered 410 Gone: disabling it", ref.endpoint_id)
        history = attempt_record(attempt, started, elapsed_ms, result)
        return outcome_record(ref, outcome, attempt, history, now)

    async def post(
        self, runtime: EndpointRuntime, ref: DeliveryRef, body: bytes, now: float
    ) -> AttemptResult:
        """The signed POST; transport failures become a result with a reason code."""
        target = runtime.target
        try:
            address = await self.resolver.resolve(target.host, target.port)
            origin = Origin(target.scheme, target.host, target.port, str(address))
            headers = delivery_headers(runtime.signer, msg_id=ref.event_id, now=now, body=body)
            response = await self.transport.request(
                origin, "POST", target.path, headers, body, total_timeout=self.timeout_seconds
            )
        except DeliveryError as exc:
            return AttemptResult(None, exc.reason)
        return AttemptResult(response.status, None, response.headers.get("retry-after"))

    def __repr__(self) -> str:
        return f"Attempter(timeout={self.timeout_seconds}s)"


__all__ = ["Attempter"]
