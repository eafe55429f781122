"""The few statistics the report needs: percentiles, medians of runs, ratios.

Percentiles use the "nearest rank" definition (the smallest sample with at
least p % of samples at or below it), as HdrHistogram and wrk report them:
a p99 is always a latency some request really had, never an interpolation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(samples: Iterable[float], p: float) -> float:
    """Nearest-rank ``p``-th percentile (0 < p <= 100) of ``samples``."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile out of range: {p}")
    result = percentiles(samples, (p,))
    if not result:
        raise ValueError("percentile of no samples")
    return result[f"p{p:g}"]


def percentiles(samples: Iterable[float], ps: Iterable[float]) -> dict[str, float]:
    """``{"p50": ..., "p99": ...}`` for each ``p`` in ``ps`` (one sort; {} for no samples)."""
    data = sorted(float(x) for x in samples)
    if not data:
        return {}
    out = {}
    for p in ps:
        rank = math.ceil(p / 100.0 * len(data))
        out[f"p{p:g}"] = data[min(len(data), max(rank, 1)) - 1]
    return out


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not None (None when there are none)."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return None
    mid = len(data) // 2
    return float(data[mid]) if len(data) % 2 else (data[mid - 1] + data[mid]) / 2.0


def spread(values: Iterable[float | None]) -> tuple[float, float] | None:
    """(min, max) of the non-None values, to show how noisy the runs were."""
    data = [v for v in values if v is not None]
    return (min(data), max(data)) if data else None


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, None when either is missing or the reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return value / reference


def fmt(value: float | None, digits: int = 0, unit: str = "") -> str:
    """A table cell: thousands separators, fixed digits, "n/a" for None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".rstrip() if unit else text


def fmt_ratio(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}x"
