"""Rate-limit metrics on ``hookrouter.metrics.REGISTRY``.

Counters are not incremented per decision: a labelled prometheus-client
``inc()`` costs about as much as a leased decision itself, so each
limiter keeps plain integer counters and one collector sums the live limiters
at scrape time. A closed limiter's totals are folded into ``_retired`` so the
counters never go backwards. The Redis latency histogram is observed once per
round trip (a batch), not per decision.

Series:

* ``hookrouter_ratelimit_decisions_total{tenant, result}``: result is
  ``allowed``, ``denied``, ``policy_allowed`` or ``policy_denied`` (decided by
  ``on_redis_error`` because Redis could not answer);
* ``hookrouter_ratelimit_errors_total{reason}``: decisions that fell back to the
  policy, by reason (``timeout``, ``unavailable``, ``redis_down``, ``response``);
* ``hookrouter_ratelimit_redis_calls_total``: round trips to Redis;
* ``hookrouter_ratelimit_redis_commands_total``: script/function calls inside them;
* ``hookrouter_ratelimit_lease_refills_total``, ``..._leased_tokens_total``;
* ``hookrouter_ratelimit_redis_seconds``: round-trip latency histogram.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, Metric

from hookrouter.metrics import REGISTRY

Sample = tuple[str, tuple[str, ...], float]


class Reporting(Protocol):
    def metric_samples(self) -> Iterable[Sample]:
        """``(family, label values, value)`` of every counter this limiter keeps."""
        ...


FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "decisions": ("Rate-limit decisions by tenant and result.", ("tenant", "result")),
    "errors": ("Decisions answered by on_redis_error, by reason.", ("reason",)),
    "redis_calls": ("Round trips to Redis made by rate limiters.", ()),
    "redis_commands": ("Token-bucket script/function calls sent to Redis.", ()),
    "lease_refills": ("Lease requests answered by Redis.", ()),
    "leased_tokens": ("Tokens taken from Redis by leases.", ()),
    "lease_waits": (
        "Decisions that found the leased supply empty and waited for a refill "
        "(many: raise lease or low_water).",
        (),
    ),
}

_live: weakref.WeakSet[Reporting] = weakref.WeakSet()
_retired: defaultdict[tuple[str, tuple[str, ...]], float] = defaultdict(float)
_lock = threading.Lock()

REDIS_SECONDS = Histogram(
    "hookrouter_ratelimit_redis_seconds",
    "Latency of one rate-limit round trip to Redis (a batch of decisions).",
    # 100 µs (loopback) to 100 ms (far beyond any sane decision timeout).
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
    registry=REGISTRY,
)


def track(limiter: Reporting) -> None:
    """Include ``limiter``'s counters in scrapes until :func:`retire`."""
    with _lock:
        _live.add(limiter)


def retire(limiter: Reporting) -> None:
    """Fold ``limiter``'s final counts into the retired totals (idempotent)."""
    with _lock:
        if limiter in _live:
            _live.discard(limiter)
            for family, labels, value in limiter.metric_samples():
                _retired[(family, labels)] += value


def totals() -> defaultdict[tuple[str, tuple[str, ...]], float]:
    """Current value of every counter series, summed over live and retired limiters."""
    with _lock:
        total = defaultdict(float, _retired)
        for limiter in list(_live):
            for family, labels, value in limiter.metric_samples():
                total[(family, labels)] += value
    return total


class _Collector:
    def collect(self) -> Iterator[Metric]:
        values = totals()
        for family, (doc, label_names) in FAMILIES.items():
            metric = CounterMetricFamily(f"hookrouter_ratelimit_{family}", doc, labels=label_names)
            for (name, labels), value in sorted(values.items()):
                if name == family:
                    metric.add_metric(list(labels), value)
            yield metric


REGISTRY.register(_Collector())
