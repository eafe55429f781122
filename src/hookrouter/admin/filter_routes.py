"""Trying an endpoint's routing on a sample event (added to the admin API by ``AdminApi``).

::

    POST /admin/v1/endpoints/{id}/filter-test   {"type": ..., "payload": ..., "headers": ...}

The answer is ``{"matched": bool, "reason": str | null}``: whether an event
like the sample would get a delivery for that endpoint, and if not, the
first part that failed (``event_types``, or the filter clause by its path in
the filter). A ``filter`` in the body is tried instead of the endpoint's own,
so a draft can be checked before it is saved; it is validated like a saved
one (422 naming the bad operator). Nothing is stored or delivered. A
tenant's key may test its own endpoints only; others answer 404.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from hookrouter.admin import schemas
from hookrouter.admin.operations import Call, Operation, Principal
from hookrouter.config.entities import EndpointConfig
from hookrouter.config.reader import issues_from_pairs
from hookrouter.core.filters import Filter, FilterError, parse_filter
from hookrouter.core.http1 import Response
from hookrouter.core.routing import compile_filter
from hookrouter.errors import ConfigError

Route = Callable[[Operation, Callable[[Call], Awaitable[Response]]], None]
FindEndpoint = Callable[[Principal, str], EndpointConfig]


def install(route: Route, endpoint: FindEndpoint) -> None:
    """Add the filter-test route; ``endpoint`` finds one the caller may see (else 404)."""

    async def filter_test(call: Call) -> Response:
        target = endpoint(call.principal, call.params["id"])
        sample: schemas.FilterTest = call.body()
        flt = target.filter if sample.filter is None else _draft(sample.filter)
        matched, reason = evaluate(target, flt, sample)
        return call.respond(schemas.FilterTestResult(matched, reason))

    route(
        Operation(
            "POST",
            "/endpoints/{id}/filter-test",
            "Would an event like this one reach the endpoint, and if not why",
            "endpoints",
            access="tenant",
            response=schemas.FilterTestResult,
            body=schemas.FilterTest,
            body_required=True,
            errors=(422,),
            description="Checks event_types (when type is given) and the content filter, "
            "or the draft filter sent in the body; nothing is stored or delivered.",
        ),
        filter_test,
    )


def evaluate(
    target: EndpointConfig, flt: Filter | None, sample: schemas.FilterTest
) -> tuple[bool, str | None]:
    """(matched, why not) for ``sample`` against the endpoint's types and ``flt``."""
    if not target.enabled:
        return False, "the endpoint is disabled"
    types = target.event_types
    if (
        sample.type is not None
        and types is not None
        and not compile_filter(types).fullmatch(sample.type)
    ):
        return False, f"event_types: {sample.type!r} matches none of {list(types)}"
    if flt is None:
        return True, None
    headers = {name.lower(): value for name, value in sample.headers.items()}
    reason = flt.why_not(sample.payload, headers)
    return reason is None, reason


def _draft(doc: dict[str, Any]) -> Filter:
    try:
        return parse_filter(doc)
    except FilterError as exc:
        raise ConfigError(issues_from_pairs("filter", exc.issues)) from exc
