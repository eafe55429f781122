"""Shedding on slow commits: only senders that retry get 503; the measure forgets itself."""

from __future__ import annotations

import orjson

from hookrouter.clock import ManualClock
from hookrouter.config.catalog import Catalog
from hookrouter.config.entities import SourceConfig, TenantConfig
from hookrouter.ingress.admission import PRESSURE_SHED, BacklogAdmission
from hookrouter.ingress.handler import CommitLatency, Refusal


def sources() -> Catalog:
    return Catalog(
        [TenantConfig("acme")],
        [
            SourceConfig("acme-stripe", "acme", "stripe", ("whsec_x",)),
            SourceConfig("acme-gh", "acme", "github", ("s3cret",)),
        ],
        [],
    )


def admission(latency_ms: float, clock: ManualClock) -> BacklogAdmission:
    return BacklogAdmission(
        lambda tenant: 0,
        clock,
        commit_latency_ms=lambda now: latency_ms,
        max_commit_latency_ms=1000.0,
    )


def test_slow_store_sheds_a_retrying_sender_with_503_and_retry_after() -> None:
    clock = ManualClock()
    live = sources().sources["acme-stripe"]
    before = PRESSURE_SHED.labels("acme", "acme-stripe")._value.get()
    answer = admission(1500.0, clock).check(live)
    assert isinstance(answer, Refusal)
    assert answer.reason == "store_slow"
    assert answer.response.status == 503
    assert dict(answer.response.headers)["retry-after"] == "5"
    assert orjson.loads(answer.response.body)["error"] == "store_slow"
    assert PRESSURE_SHED.labels("acme", "acme-stripe")._value.get() == before + 1


def test_slow_store_still_accepts_a_sender_that_never_retries() -> None:
    clock = ManualClock()
    assert admission(1500.0, clock).check(sources().sources["acme-gh"]) is None


def test_healthy_store_accepts_everyone() -> None:
    clock = ManualClock()
    assert admission(3.0, clock).check(sources().sources["acme-stripe"]) is None


def test_commit_latency_smooths_and_forgets_when_commits_stop() -> None:
    latency = CommitLatency()
    for i in range(100):
        latency.observe(2.0, now=float(i) * 0.01)  # commits taking 2 s each
    assert latency.current_ms(1.0) > 1000.0
    one_spike = CommitLatency()
    for i in range(100):
        one_spike.observe(0.002, now=float(i) * 0.01)
    one_spike.observe(1.5, now=1.0)  # a single slow fsync
    assert one_spike.current_ms(1.0) < 1000.0
    # Nothing committed for longer than STALE_AFTER: no evidence of slowness left.
    assert latency.current_ms(1.0 + CommitLatency.STALE_AFTER + 0.1) == 0.0
