"""matplotlib figures for the report (PNG, headless Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"nginx": "#2b8a3e", "typical": "#c92a2a", "router": "#1864ab"}
# The same colours under the labels the tables use.
COLORS.update(
    {
        "nginx return 200": COLORS["nginx"],
        "typical stack": COLORS["typical"],
        "hookrouter": COLORS["router"],
    }
)
_DPI = 110


def _color(name: str, i: int) -> str:
    return COLORS.get(name, f"C{i}")


def throughput_latency(
    series: Mapping[str, Sequence[tuple[float, float]]],
    path: Path,
    *,
    title: str,
    labels: Mapping[str, str] | None = None,
    points: Mapping[str, Sequence[tuple[float, float, str]]] | None = None,
    ylabel: str = "p99 latency (ms, log scale)",
) -> Path:
    """Per system: a line through (throughput, p99) at increasing offered load (``series``,
    kept in the given order), plus separate labelled markers (``points``: x, y, label)
    for closed-loop runs, which are not points on the same curve."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (name, pts) in enumerate(series.items()):
        color = _color(name, i)
        good = [p for p in pts if p[0] > 0 and p[1] > 0]
        if good:
            xs, ys = zip(*good, strict=True)
            ax.plot(xs, ys, marker="o", label=(labels or {}).get(name, name), color=color)
        for x, y, text in (points or {}).get(name, ()):
            if x > 0 and y > 0:
                ax.scatter([x], [y], marker="s", color=color, zorder=3)
                ax.annotate(
                    text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("throughput (requests/s, log scale)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def stacked(
    panels: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    path: Path,
    *,
    title: str,
    xlabel: str,
    marks: Sequence[tuple[float, str]] = (),
) -> Path:
    """One panel per (y label, xs, ys), sharing the x axis, with vertical marks."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.4 * len(panels) + 0.8), sharex=True)
    axes_list = list(axes) if len(panels) > 1 else [axes]
    for i, (ax, (ylabel, xs, ys)) in enumerate(zip(axes_list, panels, strict=True)):
        ax.plot(list(xs), list(ys), color=f"C{i}", lw=1.2)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        for k, (x, _label) in enumerate(marks):
            ax.axvline(x, color="grey", ls="--" if k % 2 == 0 else ":", lw=0.9)
    for k, (x, label) in enumerate(marks):
        axes_list[0].annotate(
            label,
            (x, 1.0 - 0.14 * (k % 3)),
            xycoords=("data", "axes fraction"),
            va="top",
            ha="right",
            fontsize=8,
            color="grey",
            xytext=(-3, 0),
            textcoords="offset points",
        )
    axes_list[0].set_title(title)
    axes_list[-1].set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def timelines(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    path: Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    marks: Sequence[tuple[float, str]] = (),
    logy: bool = False,
) -> Path:
    """Lines of (x values, y values) by name, with optional vertical marks (x, label)."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (name, (xs, ys)) in enumerate(series.items()):
        style = "--" if "fault" in name and "no fault" not in name else "-"
        ax.plot(list(xs), list(ys), label=name, color=COLORS.get(name, f"C{i}"), lw=1.2, ls=style)
    for x, label in marks:
        ax.axvline(x, color="grey", ls="--", lw=0.8)
        ax.annotate(
            label,
            (x, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
            color="grey",
        )
    if logy:
        ax.set_yscale("log")
    return _labelled_and_saved(fig, ax, path, xlabel, ylabel, title)


def bars(
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    path: Path,
    *,
    title: str,
    ylabel: str,
) -> Path:
    """Grouped bars: one group per entry of ``groups``, one bar per series."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + i * width for g in range(len(groups))]
        ax.bar(xs, list(values), width, label=name, color=_color(name.split()[0], i))
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path


def versus_count(
    counts: Sequence[int],
    series: Mapping[str, Sequence[float]],
    path: Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    floor: float | None = None,
    ratios: Mapping[str, Sequence[float]] | None = None,
) -> Path:
    """Lines of a rate against a count (log x), each point labelled with its ratio to the
    first (or the series' entry in ``ratios``, when the caller paired its runs);
    ``floor``: a dotted line per series at that fraction of its first value."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (name, values) in enumerate(series.items()):
        color = _color(name, i)
        ax.plot(list(counts), list(values), marker="o", label=name, color=color, lw=1.4)
        first = values[0] if values else 0.0
        if first:
            labels = ratios[name] if ratios else [y / first for y in values]
            for x, y, ratio in zip(counts, values, labels, strict=True):
                ax.annotate(
                    f"{ratio:.2f}x",
                    (x, y),
                    textcoords="offset points",
                    xytext=(0, 6),
                    ha="center",
                    fontsize=8,
                    color=color,
                )
            if floor is not None:
                ax.axhline(first * floor, color=color, ls=":", lw=0.9)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    return _labelled_and_saved(fig, ax, path, xlabel, ylabel, title)


def _labelled_and_saved(
    fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str
) -> Path:
    """Label a one-axes line chart, add its grid and legend, and write it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    return path
