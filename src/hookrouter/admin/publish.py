"""The publish API: a tenant's own events, taking the path of a received webhook.

::

    POST /admin/v1/events         one event; optional header Idempotency-Key
    POST /admin/v1/events:batch   up to 1000 events, appended together

Design. Every tenant has a built-in source, ``api:<tenant>`` (no config can
declare it: entity ids cannot contain ``:``), of provider ``api``. A
published event is a ``NewEvent`` of that source whose provider event id is
the idempotency key (none without a key). So:

* Idempotency is the store's own dedup on (source, provider event id): the
  same key from the same tenant appends a duplicate, answered with the
  first event's id. Concurrent retries meet in the store's group commit,
  which keeps exactly one; the record is durable, so it survives restarts
  and kill -9, and lasts as long as the event is kept (retention: 7 days by
  default, so the promised 24 hours unless retention is set below a day).
* A reused key with a different body: the original is read back and
  compared (type, payload, labels); a difference answers 422, not 409.
  The IETF idempotency-key draft (draft-ietf-httpapi-idempotency-key-header)
  keeps 409 for a retry that arrives while the first request is still in
  progress (which the store's dedup settles here: the retry waits for the
  same commit) and 422 for a key reused with another payload: the client
  sent a wrong request, which no retry of it can fix.
* The same admission control decides first (the tenant's backlog cap, store
  pressure and the tenant's ``ingest`` rate limit), the same durable commit
  acknowledges (nothing is answered before it returns), and the same commit
  listener (the delivery engine) fans out, routed by event type and the
  endpoints' content filters (which see the payload as the body).

A batch takes one admission decision and appends all its events in one turn
of the loop, so the group commit writes them together (one transaction when
they fit one statement); each item is answered with the status a single
publish would have had, the list in the order sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence

import msgspec

from hookrouter.admin import schemas
from hookrouter.admin.api import AdminApi
from hookrouter.admin.operations import BadRequest, Call, Operation
from hookrouter.clock import Clock
from hookrouter.config.catalog import Catalog, LiveSource, rate_checks
from hookrouter.config.entities import SourceConfig, TenantConfig
from hookrouter.core.http1 import Response
from hookrouter.delivery.listener import CommitListener
from hookrouter.errors import (
    ConfigError,
    ConfigIssue,
    HookrouterError,
    NotFound,
    RequestRejected,
    StoreError,
    VerificationFailed,
)
from hookrouter.ids import new_event_id
from hookrouter.ingress.handler import AdmissionControl, Refusal
from hookrouter.store.base import AppendResult, EventRecord, EventStore, NewEvent
from hookrouter.verify.base import VerifiedEvent

log = logging.getLogger(__name__)

API_PROVIDER = "api"
SOURCE_PREFIX = "api:"
LABEL_HEADER = "hookrouter-label-"
IDEMPOTENCY_HEADER = "idempotency-key"
REPLAYED_HEADER = "idempotent-replayed"  # Stripe's name for the same signal
ACCEPTED = 202


class KeyReused(RequestRejected):
    status = 422
    reason = "idempotency_key_reused"


class _NotSigned:
    """The api source's verifier: its events come through the admin API, never as webhooks."""

    provider = API_PROVIDER

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> VerifiedEvent:
        raise VerificationFailed("the api source takes no webhooks", reason="not_a_webhook")


class Publisher:
    """Turns published events into stored, routed events of the tenant's ``api`` source."""

    def __init__(
        self,
        store: EventStore,
        catalog: Callable[[], Catalog],
        clock: Clock,
        *,
        admission: AdmissionControl | None = None,
        listener: CommitListener | None = None,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._admission = admission
        self._listener = listener
        self._sources: dict[str, LiveSource] = {}

    def tenant(self, name: str) -> TenantConfig:
        tenant = self._catalog().tenants.get(name)
        if tenant is None:
            raise NotFound(f"no tenant named {name!r}")
        return tenant

    async def admit(self, tenant: TenantConfig) -> Response | None:
        """The admission control's refusal (429/503 with Retry-After), or None to go on."""
        if self._admission is None:
            return None
        decision = self._admission.check(self._live(tenant))
        if isinstance(decision, asyncio.Future):
            try:
                decision = await decision
            except Exception:
                # As the ingest path does: a limiter bug must not block publishing.
                log.exception("rate limit check failed; admitting the publish")
                return None
        return decision.response if isinstance(decision, Refusal) else None

    def event(self, tenant: TenantConfig, item: schemas.PublishItem, now: float) -> NewEvent:
        headers = {"content-type": "application/json"}
        for name, value in sorted((item.labels or {}).items()):
            headers[LABEL_HEADER + name] = value
        body = msgspec.json.encode(item.payload)  # orjson refuses integers past 64 bits
        routing = self._catalog().routing
        return NewEvent(
            event_id=new_event_id(int(now * 1000)),
            tenant_id=tenant.id,
            source_id=SOURCE_PREFIX + tenant.id,
            provider_event_id=item.idempotency_key,
            event_type=item.type,
            received_at=now,
            headers=headers,
            body=body,
            endpoint_ids=routing.route(tenant.id, item.type, body, headers, item.payload),
        )

    async def publish(
        self, tenant: TenantConfig, items: Sequence[schemas.PublishItem]
    ) -> list[schemas.PublishedItem]:
        """Append ``items`` together; each one's answer once the commit holding it returned."""
        now = self._clock.time()
        events = [self.event(tenant, item, now) for item in items]
        futures: list[asyncio.Future[AppendResult]] = []
        refused: StoreError | None = None
        listener = self._listener
        for event in events:
            if listener is not None:
                listener.event_appending(event)
            try:
                futures.append(self._store.append(event))
            except StoreError as exc:  # saturated or closed: the rest are not appended
                if listener is not None:
                    listener.event_not_stored(event)
                refused = exc
                break
        results = await asyncio.gather(*futures, return_exceptions=True)
        answers = []
        for index, item in enumerate(items):
            result = results[index] if index < len(results) else refused
            answers.append(await self._answer(events[index], item, result))
        return answers

    async def _answer(
        self, event: NewEvent, item: schemas.PublishItem, result: object
    ) -> schemas.PublishedItem:
        listener = self._listener
        if isinstance(result, AppendResult) and not result.duplicate:
            if listener is not None:
                listener.event_committed(event)
            return schemas.PublishedItem(ACCEPTED, result.event_id)
        if listener is not None:
            listener.event_not_stored(event)
        if isinstance(result, AppendResult):
            original = await self._store.get_event(result.event_id, with_body=True)
            if original is not None and not _same(original, item):
                return _error(
                    KeyReused(
                        f"idempotency key {item.idempotency_key!r} was used for event "
                        f"{result.event_id} with another type, payload or labels; "
                        "use a new key for a new event"
                    )
                )
            return schemas.PublishedItem(ACCEPTED, result.event_id, replayed=True)
        if isinstance(result, HookrouterError):
            return _error(result)
        log.error("publish: unexpected store failure", exc_info=result)  # type: ignore[arg-type]
        return _error(StoreError("the event store failed"))

    def _live(self, tenant: TenantConfig) -> LiveSource:
        """The tenant's api source as the admission control sees it (rebuilt when it changes)."""
        live = self._sources.get(tenant.id)
        if live is None or live.tenant is not tenant:
            if len(self._sources) > 2 * len(self._catalog().tenants) + 16:
                self._sources.clear()  # deleted tenants' entries: bounded by the live ones
            config = SourceConfig(SOURCE_PREFIX + tenant.id, tenant.id, API_PROVIDER, secrets=())
            live = LiveSource(config, tenant, _NotSigned(), rate_checks(tenant, config))
            self._sources[tenant.id] = live
        return live


def _same(original: EventRecord, item: schemas.PublishItem) -> bool:
    labels = {
        k.removeprefix(LABEL_HEADER): v
        for k, v in original.headers.items()
        if k.startswith(LABEL_HEADER)
    }
    try:
        payload = msgspec.json.decode(original.body)
    except msgspec.DecodeError:
        return False
    return (
        original.event_type == item.type
        and payload == item.payload
        and labels == (item.labels or {})
    )


def _error(error: HookrouterError) -> schemas.PublishedItem:
    return schemas.PublishedItem(error.status, error=error.reason, message=error.message)


class _Routes:
    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher

    def _tenant(self, call: Call, named: str | None) -> TenantConfig:
        principal = call.principal
        if named is None and principal.tenant is None:
            raise ConfigError(
                [ConfigIssue("tenant", "is required with the admin token: the event's tenant")]
            )
        name = named or principal.tenant or ""
        principal.require(name, f"no tenant named {name!r}")
        return self._publisher.tenant(name)

    async def one(self, call: Call) -> Response:
        body: schemas.PublishEvent = call.body()
        key = _idempotency_key(call)
        tenant = self._tenant(call, body.tenant)
        refusal = await self._publisher.admit(tenant)
        if refusal is not None:
            return refusal
        item = schemas.PublishItem(body.type, body.payload, body.labels, key)
        [answer] = await self._publisher.publish(tenant, [item])
        if answer.id is None:
            raise RequestRejected(
                answer.message or "", status=answer.status, reason=answer.error or None
            )
        published = schemas.Published(answer.id, tenant.id, body.type)
        headers = ((REPLAYED_HEADER, "true"),) if answer.replayed else ()
        return Response(ACCEPTED, msgspec.json.encode(published), headers=headers)

    async def batch(self, call: Call) -> Response:
        body: schemas.PublishBatch = call.body()
        tenant = self._tenant(call, body.tenant)
        refusal = await self._publisher.admit(tenant)
        if refusal is not None:
            return refusal
        answers = await self._publisher.publish(tenant, body.events)
        return call.respond(schemas.PublishedBatch(tenant.id, answers))


def _idempotency_key(call: Call) -> str | None:
    value = call.request.headers.get(IDEMPOTENCY_HEADER)
    if value is None:
        return None
    try:
        key: str = msgspec.convert(value, schemas.IdempotencyKey)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid Idempotency-Key header: {exc}") from exc
    return key


def install(api: AdminApi, publisher: Publisher) -> None:
    """Add the publish routes to ``api``."""
    routes = _Routes(publisher)
    api.route(
        Operation(
            "POST",
            "/events",
            "Publish an event",
            "publish",
            access="tenant",
            ok=ACCEPTED,
            response=schemas.Published,
            body=schemas.PublishEvent,
            body_required=True,
            errors=(422,),
            headers=(("Idempotency-Key", schemas.IdempotencyKey),),
            description=(
                "Stored, routed by type and fanned out like a received webhook; answered "
                "once durable. The same Idempotency-Key from the same tenant answers the "
                "first event again (header Idempotent-Replayed: true); reused with another "
                "body it answers 422."
            ),
        ),
        routes.one,
    )
    api.route(
        Operation(
            "POST",
            "/events:batch",
            "Publish up to 1000 events at once",
            "publish",
            access="tenant",
            response=schemas.PublishedBatch,
            body=schemas.PublishBatch,
            body_required=True,
            errors=(422,),
            description=(
                "Appended together (one group commit); answered once all are durable, each "
                "item with the status a single publish would have had. Items may carry an "
                "idempotency_key each."
            ),
        ),
        routes.batch,
    )


__all__ = ["API_PROVIDER", "SOURCE_PREFIX", "Publisher", "install"]
