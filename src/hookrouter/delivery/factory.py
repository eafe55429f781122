"""Build the delivery engine for the configured store backend."""

from __future__ import annotations

import logging
from collections.abc import Callable

from hookrouter.catalog import Catalog
from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.config_sections import DeliverySettings
from hookrouter.delivery.worker import DeliveryEngine

log = logging.getLogger(__name__)


def build_delivery(
    store: object,
    catalog: Callable[[], Catalog],
    settings: DeliverySettings,
    clock: Clock = SYSTEM_CLOCK,
) -> DeliveryEngine | None:
    """The delivery engine for ``store``'s backend, or None if it has no ledger yet."""
    # Imported here: the backend is chosen at run time, and a JetStream-only
    # deployment must not import SQLite code.
    from hookrouter.store.sqlite import SqliteStore
    from hookrouter.store.sqlite.ledger import SqliteLedger

    if isinstance(store, SqliteStore):
        return DeliveryEngine(catalog, SqliteLedger(store), settings, clock=clock)
    log.warning("store %r has no delivery ledger: events are stored but not delivered", store)
    return None


__all__ = ["build_delivery"]
