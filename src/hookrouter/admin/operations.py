"""One admin API operation, declared once: what the route decodes and answers.

Each route is registered with an ``Operation`` (``AdminApi.route``). The
route decodes its query string and body through the operation's types and
encodes its answer with ``respond``; ``admin.openapi`` builds the OpenAPI
document from the same objects, so the two cannot disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs

import msgspec
import orjson

from hookrouter.core.http1 import Request, Response
from hookrouter.errors import NotFound, RequestRejected

# Who may call: ``admin`` (the admin token; the read-only token for GET),
# ``tenant`` (also a tenant's key, which the handler scopes to that tenant),
# ``public`` (anyone).
Access = Literal["admin", "tenant", "public"]
_PARAM = re.compile(r"\{(\w+)\}")


class BadRequest(RequestRejected):
    status = 400
    reason = "bad_request"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the whole router (admin tokens) or one tenant (its key)."""

    tenant: str | None  # None: every tenant
    read_only: bool = False

    def owns(self, tenant: str | None) -> bool:
        return self.tenant is None or tenant == self.tenant

    def require(self, tenant: str | None, missing: str) -> None:
        """404 with ``missing`` (what a nonexistent resource answers) for another tenant's."""
        if not self.owns(tenant):
            raise NotFound(missing)


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str  # below /admin/v1, with {name} parameters
    summary: str
    tag: str
    access: Access = "admin"
    ok: int = 200
    also_ok: tuple[int, ...] = ()  # other success statuses with the same body
    response: Any = None  # the success body's type; None: no body
    body: Any = None  # the request body's type
    body_required: bool = False
    query: type[msgspec.Struct] | None = None
    errors: tuple[int, ...] = ()  # beyond those every operation of its kind can answer
    description: str = ""
    headers: tuple[tuple[str, Any], ...] = ()  # optional request headers: (name, type)

    def pattern(self, prefix: str) -> re.Pattern[str]:
        parts = _PARAM.split(self.path)
        regex = "".join(
            re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+)" for i, part in enumerate(parts)
        )
        return re.compile(re.escape(prefix) + regex + "/?")

    def params(self) -> list[str]:
        return _PARAM.findall(self.path)

    def decode_query(self, request: Request) -> Any:
        """The query string as ``self.query`` (the last value of a repeated parameter)."""
        assert self.query is not None
        values = query_params(request)
        try:
            return msgspec.convert(values, self.query, strict=False)
        except msgspec.ValidationError as exc:
            raise BadRequest(f"invalid query: {_where(exc)}") from exc

    def decode_body(self, request: Request) -> Any:
        """The JSON body as ``self.body``; an empty optional body is ``{}``."""
        assert self.body is not None
        if not request.body and not self.body_required:
            return msgspec.convert({}, self.body)
        try:
            return msgspec.json.decode(request.body, type=self.body)
        except msgspec.ValidationError as exc:
            raise BadRequest(f"invalid request body: {_where(exc)}") from exc
        except msgspec.DecodeError as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise BadRequest("request body nests too deeply") from exc

    def respond(self, value: Any, status: int | None = None) -> Response:
        """``value`` (of ``self.response``'s type) as the success answer."""
        if self.response is None:
            return Response(status or self.ok)
        return Response(status or self.ok, msgspec.json.encode(value))


@dataclass(frozen=True, slots=True)
class Call:
    """One request to an operation, as its handler receives it."""

    request: Request
    params: dict[str, str]  # the path's {name} parameters
    principal: Principal
    op: Operation

    def query(self) -> Any:
        return self.op.decode_query(self.request)

    def body(self) -> Any:
        return self.op.decode_body(self.request)

    def respond(self, value: Any, status: int | None = None) -> Response:
        return self.op.respond(value, status)


def query_params(request: Request) -> dict[str, str]:
    """The last value of each query parameter."""
    return {k: v[-1] for k, v in parse_qs(request.query, keep_blank_values=True).items()}


def parse_json_body(request: Request) -> Any:
    try:
        return orjson.loads(request.body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc


def validation_error(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's ``Expected `int`, got `str` - at `$.limit``` as its path and message."""
    message, _, where = str(exc).partition(" - at `$")
    return where.rstrip("`").lstrip("."), message


def _where(exc: msgspec.ValidationError) -> str:
    path, message = validation_error(exc)
    return f"{path}: {message}" if path else message


__all__ = [
    "Access",
    "BadRequest",
    "Call",
    "Operation",
    "Principal",
    "parse_json_body",
    "query_params",
    "validation_error",
]
