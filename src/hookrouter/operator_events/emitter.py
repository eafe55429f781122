"""``OperatorEvents``: builds the hooks' catalog, polls the watches, appends the events."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from hookrouter.clock import Clock
from hookrouter.config.catalog import Catalog
from hookrouter.config.entities import EndpointConfig, TenantConfig
from hookrouter.config.operator import OperatorHook, OperatorSettings
from hookrouter.delivery.breaker import BreakerState, Transition
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.errors import StoreError
from hookrouter.ids import new_event_id
from hookrouter.ingress.ingest_metrics import INGEST_REQUESTS, SATURATION_REFUSALS
from hookrouter.operator_events.slack import slack_message
from hookrouter.operator_events.watches import (
    BacklogWatch,
    DeadLetterSummary,
    Emitted,
    QuietSources,
    RedisWatch,
    SaturationWatch,
)
from hookrouter.store.base import AppendResult, EventStore, NewEvent

log = logging.getLogger(__name__)

OPERATOR_TENANT: Final = "_hookrouter"
OPERATOR_SOURCE: Final = "_hookrouter.operator"
POLL_SECONDS: Final = 1.0


def hook_id(index: int) -> str:
    return f"_hookrouter.operator.{index}"


def _hook_endpoint(index: int, hook: OperatorHook) -> EndpointConfig:
    # A Slack hook has no secret of its own; the engine signs every delivery,
    # so it signs these with a throwaway one (Slack ignores the headers).
    secret = hook.secret or "whsec_" + base64.b64encode(os.urandom(24)).decode()
    return EndpointConfig(
        id=hook_id(index),
        tenant=OPERATOR_TENANT,
        url=hook.url,
        secret=secret,
        event_types=hook.events,
    )


class OperatorEvents:
    """Builds the merged catalog, watches the engine, appends and offers operator events."""

    def __init__(self, settings: OperatorSettings, store: EventStore, clock: Clock) -> None:
        self.settings = settings
        self._store = store
        self._delivery: DeliveryEngine | None = None  # attach()
        self._clock = clock
        self._get: Callable[[], Catalog] | None = None  # catalog()
        self._tenant = TenantConfig(id=OPERATOR_TENANT)
        self._hooks = tuple(_hook_endpoint(i, hook) for i, hook in enumerate(settings.hooks))
        self._slack = frozenset(
            hook_id(i) for i, hook in enumerate(settings.hooks) if hook.format == "slack"
        )
        self._merged: Catalog | None = None  # the tenants' catalog the hooks were put into
        self._backlog = BacklogWatch(settings.backlog_high, settings.backlog_window_seconds)
        self._dead = DeadLetterSummary(settings.dead_letter_summary_seconds)
        self._saturation = SaturationWatch(SATURATION_REFUSALS, settings.recovery_seconds)
        self._redis: RedisWatch | None = None  # watch_redis()
        self._quiet: QuietSources | None = None
        if settings.source_quiet_seconds > 0:
            self._quiet = QuietSources(
                settings.source_quiet_seconds,
                settings.source_quiet_min_events,
                self._source_tenants,
                _accepted,
                POLL_SECONDS,
            )
        self._task: asyncio.Task[None] | None = None
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
        """The engine that delivers the events (built over ``catalog()``); watch it."""
        self._delivery = delivery
        delivery.on_breaker_transition(self.breaker_transition)
        delivery.on_dead_letter(self.dead_lettered)

    def watch_redis(self, redis_up: Callable[[], bool]) -> None:
        """Report the rate limiter's Redis going away and coming back."""
        self._redis = RedisWatch(redis_up, self.settings.recovery_seconds)

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

    def dead_lettered(self, tenant_id: str, endpoint_id: str) -> None:
        if tenant_id != OPERATOR_TENANT:  # no event about an event: no loops
            self._dead.dead(tenant_id, endpoint_id)

    def poll(self) -> None:
        """Every watch once (called every ``POLL_SECONDS``)."""
        now = self._clock.monotonic()
        delivery = self._delivery
        if delivery is None:
            return
        tenants = [t for t in delivery.queues if t != OPERATOR_TENANT]
        events: Emitted = self._backlog.poll(now, tenants, delivery.backlog)
        events += self._dead.poll(now)
        events += self._saturation.poll(now)
        if self._redis is not None:
            events += self._redis.poll(now)
        if self._quiet is not None:
            events += self._quiet.poll(now)
        for event_type, data in events:
            self.emit(event_type, data)

    def _source_tenants(self) -> Mapping[str, str]:
        if self._get is None:
            return {}
        return {sid: live.tenant.id for sid, live in self._get().sources.items()}

    # -- emitting ---------------------------------------------------------------

    def emit(self, event_type: str, data: dict[str, Any]) -> None:
        """Append the event (once per hook format); once committed, the engine delivers it."""
        if self._get is None or self._delivery is None:
            return
        endpoints = self._get().routing.match(OPERATOR_TENANT, event_type)
        if not endpoints:
            return
        self.emitted.append(event_type)
        now = self._clock.time()
        timestamp = datetime.fromtimestamp(now, UTC).isoformat()
        standard = tuple(e for e in endpoints if e not in self._slack)
        slack = tuple(e for e in endpoints if e in self._slack)
        if standard:
            body = {"type": event_type, "timestamp": timestamp, "data": data}
            self._append(event_type, body, standard, now)
        if slack:
            self._append(event_type, slack_message(event_type, timestamp, data), slack, now)

    def _append(
        self, event_type: str, body: dict[str, Any], endpoints: tuple[str, ...], now: float
    ) -> None:
        event_id = new_event_id(int(now * 1000))
        event = NewEvent(
            event_id=event_id,
            tenant_id=OPERATOR_TENANT,
            source_id=OPERATOR_SOURCE,
            provider_event_id=event_id,
            event_type=event_type,
            received_at=now,
            headers={"content-type": "application/json"},
            body=orjson.dumps(body),
            endpoint_ids=endpoints,
        )
        log.info("operator event %s", event_type, extra={"event_id": event_id})

        delivery = self._delivery

        def committed(result: AppendResult | None, error: BaseException | None) -> None:
            if result is None:
                log.warning("operator event %s not stored: %s", event_type, error)
            if delivery is None:
                return
            if result is None or result.duplicate:
                delivery.event_not_stored(event)
            else:
                delivery.event_committed(event)

        if delivery is not None:
            delivery.event_appending(event)
        try:
            self._store.append_then(event, committed)
        except StoreError as exc:
            if delivery is not None:
                delivery.event_not_stored(event)
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


def _accepted(source: str) -> float:
    """Events a source has had accepted (new or duplicate) since the process started."""
    total = 0.0
    for result in ("accepted", "duplicate"):
        cell = INGEST_REQUESTS.peek(source, result)
        if cell is not None:
            total += cell.value
    return total
