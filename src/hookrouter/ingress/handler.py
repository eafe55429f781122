"""The ingest path, and the one place where errors become HTTP statuses.

Order of work for ``POST /in/{source_id}`` (cheapest refusal first):

1. framing limits (done by the HTTP core before we see the request: 413, 431, 400);
2. source lookup (404 ``unknown_source``);
3. rate limit of the tenant and the source (429 + Retry-After), before any
   verification or storage work;
4. a ``Content-Encoding`` body decoded (``core.content_coding``: 415, 413,
   400), then signature verification (401 with the failing check as the reason);
5. for schemes that sign only the body, the replay guard (``verify.replay``):
   a body this source accepted within ``replay_window`` is a duplicate;
6. routing to endpoints, dedup and durable commit (one group commit);
7. 200 ``{"id": "evt_...", "duplicate": false}`` only after the commit holding
   the event returned; a duplicate gets the original id and is stored once.

Everything else (health, metrics, admin) goes to ``OpsApp`` — kept out of
this module so the hot path stays a straight line. The handler is written as
callbacks, not coroutines: a task per request would cost more CPU than the
rest of the request (see design.md measured facts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from hookrouter.clock import Clock
from hookrouter.config.catalog import Catalog, LiveSource
from hookrouter.config.telemetry import LABELLED_TENANTS
from hookrouter.core.content_coding import ACCEPTED_CODINGS, decode_body
from hookrouter.core.http1 import DEFAULT_MAX_BODY_BYTES, Request, Response, error_body
from hookrouter.delivery.listener import CommitListener
from hookrouter.errors import (
    HookrouterError,
    RequestRejected,
    StoreError,
    StoreUnavailable,
    UnknownSource,
    UnsupportedEncoding,
    VerificationFailed,
)
from hookrouter.ids import new_event_id
from hookrouter.ingress.ingest_metrics import IngestMetrics
from hookrouter.ingress.session import Reply
from hookrouter.store.base import AppendResult, EventStore, NewEvent
from hookrouter.telemetry.logs import context
from hookrouter.telemetry.tracing import IngestTrace, Tracing
from hookrouter.verify.base import VerifiedEvent
from hookrouter.verify.replay import ReplayGuard, body_key

log = logging.getLogger(__name__)

INGEST_PREFIX: Final = "/in/"
# The 200 answer's body, {"id": "evt_...", "duplicate": false|true}, in pieces.
_ID_HEAD: Final = b'{"id":"'
_NEW_TAIL: Final = b'","duplicate":false}'
_DUPLICATE_TAIL: Final = b'","duplicate":true}'


@dataclass(frozen=True, slots=True)
class Refusal:
    """An admission control's "no": the answer to send and why (the metric's label)."""

    reason: str
    response: Response


# An event waiting for its commit: the event, its verification, the answer
# callback, when it was appended (monotonic), its replay guard key, its
# ingest span (tracing on) and its source.
_Waiting = tuple[
    NewEvent, VerifiedEvent, Reply, float, bytes | None, IngestTrace | None, LiveSource
]


class AdmissionControl:
    """Decides before verification whether a request may proceed (rate limits).

    ``check`` returns None to proceed now, a ``Refusal`` to refuse now, or an
    awaitable resolving to one of those when it must ask a remote limiter.
    A base class rather than a Protocol, like ``CommitListener``: it is
    asked once per request (twice when the backlog cap wraps the limits).
    """

    __slots__ = ()

    def check(self, live: LiveSource) -> Refusal | asyncio.Future[Refusal | None] | None:
        raise NotImplementedError


class CommitLatency:
    """A smoothed append-to-acknowledgement latency, as senders experience it.

    Read by the admission control to shed load from senders that retry when
    the store's commits are slow. It forgets itself when no commit finished
    for ``STALE_AFTER`` seconds, so shedding every sender cannot freeze it high.
    """

    __slots__ = ("_last", "value")
    # Final, not ClassVar: compiled code inlines a Final literal, and looks a
    # ClassVar up by name on every read (twice per event here).
    ALPHA: Final = 0.05  # ~20 commits of memory: one slow fsync does not trip it
    STALE_AFTER: Final = 2.0

    def __init__(self) -> None:
        self.value = 0.0  # seconds
        self._last = float("-inf")

    def observe(self, seconds: float, now: float) -> None:
        self.value += (seconds - self.value) * self.ALPHA
        self._last = now

    def current_ms(self, now: float) -> float:
        """The smoothed latency in ms, or 0 when there is no recent evidence."""
        return self.value * 1000.0 if now - self._last <= self.STALE_AFTER else 0.0

    def __repr__(self) -> str:
        return f"CommitLatency({self.value * 1000.0:.2f} ms)"


def error_response(
    error: HookrouterError,
    *,
    close: bool = False,
    headers: tuple[tuple[str, str], ...] = (),
) -> Response:
    """The JSON error response for ``error``; never includes a traceback.

    ``headers`` are the ones the status itself calls for (``Allow`` on a 405,
    ``Accept-Encoding`` on a 415); ``Retry-After`` comes from the error.
    """
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        headers = (*headers, ("retry-after", str(max(1, int(-(-retry_after // 1))))))
    return Response(error.status, error_body(error), headers=headers, close=close)


class IngestApp:
    """``Application`` for the ingress listener."""

    def __init__(
        self,
        catalog: Callable[[], Catalog],
        store: EventStore,
        clock: Clock,
        ops: Callable[[Request, Reply], None],
        *,
        admission: AdmissionControl | None = None,
        listener: CommitListener | None = None,
        commit_latency: CommitLatency | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        replays: ReplayGuard | None = None,
        labelled_sources: int = LABELLED_TENANTS,
    ) -> None:
        self._catalog = catalog
        self.replays = replays or ReplayGuard()
        self._max_body_bytes = max_body_bytes  # also the cap on a decoded body
        self._store = store
        self._clock = clock
        self._ops = ops
        self.admission = admission
        self.listener = listener
        self.metrics = IngestMetrics(labelled_sources)  # [telemetry] labelled_tenants
        self.commit_latency = commit_latency or CommitLatency()
        self.tracing: Tracing | None = None  # set by the router when [telemetry] is on

    def handle(self, request: Request, reply: Reply) -> None:
        if request.path.startswith(INGEST_PREFIX):
            self._ingest(request, reply)
        else:
            self._ops(request, reply)

    # -- the hot path --------------------------------------------------------

    def _ingest(self, request: Request, reply: Reply) -> None:
        source_id = request.path[len(INGEST_PREFIX) :].rstrip("/")
        if request.method != "POST":
            reply(_method_not_allowed())
            return
        catalog = self._catalog()
        live = catalog.sources.get(source_id)
        if live is None:
            self.metrics.rejected("unknown", "unknown_source")
            reply(error_response(UnknownSource(f"no source named {source_id!r}")))
            return
        admission = self.admission
        decision = admission.check(live) if admission is not None else None
        if decision is None:
            self._verify_and_store(catalog, live, request, reply)
        elif isinstance(decision, Refusal):
            self._refused(live, decision, reply)
        else:
            decision.add_done_callback(partial(self._admitted, live, request, reply))

    def _refused(self, live: LiveSource, refusal: Refusal, reply: Reply) -> None:
        """Count an admission refusal under its reason, then answer."""
        self.metrics.rejected(live.source_id, refusal.reason)
        reply(refusal.response)

    def _admitted(
        self,
        live: LiveSource,
        request: Request,
        reply: Reply,
        future: asyncio.Future[Refusal | None],
    ) -> None:
        if future.cancelled():
            stopping = StoreUnavailable("the router is stopping")
            refusal: Refusal | None = Refusal(stopping.reason, error_response(stopping))
        elif (exc := future.exception()) is not None:
            # A limiter bug must not block ingest: fail open, as on_redis_error's default does.
            log.error(
                "rate limit check failed; admitting the request",
                exc_info=exc,
                extra=context(tenant=live.tenant_id, source=live.source_id),
            )
            refusal = None
        else:
            refusal = future.result()
        if refusal is not None:
            self._refused(live, refusal, reply)
        else:
            self._verify_and_store(self._catalog(), live, request, reply)

    def _verify_and_store(
        self, catalog: Catalog, live: LiveSource, request: Request, reply: Reply
    ) -> None:
        body = request.body
        tenant_id, source_id = live.tenant_id, live.source_id
        trace = None
        if self.tracing is not None:
            trace = self.tracing.ingest(request.headers, tenant_id, source_id)
        encoding = request.headers.get("content-encoding")
        if encoding is not None:
            try:
                body = decode_body(encoding, body, self._max_body_bytes)
            except RequestRejected as exc:
                self.metrics.rejected(source_id, exc.reason)
                if trace is not None:
                    trace.refused(exc.reason)
                reply(_encoding_refused(exc))
                return
        now = self._clock.time()
        try:
            verified = live.verifier.verify(request.headers, body, now)
        except VerificationFailed as exc:
            self.metrics.rejected(source_id, exc.reason)
            if trace is not None:
                trace.refused(exc.reason)
            reply(error_response(exc))
            return
        routing = catalog.routing
        event = NewEvent(
            event_id=new_event_id(int(now * 1000)),
            tenant_id=tenant_id,
            source_id=source_id,
            provider_event_id=verified.provider_event_id,
            event_type=verified.event_type,
            received_at=now,
            headers=request.headers if trace is None else trace.stored_headers(request.headers),
            body=body,
            endpoint_ids=routing.route_entry(
                live.routes(routing), tenant_id, verified.event_type, body, request.headers
            ),
        )
        window = live.replay_window
        key = None
        if window > 0.0:
            key = body_key(source_id, body)
            first = self.replays.claim(key, self._clock.monotonic(), window)
            if first is not None:
                if first.event_id is not None:
                    self._replayed(event, verified, reply, trace, first.event_id)
                else:
                    settled = partial(
                        self._replay_settled, event, verified, reply, trace, live=live
                    )
                    first.waiters.append(settled)
                return
        self._append(event, verified, reply, key, trace, live=live)

    def _append(
        self,
        event: NewEvent,
        verified: VerifiedEvent,
        reply: Reply,
        key: bytes | None,
        trace: IngestTrace | None,
        *,
        live: LiveSource,
    ) -> None:
        waiting: _Waiting = (event, verified, reply, self._clock.monotonic(), key, trace, live)
        listener = self.listener
        if listener is not None:
            listener.event_appending(event)
        try:
            # Answered from the commit itself (append_then), not a future's callback.
            self._store.append_then(event, partial(self._committed, waiting))
        except StoreError as exc:
            if listener is not None:
                listener.event_not_stored(event)
            if key is not None:
                self.replays.forget(key)
            self._store_failed(event.source_id, exc, reply, trace)

    def _replay_settled(
        self,
        event: NewEvent,
        verified: VerifiedEvent,
        reply: Reply,
        trace: IngestTrace | None,
        first_id: str | None,
        *,
        live: LiveSource,
    ) -> None:
        """A copy of a body whose first copy was still committing: answer like it."""
        if first_id is not None:
            self._replayed(event, verified, reply, trace, first_id)
        else:  # the first copy was not stored: this one is not a replay of anything
            self._append(event, verified, reply, None, trace, live=live)

    def _replayed(
        self,
        event: NewEvent,
        verified: VerifiedEvent,
        reply: Reply,
        trace: IngestTrace | None,
        first_id: str,
    ) -> None:
        """A body the replay guard has seen: the first copy's answer, as a duplicate."""
        if trace is not None:
            trace.committed(first_id, True, 0.0)
        self._answer(event.source_id, verified, reply, first_id, True)

    def _committed(
        self, waiting: _Waiting, result: AppendResult | None, error: BaseException | None
    ) -> None:
        event, verified, reply, started, key, trace, live = waiting
        listener = self.listener
        if result is None:
            if listener is not None:
                listener.event_not_stored(event)
            if key is not None:
                self.replays.forget(key)
            failure = error or StoreUnavailable("no result")
            self._store_failed(event.source_id, failure, reply, trace)
            return
        now = self._clock.monotonic()
        self.commit_latency.observe(now - started, now)
        if trace is not None:
            trace.committed(result.event_id, result.duplicate, now - started)
        if result.duplicate:
            if listener is not None:
                listener.event_not_stored(event)
            self._answer(event.source_id, verified, reply, result.event_id, True)
        else:
            if listener is not None:
                listener.event_committed(event)
            # The source's own count, held by its live source: no series lookup.
            accepted = live.accepted
            if accepted is None:
                accepted = live.accepted = self.metrics.cell(event.source_id, "accepted")
            accepted.inc()
            self._reply(verified, reply, result.event_id, False)
        if key is not None:
            self.replays.settle(key, result.event_id)

    def _answer(
        self,
        source_id: str,
        verified: VerifiedEvent,
        reply: Reply,
        event_id: str,
        duplicate: bool,
    ) -> None:
        self.metrics.accepted(source_id, duplicate)
        self._reply(verified, reply, event_id, duplicate)

    def _reply(self, verified: VerifiedEvent, reply: Reply, event_id: str, duplicate: bool) -> None:
        if verified.reply is not None:
            reply(Response(200, verified.reply, content_type=verified.reply_content_type))
        else:
            # Spliced rather than orjson.dumps of a dict, which costs more per
            # request: an event id is the router's own ASCII (hookrouter.ids), never escaped.
            tail = _DUPLICATE_TAIL if duplicate else _NEW_TAIL
            reply(Response(200, _ID_HEAD + event_id.encode("ascii") + tail))

    def _store_failed(
        self, source_id: str, exc: BaseException, reply: Reply, trace: IngestTrace | None
    ) -> None:
        if not isinstance(exc, StoreError):
            log.error("unexpected store failure", exc_info=exc, extra=context(source=source_id))
            exc = StoreUnavailable("the event store failed")
        self.metrics.rejected(source_id, exc.reason)
        if trace is not None:
            trace.refused(exc.reason)
        reply(error_response(exc))


def _encoding_refused(error: RequestRejected) -> Response:
    """The answer to a body that could not be decoded; a 415 names the codings we take."""
    if isinstance(error, UnsupportedEncoding):
        return error_response(error, headers=(("accept-encoding", ACCEPTED_CODINGS),))
    return error_response(error)


def _method_not_allowed() -> Response:
    error = RequestRejected("use POST to send events", status=405, reason="method_not_allowed")
    return error_response(error, headers=(("allow", "POST"),))
