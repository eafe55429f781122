"""Loop metrics must expose exactly what prometheus_client's own types would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import Metric

from hookrouter.loop_metrics import LoopCounter, LoopHistogram, Samples

BUCKETS = (0.005, 0.01, 0.1, 1, 30)
SAMPLES = (0.0, 0.005, 0.0051, 0.01, 0.5, 1.0, 29.9, 30.0, 31.0, 4000.0)


def _text(registry: CollectorRegistry) -> list[str]:
    """Exposition lines without prometheus_client's *_created series."""
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


def test_histogram_exposition_matches_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopHistogram("lat_seconds", "Latency.", ["tenant"], BUCKETS, registry=ours)
    ref = Histogram("lat_seconds", "Latency.", ["tenant"], buckets=BUCKETS, registry=theirs)
    for i, value in enumerate(SAMPLES):
        tenant = "a" if i % 3 else "b"
        mine.labels(tenant).observe(value)
        ref.labels(tenant).observe(value)
    assert _text(ours) == _text(theirs)
    assert 'lat_seconds_bucket{le="0.005",tenant="a"}' in "\n".join(_text(ours))


def test_counter_exposition_matches_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopCounter("reqs", "Requests.", ["source", "result"], registry=ours)
    ref = Counter("reqs", "Requests.", ["source", "result"], registry=theirs)
    for source, result, times in (
        ("s1", "accepted", 3),
        ("s1", "bad_signature", 1),
        ("s2", "x", 2),
    ):
        for _ in range(times):
            mine.labels(source, result).inc()
            ref.labels(source, result).inc()
    assert _text(ours) == _text(theirs)
    assert 'reqs_total{result="accepted",source="s1"} 3.0' in _text(ours)


def test_wrong_label_count_and_bad_buckets_are_refused() -> None:
    counter = LoopCounter("c", "C.", ["a", "b"])
    with pytest.raises(ValueError, match="takes labels"):
        counter.labels("only-one")
    with pytest.raises(ValueError, match="increasing"):
        LoopHistogram("h", "H.", [], (1.0, 0.5))


def test_a_name_registered_twice_is_refused_like_prometheus_client_does() -> None:
    registry = CollectorRegistry(auto_describe=True)
    LoopCounter("dup", "D.", [], registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Counter("dup", "D.", registry=registry)


# Label values a tenant or endpoint id could hold: quotes, backslashes, newlines, UTF-8.
AWKWARD = ("plain", 'say "hi"', "back\\slash", "two\nlines", "ünïcödé", "_other")


def _written(*families: LoopCounter | LoopHistogram | Samples) -> list[str]:
    out: list[str] = []
    for family in families:
        family.expose(out)
    return "".join(out).splitlines()


class _Serves:
    """A scrape-time collector handing prometheus_client one ``Samples`` family."""

    def __init__(self, samples: Samples) -> None:
        self.samples = samples

    def collect(self) -> Iterator[Metric]:
        yield self.samples.metric()


def test_the_text_written_by_hand_is_what_generate_latest_writes() -> None:
    """``/metrics`` writes these families itself: byte for byte prometheus_client's lines."""
    ours = CollectorRegistry()
    histogram = LoopHistogram("lat_seconds", "Latency.\nIn \\ seconds.", ["tenant"], BUCKETS,
                              registry=ours)  # fmt: skip
    counter = LoopCounter("reqs", "Requests.", ["source", "result"], registry=ours)
    around = LoopHistogram("size_bytes", "Sizes.", ["app", "zone"], BUCKETS, registry=ours)
    gauge = Samples("depth", "Queued.", "gauge", ["tenant", "endpoint"])
    total = Samples("failures", "Failed writes.", "counter", [])
    ours.register(_Serves(gauge))  # type: ignore[arg-type]
    ours.register(_Serves(total))  # type: ignore[arg-type]
    for i, value in enumerate(SAMPLES * 3):
        name = AWKWARD[i % len(AWKWARD)]
        histogram.labels(name).observe(value * 1.1)
        counter.labels(name, "accepted").inc(value)
        around.labels(name, AWKWARD[-1 - i % len(AWKWARD)]).observe(value)  # "le" in between
    for i, name in enumerate(AWKWARD):
        gauge.add((name, AWKWARD[-1 - i]), i * 1e7)
    for value in (0, 0.0, -0.0, 999_999, 1e6, 0.25, -3.0, float("inf"), float("nan")):
        gauge.add((f"v{value}", "x"), value)
    total.add((), 1e21)
    assert _written(histogram, counter, around, gauge, total) == _text(ours)
    assert 'reqs_total{result="accepted",source="say \\"hi\\""}' in "\n".join(_text(ours))
