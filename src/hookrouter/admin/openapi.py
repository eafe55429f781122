"""The admin API's OpenAPI 3.1 document, built from the registered operations.

Every path, parameter, body and answer comes from the ``Operation`` each
route was registered with and from the msgspec types the route decodes and
encodes (their JSON Schemas by ``msgspec.json.schema_components``); nothing
here describes a route by hand.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable
from typing import Any

import msgspec

from hookrouter.admin.operations import Operation
from hookrouter.admin.schemas import ErrorBody

REF = "#/components/schemas/{name}"
_REASONS = {
    200: "OK",
    201: "Created",
    204: "No content",
    400: "Malformed request: bad JSON, query or body fields",
    401: "No credentials, or unknown ones",
    403: "The admin API is disabled, or the read-only token tried to change something",
    404: "No such resource, or not one these credentials may see",
    405: "Method not allowed here",
    409: "Conflicts with what is stored",
    413: "The request body exceeds [server] max_body_bytes",
    422: "The document is invalid; issues name each bad field",
    429: "Too many failed logins from this client; see Retry-After",
    503: "The store failed; retry later",
}
SECURITY_SCHEMES = {
    "adminToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "[admin] token: every operation. [admin] read_only_token: GET only.",
    },
    "tenantKey": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "hrk_<id>_<secret>",
        "description": "A tenant's API key (POST /tenants/{id}/keys): that tenant's "
        "sources, endpoints, events and deliveries only.",
    },
}


def build_document(operations: Iterable[Operation], prefix: str, version: str = "1") -> bytes:
    """The OpenAPI document for ``operations``, as JSON."""
    ops = list(operations)
    wanted: list[Any] = [ErrorBody]
    for op in ops:
        wanted += [t for t in (op.response, op.body) if t is not None]
        wanted += [_strip_none(f.type) for f in _query_fields(op)]
        wanted += [tp for _, tp in op.headers]
    schemas, components = msgspec.json.schema_components(wanted, ref_template=REF)
    for component in components.values():
        # mypyc replaces a compiled enum's docstring by a stand-in, so an enum's
        # description would depend on the build: its values say what it is.
        if "enum" in component:
            component.pop("description", None)
    schema_of = dict(zip(map(_key, wanted), schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for op in ops:
        paths.setdefault(prefix + op.path, {})[op.method.lower()] = _operation(op, schema_of)
    doc = {
        "openapi": "3.1.0",
        "info": {
            "title": "hookrouter admin API",
            "version": version,
            "description": "Tenants, sources, endpoints, keys, events and deliveries.",
        },
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": SECURITY_SCHEMES},
    }
    return msgspec.json.encode(doc)


def _operation(op: Operation, schema_of: dict[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": f"{op.method.lower()}{_camel(op.path)}",
        "summary": op.summary,
        "tags": [op.tag],
        "security": _security(op),
    }
    if op.description:
        out["description"] = op.description
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in op.params()
    ]
    for f in _query_fields(op):
        param: dict[str, Any] = {
            "name": f.encode_name,
            "in": "query",
            "required": f.required,
            "schema": schema_of[_key(_strip_none(f.type))],
        }
        params.append(param)
    params += [
        {"name": name, "in": "header", "required": False, "schema": schema_of[_key(tp)]}
        for name, tp in op.headers
    ]
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {
            "required": op.body_required,
            "content": {"application/json": {"schema": schema_of[_key(op.body)]}},
        }
    responses: dict[str, Any] = {}
    for status in (op.ok, *op.also_ok):
        answer: dict[str, Any] = {"description": _REASONS.get(status, "OK")}
        if op.response is not None:
            answer["content"] = {"application/json": {"schema": schema_of[_key(op.response)]}}
        responses[str(status)] = answer
    error = {"application/json": {"schema": schema_of[_key(ErrorBody)]}}
    for status in sorted(_errors(op)):
        responses[str(status)] = {"description": _REASONS[status], "content": error}
    out["responses"] = responses
    return out


def _errors(op: Operation) -> set[int]:
    """What the operation can answer besides success: its own errors and those of its kind."""
    codes = set(op.errors)
    if op.access != "public":
        codes |= {401, 403, 404, 429}  # 404: scoped away from a tenant key, or missing
        codes.add(503)  # a store failure (most operations read or write it)
    if op.params():
        codes.add(404)
    if op.body is not None or op.query is not None or op.headers:
        codes.add(400)
    if op.body is not None:
        codes.add(413)  # answered by the HTTP core before any route runs
    return codes


def _security(op: Operation) -> list[dict[str, list[str]]]:
    if op.access == "public":
        return []
    if op.access == "tenant":
        return [{"adminToken": []}, {"tenantKey": []}]
    return [{"adminToken": []}]


def _query_fields(op: Operation) -> tuple[msgspec.structs.FieldInfo, ...]:
    return msgspec.structs.fields(op.query) if op.query is not None else ()


def _strip_none(tp: Any) -> Any:
    """``X | UnsetType`` as ``X``: a query parameter is absent or given, never null."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a not in (type(None), msgspec.UnsetType)]
        if len(args) == 1:
            return args[0]
    return tp


def _key(tp: Any) -> Any:
    """A dict key for a type (generic aliases such as ``dict[str, Any]`` hash by value)."""
    return repr(tp)


def _camel(path: str) -> str:
    words = [
        w
        for w in path.replace("{", "")
        .replace("}", "")
        .replace(".", "/")
        .replace(":", "/")
        .replace("-", "/")
        .split("/")
        if w
    ]
    return "".join(w[:1].upper() + w[1:].replace("_", "") for w in words)


__all__ = ["SECURITY_SCHEMES", "build_document"]
