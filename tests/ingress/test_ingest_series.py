"""Ingest series stay bounded however many sources exist (issue 38)."""

from __future__ import annotations

from hookrouter.ingress.ingest_metrics import INGEST_REQUESTS, OTHER_SOURCES, IngestMetrics


def count(source: str, result: str) -> float:
    return INGEST_REQUESTS.labels(source, result).value


def test_sources_beyond_the_limit_share_one_series() -> None:
    metrics = IngestMetrics(series_limit=2)
    other_before = count(OTHER_SOURCES, "accepted")
    for source in ("series-a", "series-b", "series-c", "series-d", "series-a"):
        metrics.accepted(source, duplicate=False)
    metrics.rejected("series-c", "bad_signature")
    assert count("series-a", "accepted") >= 2, "the first sources keep their own series"
    assert metrics.labelled == {"series-a", "series-b"}
    assert count(OTHER_SOURCES, "accepted") - other_before == 2
    assert ("series-c", "accepted") not in INGEST_REQUESTS._cells
    assert count(OTHER_SOURCES, "bad_signature") >= 1
