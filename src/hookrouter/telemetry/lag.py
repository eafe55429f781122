"""Per-tenant delivery lag: the age of the oldest delivery that is due and not yet done.

Read at scrape time from the delivery engine's memory, for the tenants that
have due work only (queued or in flight), so the series count follows the
tenants with a backlog, not the configured ones, and the delivery path pays
nothing. "Due" means waiting for a slot or being attempted: a retry waiting
for its scheduled time and a parked delivery are not lag (the outcomes and
parked series show those). While a lane spills, its spilled deliveries are
newer than the ones it holds in memory (spill mode serves the oldest
first), so the memory's oldest is the tenant's oldest; only in the moment
after a restart, before the first page-in, is the figure low.

Event ids carry their arrival time (``hookrouter.ids``): no store read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hookrouter.flow.credits import CreditQueue
from hookrouter.ids import event_id_time_ms


def oldest_due(
    queues: Mapping[str, CreditQueue], in_flight: Iterable[tuple[str, str]]
) -> dict[str, str]:
    """Tenant -> the smallest (oldest) event id among its queued and in-flight deliveries.

    ``in_flight``: (tenant, event id) per attempt in progress. Event ids sort
    by time (their first ten characters are the arrival millisecond).
    """
    oldest: dict[str, str] = {}
    for tenant, event_id in in_flight:
        known = oldest.get(tenant)
        if known is None or event_id < known:
            oldest[tenant] = event_id
    for tenant, queue in list(queues.items()):
        if not queue.open_work():  # nothing queued (checked without building its stats)
            continue
        first = min((ref.event_id for ref in queue.queued_refs()), default=None)
        known = oldest.get(tenant)
        if first is not None and (known is None or first < known):
            oldest[tenant] = first
    return oldest


def lag_seconds(oldest: Mapping[str, str], now: float) -> dict[str, float]:
    """Tenant -> seconds since its oldest due event arrived (never negative)."""
    lags: dict[str, float] = {}
    for tenant, event_id in oldest.items():
        try:
            arrived = event_id_time_ms(event_id) / 1000.0
        except ValueError:  # not one of our ids (cannot happen for stored events)
            continue
        lags[tenant] = max(0.0, now - arrived)
    return lags


__all__ = ["lag_seconds", "oldest_due"]
