"""Durable event stores: the contracts, and backends chosen by name.

``open_configured(config.store)`` builds the configured backend
(``store/backends.py``); the caller then awaits ``store.open()`` (and
``store.close()`` at shutdown). ``open_store(name, **arguments)`` builds one
from its constructor's arguments, for tests and tools.
"""

from __future__ import annotations

from typing import Any

from hookrouter.errors import ConfigError, ConfigIssue
from hookrouter.store.backends import BACKENDS, backend, open_configured
from hookrouter.store.base import (
    AppendResult,
    AttemptRecord,
    DeliveryRecord,
    DeliveryState,
    Entity,
    EntityKind,
    EventRecord,
    EventStatus,
    EventStore,
    NewEvent,
    StoreStats,
)


def open_store(kind: str, **options: Any) -> EventStore:
    """Build the store backend called ``kind`` with ``options`` (not yet opened).

    Raises ``ConfigError`` for an unknown kind or options the backend rejects.
    """
    if kind not in BACKENDS:
        known = ", ".join(sorted(BACKENDS))
        raise ConfigError([ConfigIssue("store.kind", f"unknown store {kind!r} (known: {known})")])
    try:
        store: EventStore = backend(kind).store_class(**options)
    except TypeError as exc:
        raise ConfigError([ConfigIssue("store", f"{kind}: {exc}")]) from exc
    return store


__all__ = [
    "BACKENDS",
    "AppendResult",
    "AttemptRecord",
    "DeliveryRecord",
    "DeliveryState",
    "Entity",
    "EntityKind",
    "EventRecord",
    "EventStatus",
    "EventStore",
    "NewEvent",
    "StoreStats",
    "open_configured",
    "open_store",
]
