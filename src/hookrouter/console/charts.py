"""Sparklines as SVG drawn on the server.

A chart of the last hour is a polyline of at most a few hundred points: the
server computes them and the template writes one ``<svg>`` element. No chart
library to vendor, audit or keep current, nothing for the CSP to allow, and
the chart is there without JavaScript and in a screenshot.
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH = 240
HEIGHT = 40


@dataclass(frozen=True, slots=True)
class Sparkline:
    points: str  # the polyline's "x,y x,y ..." in a WIDTH x HEIGHT box
    last: float  # the newest value (per second)
    peak: float
    width: int = WIDTH
    height: int = HEIGHT


def sparkline(values: list[float], width: int = WIDTH, height: int = HEIGHT) -> Sparkline:
    """``values`` (oldest first) scaled into the box; flat at the bottom when all zero."""
    if not values:
        return Sparkline("", 0.0, 0.0, width, height)
    peak = max(values)
    step = width / max(1, len(values) - 1)
    scale = (height - 2) / peak if peak > 0 else 0.0
    points = " ".join(f"{i * step:.1f},{height - 1 - v * scale:.1f}" for i, v in enumerate(values))
    return Sparkline(points, values[-1], peak, width, height)


__all__ = ["HEIGHT", "WIDTH", "Sparkline", "sparkline"]
