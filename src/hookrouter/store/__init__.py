"""Durable event stores, chosen by name.

``open_store("sqlite", path=...)`` builds a backend; the caller then awaits
``store.open()`` (and ``store.close()`` at shutdown). Backends are imported
lazily so that choosing one never imports another's dependencies.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

from hookrouter.errors import ConfigError, ConfigIssue
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
)

# name -> (module, class). JetStream joins here later.
BACKENDS: Final[dict[str, tuple[str, str]]] = {
    "sqlite": ("hookrouter.store.sqlite", "SqliteStore"),
}


def open_store(kind: str, **options: Any) -> EventStore:
    """Build the store backend called ``kind`` with ``options`` (not yet opened).

    Raises ``ConfigError`` for an unknown kind or options the backend rejects.
    """
    try:
        module_name, class_name = BACKENDS[kind]
    except KeyError:
        known = ", ".join(sorted(BACKENDS))
        raise ConfigError(
            [ConfigIssue("store.kind", f"unknown store {kind!r} (known: {known})")]
        ) from None
    backend = getattr(importlib.import_module(module_name), class_name)
    try:
        store: EventStore = backend(**options)
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
    "open_store",
]
