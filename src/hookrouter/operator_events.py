"""The router's own events (``[[operator_hooks]]``), delivered like any tenant's.

The hooks are endpoints of a reserved tenant, ``OPERATOR_TENANT``, added to
the catalog the delivery engine reads (never to the stored entities, the
admin API or the ingest path). An operator event is appended to the store
as an event of that tenant and offered to the engine once committed, so it
is signed (Standard Webhooks, the hook's secret), retried on the schedule,
kept behind a breaker and survives a restart exactly like a tenant's
delivery; its own credit queue keeps a flapping operator URL from slowing
any tenant.

Emitted: ``endpoint.breaker_opened`` / ``endpoint.breaker_closed`` (each
transition), ``endpoint.disabled`` (a 410 Gone), ``delivery.dead_lettered``
(per tenant, a count per ``dead_letter_summary`` period, not one per
delivery) and ``tenant.backlog_high`` / ``tenant.backlog_cleared`` (a
tenant's undelivered deliveries above ``backlog_high`` for
``backlog_window``: one event when it starts, one when it ends).
Events about the reserved tenant itself are never emitted (no loops).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from hookrouter.clock import Clock
from hookrouter.config.catalog import Catalog
from hookrouter.config.entities import EndpointConfig, TenantConfig
from hookrouter.config.operator import OperatorSettings
from hookrouter.delivery.breaker import BreakerState, Transition
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.errors import StoreError
from hookrouter.ids import new_event_id
from hookrouter.store.base import AppendResult, EventStore, NewEvent

log = logging.getLogger(__name__)

OPERATOR_TENANT: Final = "_hookrouter"
OPERATOR_SOURCE: Final = "_hookrouter.operator"
POLL_SECONDS: Final = 1.0


def hook_id(index: int) -> str:
    return f"_hookrouter.operator.{index}"


class OperatorEvents:
    """Builds the merged catalog, watches the engine, appends and offers operator events."""

    def __init__(self, settings: OperatorSettings, store: EventStore, clock: Clock) -> None:
        self.settings = settings
        self._store = store
        self._delivery: DeliveryEngine | None = None  # attach()
        self._clock = clock
        self._get: Callable[[], Catalog] | None = None  # catalog()
        self._tenant = TenantConfig(id=OPERATOR_TENANT)
        self._hooks = tuple(
            EndpointConfig(
                id=hook_id(index),
                tenant=OPERATOR_TENANT,
                url=hook.url,
                secret=hook.secret,
                event_types=hook.events,
            )
            for index, hook in enumerate(settings.hooks)
        )
        self._merged: Catalog | None = None  # the tenants' catalog the hooks were put into
        self._above_since: dict[str, float] = {}  # tenant -> when its backlog went high
        self._high: set[str] = set()  # tenants told about (backlog_high sent)
        self._dead_seen: dict[str, int] = {}
        self._dead_summary_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Future[Any]] = set()
        self.emitted: list[str] = []  # event types, for tests and stats

    def catalog(self, tenants: Callable[[], Catalog]) -> Callable[[], Catalog]:
        """The delivery engine's catalog: the tenants' with the reserved tenant's hooks put in.

        The catalog changes in place one entity at a time, so the hooks are put
        into it once (and again only if a new catalog object replaces it): the
        engine keeps following its change log, and a tenant change costs no
        rebuild. Their ids cannot clash with a tenant's (names start with a
        letter or digit); the reserved tenant has no source, so ingest never
        routes to it.
        """

        def merged() -> Catalog:
            current = tenants()
            if self._merged is not current:
                current.put_tenant(self._tenant)
                for hook in self._hooks:
                    current.put_endpoint(hook)
                self._merged = current
            return current

        self._get = merged
        return merged

    def attach(self, delivery: DeliveryEngine) -> None:
        """The engine that delivers the events (built over ``catalog()``); watch its breakers."""
        self._delivery = delivery
        delivery.on_breaker_transition(self.breaker_transition)

    # -- what the engine and the runtime report --------------------------------

    def breaker_transition(self, tenant_id: str, transition: Transition) -> None:
        if tenant_id == OPERATOR_TENANT:
            return
        if transition.after is BreakerState.OPEN:
            kind = "endpoint.breaker_opened"
        elif transition.after is BreakerState.CLOSED:
            kind = "endpoint.breaker_closed"
        else:
            return
        self.emit(kind, {"tenant": tenant_id, "endpoint": transition.endpoint_id})

    def endpoint_disabled(self, tenant_id: str, endpoint_id: str, reason: str) -> None:
        if tenant_id != OPERATOR_TENANT:
            self.emit(
                "endpoint.disabled",
                {"tenant": tenant_id, "endpoint": endpoint_id, "reason": reason},
            )

    def poll(self) -> None:
        """Backlog thresholds and the dead-letter summary (called every ``POLL_SECONDS``)."""
        now = self._clock.monotonic()
        settings = self.settings
        delivery = self._delivery
        if delivery is None:
            return
        watched = set(delivery.queues) | self._high | set(self._above_since)
        for tenant in sorted(watched - {OPERATOR_TENANT}):
            backlog = delivery.backlog(tenant)
            if backlog > settings.backlog_high:
                since = self._above_since.setdefault(tenant, now)
                if tenant not in self._high and now - since >= settings.backlog_window_seconds:
                    self._high.add(tenant)
                    self.emit("tenant.backlog_high", {"tenant": tenant, "backlog": backlog})
            else:
                self._above_since.pop(tenant, None)
                if tenant in self._high:
                    self._high.discard(tenant)
                    self.emit("tenant.backlog_cleared", {"tenant": tenant, "backlog": backlog})
        if now - self._dead_summary_at >= settings.dead_letter_summary_seconds:
            self._dead_summary_at = now
            self._summarise_dead()

    def _summarise_dead(self) -> None:
        if self._delivery is None:
            return
        for (tenant, outcome), count in list(self._delivery.outcome_counts.items()):
            if outcome != "dead" or tenant == OPERATOR_TENANT:
                continue
            new = count - self._dead_seen.get(tenant, 0)
            self._dead_seen[tenant] = count
            if new > 0:
                period = self.settings.dead_letter_summary_seconds
                self.emit(
                    "delivery.dead_lettered",
                    {"tenant": tenant, "count": new, "period_seconds": period},
                )

    # -- emitting ---------------------------------------------------------------

    def emit(self, event_type: str, data: dict[str, Any]) -> None:
        """Append an operator event; once committed, the engine delivers it."""
        now = self._clock.time()
        if self._get is None or self._delivery is None:
            return
        endpoints = self._get().routing.match(OPERATOR_TENANT, event_type)
        if not endpoints:
            return
        event_id = new_event_id(int(now * 1000))
        body = orjson.dumps(
            {
                "type": event_type,
                "timestamp": datetime.fromtimestamp(now, UTC).isoformat(),
                "data": data,
            }
        )
        event = NewEvent(
            event_id=event_id,
            tenant_id=OPERATOR_TENANT,
            source_id=OPERATOR_SOURCE,
            provider_event_id=event_id,
            event_type=event_type,
            received_at=now,
            headers={"content-type": "application/json"},
            body=body,
            endpoint_ids=endpoints,
        )
        self.emitted.append(event_type)
        log.info("operator event %s", event_type, extra={"event_id": event_id})

        def committed(result: AppendResult | None, error: BaseException | None) -> None:
            if result is None:
                log.warning("operator event %s not stored: %s", event_type, error)
            elif not result.duplicate and self._delivery is not None:
                self._delivery.event_committed(event)

        try:
            self._store.append_then(event, committed)
        except StoreError as exc:
            log.warning("operator event %s not stored: %s", event_type, exc.message)

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._poll_forever())

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            try:
                self.poll()
            except Exception:
                log.exception("operator events: poll failed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


__all__ = ["OPERATOR_SOURCE", "OPERATOR_TENANT", "OperatorEvents", "hook_id"]
