"""The shapes msgspec checks stored entity documents against (``config.stored``).

Kept out of the compiled ``config.stored``: mypyc drops a Struct's class
keywords, and ``forbid_unknown_fields`` is what sends a document with an
unknown key to the full parser, which refuses it.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from hookrouter.config.entities import (
    _ENDPOINT,
    _TENANT,
    DEFAULT_TOLERANCE_SECONDS,
    MAX_IN_FLIGHT,
    MAX_QUEUE_CAPACITY,
)


class StoredTenant(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    queue_capacity: Annotated[int, msgspec.Meta(ge=1, le=MAX_QUEUE_CAPACITY)] = (
        _TENANT.queue_capacity
    )
    max_in_flight: Annotated[int, msgspec.Meta(ge=1, le=MAX_IN_FLIGHT)] = _TENANT.max_in_flight
    max_backlog: Annotated[int, msgspec.Meta(ge=1)] = _TENANT.max_backlog


class StoredSource(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    tenant: str
    provider: str
    secrets: list[str]
    tolerance_seconds: Annotated[int, msgspec.Meta(ge=0)] = DEFAULT_TOLERANCE_SECONDS


class StoredEndpoint(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    tenant: str
    url: str
    secret: str
    event_types: list[str] | None = None
    max_in_flight: Annotated[int, msgspec.Meta(ge=0, le=MAX_IN_FLIGHT)] = 0
    enabled: bool = _ENDPOINT.enabled
    previous_secrets: list[str] = []
