"""Counters and histograms updated once per request or per delivery.

prometheus_client's ``Counter.inc`` and ``Histogram.observe`` are Python
methods that take a lock on every call, paid for every request and every
delivery (figures in docs/performance.md, "Metrics").
These keep plain numbers instead (this module is compiled with mypyc; an
``inc`` is a float addition) and hand a snapshot to prometheus_client when
``/metrics`` is scraped, so names, labels and the text format are
prometheus_client's own.

They are meant for the event-loop thread, which is the only writer on those
paths; a scrape from another thread reads numbers that may be one update
apart, which Prometheus tolerates (nothing is lost, it shows next time). A
counter does not expose prometheus_client's ``*_created`` series.

``/metrics`` writes these families' text itself (``expose``), in the format
``prometheus_client.generate_latest`` writes: with thousands of labelled
series, its per-sample label dicts, name checks and formatting held the
event loop many times longer than the same lines cost written here
(measured in docs/performance.md, "/metrics at 100,000 tenants").
``collect`` still hands prometheus_client the same samples, for
in-process readers; a test holds the two to the same lines.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import accumulate
from math import copysign
from typing import Generic, TypeVar

from mypy_extensions import mypyc_attr
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class CounterCell:
    """One label combination's count."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` (>= 0; not checked here, the callers count events)."""
        self.value += amount


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class HistogramCell:
    """One label combination's bucket counts (not cumulative) and sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is >= it (Prometheus ``le``)."""
        self.counts[bisect_left(self._bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[int]:
        """Observations at or under each bound, +Inf last (the total): Prometheus buckets."""
        return list(accumulate(self.counts))


Cell = TypeVar("Cell")


def _escaped(value: str) -> str:
    """A label value as the text format spells it (backslash, quote, newline escaped)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _pair(name: str, value: str) -> str:
    """One ``name="value"``, the value escaped."""
    return f'{name}="{_escaped(value)}"'


class Labels:
    """How one family's label sets are written: names in sorted order, found once."""

    __slots__ = ("_names", "_order")

    def __init__(self, names: Sequence[str]) -> None:
        self._names = list(names)
        self._order = sorted(range(len(self._names)), key=self._names.__getitem__)

    def text(self, values: Sequence[str]) -> str:
        """``{a="x",b="y"}``; nothing for a family without labels."""
        if not self._order:
            return ""
        names = self._names
        return "{" + ",".join([_pair(names[i], values[i]) for i in self._order]) + "}"

    def split_at(self, name: str, values: Sequence[str]) -> tuple[str, str]:
        """The text before ``name="`` and after its value's closing quote (a histogram's le)."""
        names = self._names
        head = ",".join([_pair(names[i], values[i]) for i in self._order if names[i] < name])
        tail = ",".join([_pair(names[i], values[i]) for i in self._order if names[i] > name])
        opening = "{" + head + ("," if head else "") + name + '="'
        closing = '"' + ("," if tail else "") + tail + "}"
        return opening, closing


def header(name: str, documentation: str, kind: str) -> str:
    """The ``# HELP`` and ``# TYPE`` lines of a family."""
    doc = documentation.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


class Samples:
    """One gauge or counter family's samples, as text (``expose``) or for prometheus_client.

    A collector that builds its series at scrape time fills one of these per
    family and serves both readers from it.
    """

    __slots__ = ("documentation", "kind", "labelnames", "name", "rows")

    def __init__(self, name: str, documentation: str, kind: str, labelnames: Sequence[str]) -> None:
        if kind not in ("gauge", "counter"):
            raise ValueError(f"{name}: a gauge or a counter, not {kind!r}")
        self.name = name
        self.documentation = documentation
        self.kind = kind
        self.labelnames = list(labelnames)
        self.rows: list[tuple[tuple[str, ...], float]] = []

    def add(self, values: Sequence[str], value: float) -> None:
        self.rows.append((tuple(values), value))

    def metric(self) -> Metric:
        family: CounterMetricFamily | GaugeMetricFamily
        if self.kind == "counter":
            family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        else:
            family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, value in self.rows:
            family.add_metric(list(values), value)
        return family

    def expose(self, out: list[str]) -> None:
        name = self.name + "_total" if self.kind == "counter" else self.name
        out.append(header(name, self.documentation, self.kind))
        labels = Labels(self.labelnames)
        for values, value in self.rows:
            out.append(f"{name}{labels.text(values)} {_number(value)}\n")


def _number(value: float) -> str:
    """A sample value as prometheus_client spells it (Go's float format).

    Most samples are counts: a whole number below the million, where Go's
    format and Python's agree, is written here without the general function.
    """
    number = float(value)
    if 0.0 <= number < 1e6 and number == int(number) and copysign(1.0, number) > 0:
        return f"{int(number)}.0"  # not -0.0, which both formats keep
    return str(floatToGoString(number))  # type: ignore[no-untyped-call]


class _Family(Generic[Cell]):
    """Name, help text, label names and the cells by label values."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self._cells: dict[tuple[str, ...], Cell] = {}
        if registry is not None:
            registry.register(self)  # type: ignore[arg-type]  # duck-typed Collector

    def labels(self, *values: str) -> Cell:
        """The cell for ``values`` (created on first use): one dict lookup after that."""
        cell = self._cells.get(values)
        if cell is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values!r}")
            cell = self._cells[values] = self._new_cell()
        return cell

    def peek(self, *values: str) -> Cell | None:
        """The cell for ``values`` if it exists (a reader that must not create series)."""
        return self._cells.get(values)

    def cells(self) -> list[tuple[tuple[str, ...], Cell]]:
        """(label values, cell) of every series, for in-process readers.

        A reader that only sums cells takes them here: ``collect`` builds a
        prometheus_client sample with a label dict per series, work a
        periodic reader over thousands of series need not do.
        """
        return list(self._cells.items())

    def remove(self, *values: str) -> None:
        """Drop the cell for ``values`` (its tenant was removed); absent is fine."""
        self._cells.pop(values, None)

    def _new_cell(self) -> Cell:
        raise NotImplementedError

    def _family(self) -> Metric:
        raise NotImplementedError

    def describe(self) -> list[Metric]:
        return [self._family()]


class LoopCounter(_Family[CounterCell]):
    """A labelled counter (exposed as ``<name>_total``)."""

    def _new_cell(self) -> CounterCell:
        return CounterCell()

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, cell in list(self._cells.items()):
            family.add_metric(list(values), cell.value)
        yield family

    def expose(self, out: list[str]) -> None:
        """The family in the text format (``hookrouter.metrics.render``)."""
        name = self.name + "_total"
        out.append(header(name, self.documentation, "counter"))
        labels = Labels(self.labelnames)
        for values, cell in list(self._cells.items()):
            out.append(f"{name}{labels.text(values)} {_number(cell.value)}\n")


class LoopHistogram(_Family[HistogramCell]):
    """A labelled histogram with fixed bucket bounds (``+Inf`` is implied)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"{name}: buckets must be increasing and distinct, got {buckets!r}")
        self.bounds = bounds
        super().__init__(name, documentation, labelnames, registry)

    def _new_cell(self) -> HistogramCell:
        return HistogramCell(self.bounds)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def _edges(self) -> list[str]:
        """The bucket bounds as prometheus_client spells them (1 -> "1.0"), and +Inf."""
        return [_number(b) for b in self.bounds] + ["+Inf"]

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        edges = self._edges()
        for values, cell in list(self._cells.items()):
            cumulative, total = cell.cumulative(), cell.sum
            buckets = [(edge, float(n)) for edge, n in zip(edges, cumulative, strict=True)]
            family.add_metric(list(values), buckets, total)
        yield family

    def expose(self, out: list[str]) -> None:
        """The family in the text format: each series' buckets, count and sum."""
        name = self.name
        out.append(header(name, self.documentation, "histogram"))
        labels = Labels(self.labelnames)
        edges = self._edges()
        for values, cell in list(self._cells.items()):
            cumulative, total = cell.cumulative(), cell.sum
            left, right = labels.split_at("le", values)  # once per series, not per bucket
            for edge, n in zip(edges, cumulative, strict=True):
                out.append(f"{name}_bucket{left}{edge}{right} {n}.0\n")
            text = labels.text(values)
            count = cumulative[-1]
            out.append(f"{name}_count{text} {count}.0\n{name}_sum{text} {_number(total)}\n")


__all__ = [
    "CounterCell",
    "HistogramCell",
    "Labels",
    "LoopCounter",
    "LoopHistogram",
    "Samples",
    "header",
]
