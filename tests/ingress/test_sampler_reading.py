"""The console sampler reads the ingest counter's cells: the same figures as ``/metrics``."""

from __future__ import annotations

import asyncio

from hookrouter.clock import SYSTEM_CLOCK
from hookrouter.console.sampler import Sampler, ingest_totals, received_by_source
from hookrouter.ingress.ingest_metrics import INGEST_REQUESTS, IngestMetrics

RECEIVED = ("accepted", "duplicate")


def exposed() -> tuple[float, dict[str, float], dict[str, float]]:
    """Received total, refusals by reason, received by source, as a scrape shows them."""
    received, refused, by_source = 0.0, {}, {}
    for family in INGEST_REQUESTS.collect():
        for sample in family.samples:
            source, result = sample.labels["source"], sample.labels["result"]
            if result in RECEIVED:
                received += sample.value
                by_source[source] = by_source.get(source, 0.0) + sample.value
            else:
                refused[result] = refused.get(result, 0.0) + sample.value
    return received, refused, by_source


async def no_delivery() -> dict[str, int]:
    return {}


def test_the_sampler_reads_what_a_scrape_exposes() -> None:
    metrics = IngestMetrics()
    for i in range(300):
        metrics.accepted(f"reading-{i}", duplicate=i % 7 == 0)
        if i % 5 == 0:
            metrics.rejected(f"reading-{i}", "bad_signature")
    metrics.accepted("reading-1", duplicate=False)
    metrics.rejected("reading-2", "backlog_full")

    received, refused, by_source = exposed()
    assert ingest_totals() == (received, refused)
    assert received_by_source() == by_source
    assert by_source["reading-1"] == 2.0 and by_source["reading-7"] == 1.0
    assert refused["bad_signature"] >= 60 and refused["backlog_full"] >= 1

    sampler = Sampler(SYSTEM_CLOCK, no_delivery)
    reading = asyncio.run(sampler.sample())
    assert (reading.received, reading.refused) == (received, refused)
    assert set(sampler.last_received) == {s for s, total in by_source.items() if total > 0}
