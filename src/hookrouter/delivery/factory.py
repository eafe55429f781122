"""Build the delivery engine for the configured store backend."""

from __future__ import annotations

import logging
from collections.abc import Callable

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.config.catalog import Catalog
from hookrouter.config.delivery import DeliverySettings
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.store.base import EventStore

log = logging.getLogger(__name__)


def build_delivery(
    store: EventStore,
    catalog: Callable[[], Catalog],
    settings: DeliverySettings,
    clock: Clock = SYSTEM_CLOCK,
) -> DeliveryEngine | None:
    """The delivery engine over ``store``'s own ledger, or None if its backend has none yet."""
    ledger = store.delivery_ledger()
    if ledger is not None:
        return DeliveryEngine(catalog, ledger, settings, clock=clock)
    log.warning("store %r has no delivery ledger: events are stored but not delivered", store)
    return None


__all__ = ["build_delivery"]
