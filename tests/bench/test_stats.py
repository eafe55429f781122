"""Percentiles, medians and ratios as the report uses them."""

from __future__ import annotations

import pytest

from bench import stats


def test_nearest_rank_percentiles_are_real_samples() -> None:
    samples = list(range(1, 101))  # 1..100
    assert stats.percentile(samples, 50) == 50
    assert stats.percentile(samples, 99) == 99
    assert stats.percentile(samples, 99.9) == 100
    assert stats.percentile(samples, 100) == 100
    assert stats.percentiles([5.0, 1.0, 3.0], (50, 99)) == {"p50": 3.0, "p99": 5.0}
    assert stats.percentiles([], (50,)) == {}


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        stats.percentile([], 50)
    with pytest.raises(ValueError):
        stats.percentile([1.0], 0)


def test_median_of_runs_ignores_missing_values() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert stats.median([None, 7.0]) == 7.0
    assert stats.median([None]) is None
    assert stats.spread([2.0, None, 5.0]) == (2.0, 5.0)


def test_ratio_and_formatting() -> None:
    assert stats.ratio(30.0, 100.0) == pytest.approx(0.3)
    assert stats.ratio(1.0, 0.0) is None
    assert stats.ratio(None, 1.0) is None
    assert stats.fmt(12345.678, 1) == "12,345.7"
    assert stats.fmt(None) == "n/a"
    assert stats.fmt_ratio(0.3) == "0.30x"
    assert stats.fmt_ratio(None) == "n/a"
