"""How bench tenants reads a ratio out of rounds on a host whose speed drifts."""

from __future__ import annotations

from typing import Any

import pytest
from bench.scenarios.tenants import _paired


def _router(rates: list[float | None]) -> dict[str, Any]:
    return {"runs": {"all": [{"eps": rate} for rate in rates]}}


def test_a_ratio_is_read_inside_each_round_not_across_them() -> None:
    # The host ran at full speed, then half, then half: the larger router kept
    # 0.9x of the small one's rate in the rounds it shared a speed with it.
    # Medians of each router's own runs read 90 against 50 (1.8x).
    base = _router([100.0, 50.0, 50.0])
    largest = _router([90.0, 90.0, 45.0])
    assert _paired(largest, base, "all", "eps") == pytest.approx(0.9)


def test_a_round_without_a_reading_is_left_out_not_counted_as_zero() -> None:
    base = _router([100.0, None, 80.0])
    largest = _router([90.0, 70.0, 72.0])
    assert _paired(largest, base, "all", "eps") == pytest.approx(0.9)
    assert _paired(largest, _router([None]), "all", "eps") is None
