"""The admin API under ``/admin/v1`` (bearer token), as async handlers.

Routes::

    GET    /admin/v1/{tenants|sources|endpoints}            list
    POST   /admin/v1/{tenants|sources|endpoints}            create (409 if it exists)
    GET    /admin/v1/{tenants|sources|endpoints}/{id}       read
    PUT    /admin/v1/{tenants|sources|endpoints}/{id}       create or replace
    PATCH  /admin/v1/{tenants|sources|endpoints}/{id}       merge fields into the stored document
    DELETE /admin/v1/{tenants|sources|endpoints}/{id}       delete (409 if a tenant is in use)
    GET    /admin/v1/events?tenant=&status=&limit=&before=  newest first, cursor = event id
    GET    /admin/v1/events/{id}[?body=true]                one event, deliveries and attempts
    GET    /admin/v1/sources/{id}/events/{provider_event_id}  the same, by the provider's id

Other subsystems add routes with ``AdminApi.route`` (replay, breakers...).
Secrets never leave the process in clear: documents are returned with every
secret reduced to its last four characters.
"""

from __future__ import annotations

import base64
import hmac
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, unquote

import orjson

from hookrouter.admin.entities import EntityService
from hookrouter.core.http1 import Request, Response
from hookrouter.errors import ConfigError, HookrouterError, NotFound, RequestRejected
from hookrouter.ingress.handler import error_response
from hookrouter.ingress.ops import json_response
from hookrouter.store.base import EntityKind, EventRecord, EventStatus, EventStore

PREFIX = "/admin/v1"
Handler = Callable[[Request, re.Match[str]], Awaitable[Response]]
_KINDS: dict[str, EntityKind] = {"tenants": "tenant", "sources": "source", "endpoints": "endpoint"}
MAX_LIST_LIMIT = 1000


class Unauthorized(RequestRejected):
    status = 401
    reason = "unauthorized"


class BadRequest(RequestRejected):
    status = 400
    reason = "bad_request"


def query_params(request: Request) -> dict[str, str]:
    """The last value of each query parameter."""
    return {k: v[-1] for k, v in parse_qs(request.query, keep_blank_values=True).items()}


def parse_json_body(request: Request) -> Any:
    try:
        return orjson.loads(request.body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc


class AdminApi:
    """Dispatches admin requests to handlers after checking the bearer token."""

    prefix = PREFIX  # ``ingress.ops.AdminRoutes``: the ops app sends these paths here

    def __init__(self, token: str, entities: EntityService, store: EventStore) -> None:
        self._token = token.encode()
        self._entities = entities
        self._store = store
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.route("GET", r"/events", self._list_events)
        self.route("GET", r"/events/(?P<id>[^/]+)", self._get_event)
        self.route("GET", r"/sources/(?P<source>[^/]+)/events/(?P<pid>[^/]+)", self._find_event)
        kinds = "|".join(_KINDS)
        self.route("GET", rf"/(?P<kind>{kinds})", self._list_entities)
        self.route("POST", rf"/(?P<kind>{kinds})", self._create_entity)
        self.route("GET", rf"/(?P<kind>{kinds})/(?P<id>[^/]+)", self._get_entity)
        self.route("PUT", rf"/(?P<kind>{kinds})/(?P<id>[^/]+)", self._put_entity)
        self.route("PATCH", rf"/(?P<kind>{kinds})/(?P<id>[^/]+)", self._patch_entity)
        self.route("DELETE", rf"/(?P<kind>{kinds})/(?P<id>[^/]+)", self._delete_entity)

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        """Register ``handler`` for ``method`` and a path pattern below ``/admin/v1``."""
        self._routes.append((method, re.compile(PREFIX + pattern + "/?"), handler))

    async def dispatch(self, request: Request) -> Response:
        try:
            self._authorize(request)
            return await self._route(request)
        except ConfigError as exc:
            issues = [{"path": i.path, "message": i.message} for i in exc.issues]
            body = {"error": "invalid_document", "message": exc.message, "issues": issues}
            return json_response(422, body)
        except HookrouterError as exc:
            return error_response(exc)

    def _authorize(self, request: Request) -> None:
        if not self._token:
            raise RequestRejected(
                "the admin API is disabled: set [admin] token", status=403, reason="admin_disabled"
            )
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), self._token):
            raise Unauthorized("missing or wrong bearer token")

    async def _route(self, request: Request) -> Response:
        allowed = []
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(request.path)
            if match is None:
                continue
            if method == request.method:
                return await handler(request, match)
            allowed.append(method)
        if allowed:
            raise RequestRejected(
                f"use {' or '.join(allowed)} here", status=405, reason="method_not_allowed"
            )
        raise NotFound(f"no admin resource at {request.path}")

    # -- entities ------------------------------------------------------------

    async def _list_entities(self, request: Request, m: re.Match[str]) -> Response:
        kind = _KINDS[m["kind"]]
        return json_response(200, {"data": [redact(e.doc) for e in self._entities.list(kind)]})

    async def _get_entity(self, request: Request, m: re.Match[str]) -> Response:
        item = self._entities.get(_KINDS[m["kind"]], m["id"])
        return json_response(200, redact(item.doc))

    async def _create_entity(self, request: Request, m: re.Match[str]) -> Response:
        doc = _object(parse_json_body(request))
        item, _ = await self._entities.put(_KINDS[m["kind"]], doc, create_only=True)
        return json_response(201, redact(item.doc))

    async def _put_entity(self, request: Request, m: re.Match[str]) -> Response:
        doc = _object(parse_json_body(request))
        doc.setdefault("id", m["id"])
        if doc["id"] != m["id"]:
            raise BadRequest(f"document id {doc['id']!r} does not match the URL ({m['id']!r})")
        item, created = await self._entities.put(_KINDS[m["kind"]], doc)
        return json_response(201 if created else 200, redact(item.doc))

    async def _patch_entity(self, request: Request, m: re.Match[str]) -> Response:
        kind = _KINDS[m["kind"]]
        changes = _object(parse_json_body(request))
        if changes.get("id", m["id"]) != m["id"]:
            raise BadRequest("an entity's id cannot be changed")
        doc = {**self._entities.get(kind, m["id"]).doc, **changes}
        doc = {k: v for k, v in doc.items() if v is not None}  # null removes a field
        item, _ = await self._entities.put(kind, doc)
        return json_response(200, redact(item.doc))

    async def _delete_entity(self, request: Request, m: re.Match[str]) -> Response:
        await self._entities.delete(_KINDS[m["kind"]], m["id"])
        return Response(204)

    # -- events --------------------------------------------------------------

    async def _list_events(self, request: Request, m: re.Match[str]) -> Response:
        params = query_params(request)
        status = params.get("status")
        if status is not None and status not in EventStatus.__members__.values():
            choices = ", ".join(s.value for s in EventStatus)
            raise BadRequest(f"unknown status {status!r} (one of {choices})")
        limit = _int_param(params, "limit", 100, 1, MAX_LIST_LIMIT)
        events = await self._store.list_events(
            tenant_id=params.get("tenant"),
            status=EventStatus(status) if status else None,
            limit=limit,
            before=params.get("before"),
        )
        data = [event_json(e) for e in events]
        cursor = data[-1]["id"] if len(data) == limit else None
        return json_response(200, {"data": data, "next_before": cursor})

    async def _get_event(self, request: Request, m: re.Match[str]) -> Response:
        return await self._event_response(request, m["id"])

    async def _find_event(self, request: Request, m: re.Match[str]) -> Response:
        source, provider_id = unquote(m["source"]), unquote(m["pid"])
        self._entities.get("source", source)  # 404 for a source that does not exist
        event_id = await self._store.find_event(source, provider_id)
        if event_id is None:
            raise NotFound(
                f"source {source!r} has no event {provider_id!r} "
                "(never received, or deleted by retention)"
            )
        return await self._event_response(request, event_id)

    async def _event_response(self, request: Request, event_id: str) -> Response:
        with_body = query_params(request).get("body", "") in ("1", "true")
        event = await self._store.get_event(event_id, with_body=with_body)
        if event is None:
            raise NotFound(f"no event {event_id!r}")
        return json_response(200, event_json(event, with_body=with_body))


def event_json(event: EventRecord, *, with_body: bool = False) -> dict[str, Any]:
    """The admin API's view of an event."""
    out: dict[str, Any] = {
        "id": event.event_id,
        "tenant": event.tenant_id,
        "source": event.source_id,
        "provider_event_id": event.provider_event_id,
        "type": event.event_type,
        "received_at": event.received_at,
        "status": event.status.value,
        "deliveries": [
            {
                "endpoint": d.endpoint_id,
                "state": d.state.value,
                "attempts": d.attempts,
                "next_attempt_at": d.next_attempt_at,
                "last_status_code": d.last_status_code,
                "last_error": d.last_error,
                "history": [
                    {
                        "attempt": a.attempt,
                        "started_at": a.started_at,
                        "duration_ms": a.duration_ms,
                        "status_code": a.status_code,
                        "error": a.error,
                    }
                    for a in d.history
                ],
            }
            for d in event.deliveries
        ],
    }
    if with_body:
        out["headers"] = event.headers
        out["body_base64"] = base64.b64encode(event.body).decode()
    return out


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


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest("the request body must be a JSON object")
    return value


def _int_param(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise BadRequest(f"{name} must be an integer from {low} to {high}")
    return int(text)
