"""Prometheus series of the delivery engine (per tenant, per endpoint breaker).

Gauges and counters are read from the live engines at scrape time (a custom
collector), so the delivery hot path pays nothing for them; only the latency
histogram is observed per delivery (a ``LoopHistogram``: a dict lookup for
the tenant's cell, a bisect and two additions), by the compiled
``DeliveryEngine._count_outcome``, which also keeps the outcome counters.

Series (label ``tenant`` unless noted):

* ``hookrouter_delivery_queue_depth``      deliveries queued in memory
* ``hookrouter_delivery_credits_in_use``   credits held (queued + in flight)
* ``hookrouter_delivery_spilled``          known deliveries waiting in the store
* ``hookrouter_delivery_in_flight``        attempts running
* ``hookrouter_delivery_parked``           parked deliveries (refreshed every few seconds)
* ``hookrouter_delivery_outcomes_total``   by ``outcome`` (delivered, retried, dead, ...)
* ``hookrouter_delivery_evicted_total``    queued deliveries sent back to the store for a sibling
* ``hookrouter_delivery_endpoint_queue_depth``, ``..._endpoint_in_flight``,
  ``..._endpoint_spilled``                 the same per endpoint lane (labels tenant, endpoint)
* ``hookrouter_delivery_breaker_state``    by ``endpoint``: 0 closed, 1 half-open, 2 open
* ``hookrouter_delivery_latency_seconds``  ack-to-delivered histogram (the first
  ``[telemetry] labelled_latency_tenants``; later ones under ``_other``)
* ``hookrouter_delivery_lag_seconds``      age of the oldest due delivery, for tenants
  with due work only (``telemetry.lag``)
* ``hookrouter_delivery_outcome_write_failures_total`` (no label) outcome batches
  the store refused (disk full, lock held elsewhere); each is written again later
* ``hookrouter_delivery_tenants_held``, ``..._tenant_states_made_total``,
  ``..._tenant_states_released_total`` (no label) tenants holding delivery state,
  and how often states are built and released by the idle sweep

Cardinality is bounded: the first ``[telemetry] labelled_tenants`` tenants with
deliveries get series of their own; later ones are summed under
``tenant="_other"`` (and get no per-endpoint lane series), and breakers are
listed per endpoint only while they are not closed or fewer than the limit.
Only tenants with work hold a queue, so a scrape walks the busy tenants, not
the catalog.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final, Protocol

from prometheus_client.core import Metric

from hookrouter.delivery.breaker import BreakerState
from hookrouter.delivery.endpoints import EndpointTable
from hookrouter.flow.credits import CreditQueue
from hookrouter.loop_metrics import CounterCell, LoopHistogram, Samples
from hookrouter.metrics import REGISTRY, LiveSet
from hookrouter.store.base import DeliveryState
from hookrouter.telemetry.lag import lag_seconds, oldest_due

LATENCY = LoopHistogram(
    "hookrouter_delivery_latency_seconds",
    "Time from acknowledging an event to a 2xx from the endpoint.",
    ["tenant"],
    # 5 ms (same host) to 1 h (retries on the schedule's early steps).
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30, 300, 3600),
    registry=REGISTRY,
)
OTHER_TENANTS: Final = "_other"
_BREAKER_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}


class EngineView(Protocol):
    """What a scrape reads of a delivery engine (``delivery.engine.DeliveryEngine``).

    A protocol, so that this module, which the engine imports, imports no engine.
    """

    @property
    def queues(self) -> Mapping[str, CreditQueue]: ...

    @property
    def state_counts(self) -> Mapping[tuple[str, DeliveryState], int]: ...

    @property
    def outcome_counts(self) -> Mapping[tuple[str, str], CounterCell]: ...

    @property
    def endpoints(self) -> EndpointTable: ...

    @property
    def outcome_write_failures(self) -> int: ...

    def in_flight_events(self) -> Sequence[tuple[str, str]]: ...

    @property
    def labelled(self) -> set[str]: ...

    @property
    def tripped(self) -> Mapping[str, str]: ...

    @property
    def series_limit(self) -> int: ...

    @property
    def tenant_states_made(self) -> int: ...

    @property
    def tenant_states_released(self) -> int: ...


class Tracked:
    """What the collector holds weakly for one engine.

    The engine is a compiled (native) class, which takes no weak references;
    this small object does. The engine keeps it (``track``'s result), so the
    pair lives exactly as long as the engine: a forgotten ``untrack`` costs
    a stale series until the garbage collector breaks the cycle, never a leak.
    """

    __slots__ = ("__weakref__", "engine")

    def __init__(self, engine: EngineView) -> None:
        self.engine = engine


_engines: LiveSet[Tracked] = LiveSet()


def track(engine: EngineView) -> Tracked:
    """Show ``engine`` in the scrapes; keep the result (it is what is held weakly)."""
    handle = Tracked(engine)
    _engines.add(handle)
    return handle


def untrack(handle: Tracked | None) -> None:
    if handle is not None:
        _engines.discard(handle)


_GAUGES: Final = (
    ("queue_depth", "Deliveries queued in memory."),
    ("credits_in_use", "Credits held: queued plus in flight."),
    ("spilled", "Known deliveries waiting in the store for a credit."),
    ("in_flight", "Delivery attempts running."),
    ("parked", "Parked deliveries (breaker open), refreshed every few seconds."),
)
_LANE_GAUGES: Final = (
    ("queue_depth", "Deliveries queued in memory for one endpoint."),
    ("in_flight", "Delivery attempts running to one endpoint."),
    ("spilled", "Known deliveries of one endpoint waiting in the store."),
)


# Engine-wide series without labels: (name, kind, help, how an engine's value is read).
_TOTALS: Final[tuple[tuple[str, str, str, Callable[[EngineView], int]], ...]] = (
    (
        "outcome_write_failures",
        "counter",
        "Batches of delivery outcomes the store refused (disk full, write lock held"
        " elsewhere); each is kept and written again a second later.",
        lambda engine: engine.outcome_write_failures,
    ),
    (
        "tenants_held",
        "gauge",
        "Tenants holding delivery state in memory (a queue, endpoint runtimes).",
        lambda engine: len(engine.queues),
    ),
    (
        "tenant_states_made",
        "counter",
        "Tenant delivery states built: on a tenant's first work, and again after its"
        " idle release. Rising with released: [delivery] idle_tenants_kept is too low"
        " for the tenants with traffic.",
        lambda engine: engine.tenant_states_made,
    ),
    (
        "tenant_states_released",
        "counter",
        "Idle tenants' delivery states released past [delivery] idle_tenants_kept.",
        lambda engine: engine.tenant_states_released,
    ),
)


def _total(name: str, documentation: str, kind: str, value: float) -> Samples:
    samples = Samples(f"hookrouter_delivery_{name}", documentation, kind, [])
    samples.add((), value)
    return samples


class _Collector:
    """The engines' series, built once per scrape and served to either reader.

    ``expose`` writes them as text (``/metrics``), ``collect`` hands them to
    prometheus_client (in-process readers, tests): the same ``Samples``.
    """

    def collect(self) -> Iterator[Metric]:
        for family in _families([handle.engine for handle in _engines.snapshot()]):
            yield family.metric()

    def expose(self, out: list[str]) -> None:
        for family in _families([handle.engine for handle in _engines.snapshot()]):
            family.expose(out)


def _families(engines: Sequence[EngineView]) -> list[Samples]:
    gauges = {
        name: Samples(f"hookrouter_delivery_{name}", doc, "gauge", ["tenant"])
        for name, doc in _GAUGES
    }
    outcomes = Samples(
        "hookrouter_delivery_outcomes", "Attempt outcomes by tenant.", "counter",
        ["tenant", "outcome"],
    )  # fmt: skip
    lanes = {
        name: Samples(f"hookrouter_delivery_endpoint_{name}", doc, "gauge", ["tenant", "endpoint"])
        for name, doc in _LANE_GAUGES
    }
    evicted = Samples(
        "hookrouter_delivery_evicted",
        "Queued deliveries sent back to the store so that a sibling endpoint of the"
        " tenant could take its share of the credits (flow/credits.py).",
        "counter",
        ["tenant"],
    )
    breakers = Samples(
        "hookrouter_delivery_breaker_state",
        "Circuit breaker per endpoint: 0 closed, 1 half-open, 2 open.",
        "gauge",
        ["endpoint"],
    )
    totals = [
        _total(name, doc, kind, sum(read(engine) for engine in engines))
        for name, kind, doc, read in _TOTALS
    ]
    for engine in engines:
        _queues(engine, gauges, lanes, evicted)
        _parked(engine, gauges["parked"])
        for (tenant, outcome), cell in sorted(engine.outcome_counts.items()):
            outcomes.add((tenant, outcome), cell.value)
        table = engine.endpoints.breakers
        listed = (
            list(table)
            if len(table) <= engine.series_limit
            else [e for e in engine.tripped if e in table]
        )
        for endpoint in listed:
            breakers.add((endpoint,), _BREAKER_VALUE[table[endpoint].state])
    return [
        *gauges.values(),
        *lanes.values(),
        outcomes,
        evicted,
        breakers,
        *totals,
        _lag(engines, time.time()),
    ]


def _queues(
    engine: EngineView,
    gauges: dict[str, Samples],
    lanes: dict[str, Samples],
    evicted: Samples,
) -> None:
    """Each labelled tenant's queue series; the others summed under ``_other``.

    An idle queue of an unlabelled tenant adds nothing to the sums: skipped
    without building its stats (most held queues are idle, kept warm).
    """
    labelled = engine.labelled
    other = [0, 0, 0, 0]  # queued, credits, spilled, in flight of unlabelled tenants
    others = 0
    for tenant, queue in list(engine.queues.items()):
        if tenant not in labelled:
            others += 1
            if queue.is_idle():
                continue
            s = queue.stats()
            other[0] += s.queued
            other[1] += s.credits_used
            other[2] += s.spilled
            other[3] += s.in_flight
            continue
        s = queue.stats()
        key = (tenant,)
        gauges["queue_depth"].add(key, s.queued)
        gauges["credits_in_use"].add(key, s.credits_used)
        gauges["spilled"].add(key, s.spilled)
        gauges["in_flight"].add(key, s.in_flight)
        evicted.add(key, s.evicted_total)
        for lane in queue.lane_stats():
            labels = (tenant, lane.endpoint_id)
            lanes["queue_depth"].add(labels, lane.queued)
            lanes["in_flight"].add(labels, lane.in_flight)
            lanes["spilled"].add(labels, lane.spilled)
    if others:
        names = ("queue_depth", "credits_in_use", "spilled", "in_flight")
        for name, value in zip(names, other, strict=True):
            gauges[name].add((OTHER_TENANTS,), value)


def _parked(engine: EngineView, parked: Samples) -> None:
    labelled = engine.labelled
    parked_other = 0
    for (tenant, state), count in list(engine.state_counts.items()):
        if state is DeliveryState.PARKED:
            if tenant in labelled:
                parked.add((tenant,), count)
            else:
                parked_other += count
    if parked_other:
        parked.add((OTHER_TENANTS,), parked_other)


def _lag(engines: Sequence[EngineView], now: float) -> Samples:
    """Delivery lag per tenant with due work; unlabelled tenants share ``_other`` (their max)."""
    lag = Samples(
        "hookrouter_delivery_lag_seconds",
        "Age of the oldest delivery due (queued or in flight) per tenant; only tenants"
        " with due work have a series.",
        "gauge",
        ["tenant"],
    )
    for engine in engines:
        labelled = engine.labelled
        oldest = oldest_due(engine.queues, engine.in_flight_events())
        other_lag = 0.0  # the largest lag among unlabelled tenants
        for tenant, seconds in sorted(lag_seconds(oldest, now).items()):
            if tenant in labelled:
                lag.add((tenant,), seconds)
            else:
                other_lag = max(other_lag, seconds)
        if other_lag:
            lag.add((OTHER_TENANTS,), other_lag)
    return lag


REGISTRY.register(_Collector())

__all__ = ["LATENCY", "EngineView", "Tracked", "track", "untrack"]
