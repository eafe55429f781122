"""The admin API under ``/admin/v1``, as async handlers.

Routes::

    GET    /admin/v1/openapi.json                           this API's OpenAPI document (no auth)
    GET    /admin/v1/{tenants|sources|endpoints}?tenant=&limit=&after=  by id, cursor = id
    POST   /admin/v1/{tenants|sources|endpoints}            create (409 if it exists)
    GET    /admin/v1/{tenants|sources|endpoints}/{id}       read
    PUT    /admin/v1/{tenants|sources|endpoints}/{id}       create or replace
    PATCH  /admin/v1/{tenants|sources|endpoints}/{id}       merge fields into the stored document
    DELETE /admin/v1/{tenants|sources|endpoints}/{id}       delete (409 if a tenant is in use)
    POST   /admin/v1/endpoints/{id}/filter-test             try routing on a sample event
    GET    /admin/v1/tenants/{id}/keys                      a tenant's API keys (never the keys)
    POST   /admin/v1/tenants/{id}/keys                      mint a key (shown once)
    DELETE /admin/v1/tenants/{id}/keys/{key_id}             revoke a key at once
    GET    /admin/v1/events?tenant=&status=&limit=&before=  newest first, cursor = event id
    GET    /admin/v1/events/{id}[?body=true]                one event, deliveries and attempts
    GET    /admin/v1/sources/{id}/events/{provider_event_id}  the same, by the provider's id

Other subsystems add routes with ``AdminApi.route`` (replay, breakers...).

Credentials (``Authorization: Bearer ...``): the admin token may do
everything; the read-only token every GET; a tenant's key (``admin.keys``)
only the operations declared ``access="tenant"``, scoped by their handlers to
that tenant's sources, endpoints, events and deliveries. Whatever a key may
not see answers 404 exactly as a missing resource does, so another tenant's
ids do not leak through a different status.

Secrets never leave the process in clear: documents are returned with every
secret reduced to its last four characters.
"""

from __future__ import annotations

import base64
import hmac
import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping
from functools import partial
from typing import Any
from urllib.parse import unquote

from hookrouter.admin import filter_routes, schemas
from hookrouter.admin.entities import AnyEntity, EntityService
from hookrouter.admin.keys import ApiKey, KeyService
from hookrouter.admin.openapi import build_document
from hookrouter.admin.operations import (
    Access,
    BadRequest,
    Call,
    Operation,
    Principal,
    parse_json_body,
    query_params,
)
from hookrouter.admin.schemas import check_shape
from hookrouter.admin.throttle import AuthThrottle
from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.config.entities import EndpointConfig, TenantConfig, parse_entity_doc
from hookrouter.config.reader import ENV_PREFIX, EnvRefs
from hookrouter.config.server import AdminSettings
from hookrouter.core.http1 import Request, Response
from hookrouter.errors import (
    ConfigError,
    ConfigIssue,
    HookrouterError,
    NotFound,
    RequestRejected,
)
from hookrouter.ingress.handler import error_response
from hookrouter.ingress.ops import json_response
from hookrouter.store.base import EntityKind, EventRecord, EventStore

PREFIX = "/admin/v1"
Handler = Callable[[Call], Awaitable[Response]]
_PLURAL: dict[EntityKind, str] = {"tenant": "tenants", "source": "sources", "endpoint": "endpoints"}
_ROUTER = Principal(tenant=None)
_READ_ONLY = Principal(tenant=None, read_only=True)


class Unauthorized(RequestRejected):
    status = 401
    reason = "unauthorized"


class MethodNotAllowed(RequestRejected):
    status = 405
    reason = "method_not_allowed"

    def __init__(self, allow: list[str]) -> None:
        super().__init__(f"use {' or '.join(allow)} here")
        self.allow = allow


class AdminApi:
    """Dispatches admin requests to handlers after checking who is calling."""

    prefix = PREFIX  # ``ingress.ops.AdminRoutes``: the ops app sends these paths here

    def __init__(
        self,
        settings: AdminSettings,
        entities: EntityService,
        store: EventStore,
        keys: KeyService,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._throttle = AuthThrottle(clock, max_failures=settings.max_auth_failures)
        self._token = settings.token.encode()
        self._read_only_token = settings.read_only_token.encode()
        self._entities = entities
        self._store = store
        self._keys = keys
        self._routes: list[tuple[Operation, re.Pattern[str], Handler]] = []
        self._document: bytes | None = None
        # Called with (who, request, response) after each change that succeeded:
        # the console's audit log.
        self.on_change: list[Callable[[str, Request, Response], None]] = []
        self.route(
            Operation(
                "GET",
                "/openapi.json",
                "This API's OpenAPI document",
                "meta",
                access="public",
                response=dict[str, Any],
            ),
            self._openapi,
        )
        for kind in ("tenant", "source", "endpoint"):
            self._entity_routes(kind)
        filter_routes.install(self.route, self._owned_endpoint)
        self._key_routes()
        self._event_routes()

    def route(self, op: Operation, handler: Handler) -> None:
        """Register ``handler`` for ``op`` (its path is below ``/admin/v1``)."""
        self._routes.append((op, op.pattern(PREFIX), handler))
        self._document = None

    def operations(self) -> list[Operation]:
        return [op for op, _, _ in self._routes]

    async def dispatch(self, request: Request, peer: str | None = None) -> Response:
        """Answer ``request``; ``peer`` (the client's address) keys the login throttle."""
        return await self._answer(self._route(request, peer))

    async def dispatch_as(self, request: Request, principal: Principal, who: str) -> Response:
        """Answer ``request`` for a caller authenticated elsewhere (a console session).

        ``who`` names the caller in the audit trail (``on_change``).
        """
        return await self._answer(self._run(request, principal, who))

    async def _answer(self, work: Awaitable[Response]) -> Response:
        try:
            return await work
        except ConfigError as exc:
            issues = [{"path": i.path, "message": i.message} for i in exc.issues]
            body = {"error": "invalid_document", "message": exc.message, "issues": issues}
            return json_response(422, body)
        except MethodNotAllowed as exc:
            return error_response(exc, headers=(("allow", ", ".join(exc.allow)),))
        except HookrouterError as exc:
            return error_response(exc)

    def _authorize(self, request: Request) -> Principal:
        if not self._token:
            raise RequestRejected(
                "the admin API is disabled: set [admin] token", status=403, reason="admin_disabled"
            )
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            raise Unauthorized("missing or wrong bearer token")
        presented = given.encode()
        if hmac.compare_digest(presented, self._token):
            return _ROUTER
        if self._read_only_token and hmac.compare_digest(presented, self._read_only_token):
            return _READ_ONLY
        key = self._keys.authenticate(given)
        if key is not None and key.tenant in self._entities.catalog.tenants:
            return Principal(tenant=key.tenant)
        raise Unauthorized("missing or wrong bearer token")

    def _authorize_throttled(self, request: Request, peer: str | None) -> Principal:
        """``_authorize``, counting each wrong credential against the client's budget.

        A request with no credential at all guesses nothing: plain 401.
        """
        if "authorization" not in request.headers:
            return self._authorize(request)
        self._throttle.check(peer)
        try:
            return self._authorize(request)
        except Unauthorized:
            self._throttle.failed(peer)
            raise

    async def _route(self, request: Request, peer: str | None) -> Response:
        matches = self._matches(request.path)
        public = any(op.access == "public" and op.method == request.method for op, _, _ in matches)
        principal = _ROUTER if public else self._authorize_throttled(request, peer)
        who = "admin API" if principal.tenant is None else f"tenant key ({principal.tenant})"
        return await self._run(request, principal, who, matches)

    def _matches(self, path: str) -> list[tuple[Operation, re.Match[str], Handler]]:
        return [
            (op, match, handler)
            for op, pattern, handler in self._routes
            if (match := pattern.fullmatch(path)) is not None
        ]

    async def _run(
        self,
        request: Request,
        principal: Principal,
        who: str,
        matches: list[tuple[Operation, re.Match[str], Handler]] | None = None,
    ) -> Response:
        allowed = []
        for op, match, handler in self._matches(request.path) if matches is None else matches:
            if op.access == "admin" and principal.tenant is not None:
                continue  # not there, as far as a tenant's key can tell
            if op.method != request.method:
                allowed.append(op.method)
                continue
            if principal.read_only and op.method != "GET":
                raise RequestRejected(
                    "the read-only token may only GET", status=403, reason="read_only"
                )
            response = await handler(Call(request, match.groupdict(), principal, op))
            if op.method != "GET" and response.status < 300:
                for observe in self.on_change:
                    observe(who, request, response)
            return response
        if allowed:
            raise MethodNotAllowed(allowed)
        raise NotFound(f"no admin resource at {request.path}")

    async def _openapi(self, call: Call) -> Response:
        if self._document is None:
            self._document = build_document(self.operations(), PREFIX)
        return Response(200, self._document)

    # -- entities ------------------------------------------------------------

    def _entity_routes(self, kind: EntityKind) -> None:
        plural = _PLURAL[kind]
        struct = schemas.ENTITY_TYPES[kind]
        access: Access = "admin" if kind == "tenant" else "tenant"
        name = struct.__name__
        listed = schemas.page_list_of(struct, f"{name}List")
        one = f"/{plural}/{{id}}"

        def add(method: str, path: str, summary: str, handler: Handler, **kw: Any) -> None:
            op = Operation(method, path, summary, plural, access=access, **kw)
            self.route(op, handler)

        async def list_(call: Call) -> Response:
            query: schemas.EntityListQuery = call.query()
            tenant = query.tenant or None
            if call.principal.tenant is not None:  # a tenant key sees its own only
                call.principal.require(tenant or call.principal.tenant, f"no tenant {tenant!r}")
                tenant = call.principal.tenant
            items, cursor = self._entities.page(kind, query.after or None, query.limit, tenant)
            return call.respond({"data": [redact(i.doc) for i in items], "next_after": cursor})

        async def get(call: Call) -> Response:
            return call.respond(redact(self._owned(call.principal, kind, call.params["id"]).doc))

        async def create(call: Call) -> Response:
            doc = _object(parse_json_body(call.request))
            saved, _ = await self._save(call.principal, kind, doc, create_only=True)
            return call.respond(saved)

        async def put(call: Call) -> Response:
            entity_id = call.params["id"]
            doc = _object(parse_json_body(call.request))
            doc.setdefault("id", entity_id)
            if doc["id"] != entity_id:
                raise BadRequest(
                    f"document id {doc['id']!r} does not match the URL ({entity_id!r})"
                )
            if self._exists(kind, entity_id):
                self._owned(call.principal, kind, entity_id)
            saved, created = await self._save(call.principal, kind, doc)
            return call.respond(saved, 201 if created else 200)

        async def patch(call: Call) -> Response:
            entity_id = call.params["id"]
            changes = _object(parse_json_body(call.request))
            if changes.get("id", entity_id) != entity_id:
                raise BadRequest("an entity's id cannot be changed")
            doc = {**self._owned(call.principal, kind, entity_id).doc, **changes}
            doc = {k: v for k, v in doc.items() if v is not None}  # null removes a field
            saved, _ = await self._save(call.principal, kind, doc)
            return call.respond(saved)

        async def delete(call: Call) -> Response:
            entity_id = call.params["id"]
            self._owned(call.principal, kind, entity_id)
            await self._entities.delete(kind, entity_id)
            if kind == "tenant":
                await self._keys.revoke_tenant(entity_id)
            return call.respond(None)

        a = "an" if kind[0] in "aeiou" else "a"
        add(
            "GET",
            f"/{plural}",
            f"List {plural}, a page at a time by id",
            list_,
            response=listed,
            query=schemas.EntityListQuery,
        )
        add("POST", f"/{plural}", f"Create {a} {kind}", create, ok=201, response=struct,
            body=struct, body_required=True, errors=(409, 422))  # fmt: skip
        add("GET", one, f"Read {a} {kind}", get, response=struct)
        add("PUT", one, f"Create or replace {a} {kind}", put, response=struct,
            body=schemas.put_body(struct), body_required=True, also_ok=(201,), errors=(422,),
            description="201 when it was created, 200 when replaced.")  # fmt: skip
        add("PATCH", one, f"Change some fields of {a} {kind}", patch, response=struct,
            body=schemas.patch_body(struct), body_required=True, errors=(422,),
            description="Fields given replace the stored ones; null removes a field.")  # fmt: skip
        add("DELETE", one, f"Delete {a} {kind}", delete, ok=204,
            errors=(409,) if kind == "tenant" else ())  # fmt: skip

    def _exists(self, kind: EntityKind, entity_id: str) -> bool:
        try:
            self._entities.get(kind, entity_id)
        except NotFound:
            return False
        return True

    def _owned(self, principal: Principal, kind: EntityKind, entity_id: str) -> AnyEntity:
        """The entity, if it exists and ``principal`` may see it; else 404."""
        item = self._entities.get(kind, entity_id)
        principal.require(_tenant_of(item), f"no {kind} named {entity_id!r}")
        return item

    def _owned_endpoint(self, principal: Principal, endpoint_id: str) -> EndpointConfig:
        item = self._owned(principal, "endpoint", endpoint_id)
        assert isinstance(item, EndpointConfig)
        return item

    async def _save(
        self,
        principal: Principal,
        kind: EntityKind,
        doc: dict[str, Any],
        *,
        create_only: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Validate and store ``doc``; returns (its redacted document, created)."""
        tenant = doc.get("tenant")
        if isinstance(tenant, str) and not principal.owns(tenant):
            # What a tenant that does not exist gets: another tenant's name must not show.
            raise ConfigError([ConfigIssue("tenant", f"unknown tenant {tenant!r}")])
        # Every problem with its path, before the shape check; no env: reference
        # but those the operator's file put there (``env_refs_kept``).
        parse_entity_doc(kind, doc, env_refs=self._env_refs_kept(kind, doc.get("id")))
        check_shape(kind, doc)
        item, created = await self._entities.put(kind, doc, create_only=create_only)
        return redact(item.doc), created

    def _env_refs_kept(self, kind: EntityKind, entity_id: Any) -> EnvRefs:
        """Allow an ``env:`` value only where the stored document has that very reference.

        ``env:`` is for the operator's config file: read from a document the
        API received, it would send the router's environment to a receiver
        (as a header) or tell by its error whether a variable exists. A
        file-declared entity sent back as GET shows it keeps its references.
        """
        stored = (
            self._entities.get(kind, entity_id).doc
            if (isinstance(entity_id, str) and self._exists(kind, entity_id))
            else {}
        )
        kept = set(_env_values(stored))
        return lambda path, value: (path, value) in kept

    # -- keys ----------------------------------------------------------------

    def _key_routes(self) -> None:
        async def list_(call: Call) -> Response:
            tenant = self._entities.get("tenant", call.params["id"]).id
            return call.respond(
                schemas.KeyList(
                    [schemas.KeyInfo(**_key_fields(k)) for k in self._keys.list(tenant)]
                )
            )

        async def create(call: Call) -> Response:
            tenant = self._entities.get("tenant", call.params["id"]).id
            body: schemas.KeyCreate = call.body()
            record, key = await self._keys.create(tenant, body.name)
            return call.respond(schemas.KeyCreated(**_key_fields(record), key=key))

        async def revoke(call: Call) -> Response:
            await self._keys.revoke(call.params["id"], call.params["key_id"])
            return call.respond(None)

        path = "/tenants/{id}/keys"
        self.route(
            Operation("GET", path, "List a tenant's API keys", "keys", response=schemas.KeyList),
            list_,
        )
        self.route(
            Operation(
                "POST",
                path,
                "Mint an API key for a tenant",
                "keys",
                ok=201,
                response=schemas.KeyCreated,
                body=schemas.KeyCreate,
                errors=(409,),
                description="The key is in this answer only; the router keeps its hash.",
            ),
            create,
        )
        self.route(
            Operation("DELETE", path + "/{key_id}", "Revoke an API key", "keys", ok=204), revoke
        )

    # -- events --------------------------------------------------------------

    def _event_routes(self) -> None:
        one = partial(Operation, response=schemas.Event, query=schemas.EventQuery, access="tenant")
        self.route(
            Operation(
                "GET",
                "/events",
                "List events, newest first",
                "events",
                access="tenant",
                response=schemas.EventPage,
                query=schemas.EventsQuery,
            ),
            self._list_events,
        )
        self.route(
            one("GET", "/events/{id}", "Read an event and its deliveries", "events"),
            self._get_event,
        )
        self.route(
            one(
                "GET",
                "/sources/{source}/events/{pid}",
                "Find an event by the id its provider gave it",
                "events",
            ),
            self._find_event,
        )

    async def _list_events(self, call: Call) -> Response:
        query: schemas.EventsQuery = call.query()
        tenant = query.tenant or None
        if call.principal.tenant is not None:
            call.principal.require(tenant or call.principal.tenant, f"no tenant {tenant!r}")
            tenant = call.principal.tenant
        events = await self._store.list_events(
            tenant_id=tenant,
            status=query.status or None,
            limit=query.limit,
            before=query.before or None,
        )
        data = [event_view(e) for e in events]
        cursor = data[-1].id if len(data) == query.limit else None
        return call.respond(schemas.EventPage(data, cursor))

    async def _get_event(self, call: Call) -> Response:
        return await self._event_response(call, call.params["id"])

    async def _find_event(self, call: Call) -> Response:
        source, provider_id = unquote(call.params["source"]), unquote(call.params["pid"])
        self._owned(call.principal, "source", source)  # 404 for a source that is not there
        event_id = await self._store.find_event(source, provider_id)
        if event_id is None:
            raise NotFound(
                f"source {source!r} has no event {provider_id!r} "
                "(never received, or deleted by retention)"
            )
        return await self._event_response(call, event_id)

    async def _event_response(self, call: Call, event_id: str) -> Response:
        with_body = call.query().body
        event = await self._store.get_event(event_id, with_body=with_body)
        if event is None or not call.principal.owns(event.tenant_id):
            raise NotFound(f"no event {event_id!r}")
        return call.respond(event_view(event, with_body=with_body))

    def endpoint_ids_of(self, tenant: str) -> Collection[str]:
        """A tenant's endpoint ids, from the catalog's per-tenant index."""
        return self._entities.catalog.endpoints_of(tenant).keys()

    def require_owned(self, principal: Principal, kind: EntityKind, entity_id: str) -> None:
        """404 unless the entity exists and ``principal`` may see it (for other route modules)."""
        self._owned(principal, kind, entity_id)

    async def require_event(self, principal: Principal, event_id: str) -> None:
        """404 unless the event exists and ``principal`` may see it."""
        event = await self._store.get_event(event_id)
        if event is None or not principal.owns(event.tenant_id):
            raise NotFound(f"no event {event_id!r}")


def event_view(event: EventRecord, *, with_body: bool = False) -> schemas.Event:
    """The admin API's view of an event."""
    deliveries = [
        schemas.Delivery(
            endpoint=d.endpoint_id,
            state=d.state,
            attempts=d.attempts,
            next_attempt_at=d.next_attempt_at,
            last_status_code=d.last_status_code,
            last_error=d.last_error,
            history=[
                schemas.Attempt(
                    a.attempt,
                    a.started_at,
                    a.duration_ms,
                    a.status_code,
                    a.error,
                    a.response_excerpt,
                )
                for a in d.history
            ],
        )
        for d in event.deliveries
    ]
    view = schemas.Event(
        id=event.event_id,
        tenant=event.tenant_id,
        source=event.source_id,
        provider_event_id=event.provider_event_id,
        type=event.event_type,
        received_at=event.received_at,
        status=event.status,
        deliveries=deliveries,
    )
    if with_body:
        view.headers = event.headers
        view.body_base64 = base64.b64encode(event.body).decode()
    return view


def _key_fields(record: ApiKey) -> dict[str, Any]:
    """What the API shows of a key (``schemas.KeyInfo``): everything but its hash."""
    return {
        "id": record.id,
        "tenant": record.tenant,
        "prefix": record.prefix,
        "name": record.name,
        "created_at": record.created_at,
        "last_used_at": record.last_used_at,
    }


def _tenant_of(item: AnyEntity) -> str:
    """A tenant's own id, or the tenant a source or endpoint belongs to."""
    return item.id if isinstance(item, TenantConfig) else item.tenant


_SECRET_KEYS = ("secret", "secrets", "previous_secrets", "token")


def redact(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with secrets cut to their last four characters (env refs shown as is).

    An endpoint's extra header values are cut too: they often carry a
    receiver's credentials (``Authorization``).
    """
    out = dict(doc)
    for key in _SECRET_KEYS:
        value = out.get(key)
        if isinstance(value, str):
            out[key] = _mask(value)
        elif isinstance(value, list):
            out[key] = [_mask(v) if isinstance(v, str) else v for v in value]
    headers = out.get("headers")
    if isinstance(headers, Mapping):
        out["headers"] = {k: _mask(v) if isinstance(v, str) else v for k, v in headers.items()}
    return out


def _mask(secret: str) -> str:
    if secret.startswith("env:"):
        return secret
    return "…" + secret[-4:] if len(secret) > 8 else "…"


def _env_values(doc: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Each ``env:`` string of ``doc`` with its key path as ``config.reader`` spells it."""
    for key, value in doc.items():
        items: Iterable[tuple[str, Any]] = ()
        if isinstance(value, str):
            items = [(key, value)]
        elif isinstance(value, list):
            items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, Mapping):
            items = [(f"{key}.{k}", v) for k, v in value.items()]
        for path, text in items:
            if isinstance(text, str) and text.startswith(ENV_PREFIX):
                yield path, text


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest("the request body must be a JSON object")
    return value


__all__ = [
    "PREFIX",
    "AdminApi",
    "BadRequest",
    "Handler",
    "Unauthorized",
    "event_view",
    "parse_json_body",
    "query_params",
    "redact",
]
