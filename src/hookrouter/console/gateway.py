"""The console's way into the admin API: the same routes, called in process.

Every read and change the console makes is an admin API request answered by
``AdminApi.dispatch_as`` for the signed-in session's principal, so the pages
get the API's validation (422 issues with their field paths), its scoping (a
tenant's session sees what that tenant's key sees, other tenants' ids answer
404) and its audit hook, without a second copy of any rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from hookrouter.admin.api import PREFIX, AdminApi
from hookrouter.admin.operations import Principal
from hookrouter.core.http1 import Request


@dataclass(slots=True)
class ApiError(Exception):
    """An admin API answer that is not a success, with what it said."""

    status: int
    message: str
    issues: list[dict[str, str]] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


def segment(value: str) -> str:
    """``value`` as one path segment (an id with a slash in it stays one segment)."""
    return quote(value, safe="")


class AdminGateway:
    def __init__(self, api: AdminApi) -> None:
        self.api = api

    async def call(
        self,
        principal: Principal,
        who: str,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """The decoded answer of ``method path`` (below /admin/v1); raises ``ApiError``."""
        params = {k: _text(v) for k, v in (query or {}).items() if v not in (None, "")}
        request = Request(
            method,
            PREFIX + path,
            urlencode(params),
            {"content-type": "application/json"},
            b"" if body is None else orjson.dumps(body),
            True,
        )
        response = await self.api.dispatch_as(request, principal, who)
        data = orjson.loads(response.body) if response.body else None
        if response.status >= 400:
            data = data if isinstance(data, dict) else {}
            raise ApiError(
                response.status,
                str(data.get("message", f"HTTP {response.status}")),
                list(data.get("issues", [])),
            )
        return data


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


__all__ = ["AdminGateway", "ApiError", "segment"]
