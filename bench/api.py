"""The plug-in interface: what a scenario is, what it gets, what it returns.

A scenario is a module ``bench/scenarios/<name>.py`` that defines a
module-level ``SCENARIO = Scenario(...)``. The harness imports every module
in that package, sorts the scenarios by ``order`` and runs the ones asked
for. A scenario's ``run(ctx)`` drives the systems with the helpers in
:mod:`bench.systems`, :mod:`bench.wrk`, :mod:`bench.openloop`,
:mod:`bench.signing` and :mod:`bench.procs`, and returns a :class:`Section`:
tables (medians of ``ctx.runs`` runs, with ratios to the references
measured in the same run), figures, target verdicts and raw data. The
harness writes the section into docs/benchmarks.md; it never formats
numbers for you beyond what :mod:`bench.stats` offers.

Minimal example (``bench/scenarios/hello.py``)::

    from bench.api import Context, Scenario, Section, Table

    def run(ctx: Context) -> Section:
        nginx = ctx.nginx()                      # started, stopped for you
        rs = ctx.request_set(10_000)             # fresh, pre-signed requests
        res = ctx.wrk(nginx.url, rs, connections=64, duration_s=ctx.seconds(10, 2))
        return Section(tables=[Table("nginx", ["req/s"], [[round(res.rps)]])])

    SCENARIO = Scenario(name="hello", title="Hello", order=90, run=run)
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import openloop, procs, signing, systems
from bench import wrk as wrk_mod
from bench.tools import Tools

# Secrets of the benchmark's sources and endpoints (never real ones).
STRIPE_SECRET = "whsec_bench_stripe_secret_0123456789abcdef"
STANDARD_SECRET = "whsec_" + "YmVuY2gtc3RhbmRhcmQtd2ViaG9va3Mtc2VjcmV0IQ=="  # base64 of 32 bytes


@dataclass(frozen=True)
class Scenario:
    """A benchmark scenario, registered by a module-level ``SCENARIO`` in bench/scenarios/."""

    name: str  # CLI name: ``python -m bench <name>``
    title: str  # section heading in docs/benchmarks.md, e.g. "1. Durable ingest"
    order: int  # position in ``all`` and in the report (10, 20, ...)
    run: Callable[[Context], Section]
    summary: str = ""  # one line for ``python -m bench list``
    needs: tuple[str, ...] = ("wrk",)  # tools resolved (and installed) before run()
    needs_router: bool = False  # skipped, with the reason, until ``hookrouter serve`` runs
    budget_s: tuple[int, int] = (60, 300)  # rough (quick, full) durations, for the progress bar
    in_all: bool = True  # False: run only when named (an hour-long soak, a 15 GB store)
    # Fewest runs per figure in a full run (``--runs`` still decides when given):
    # for figures whose run-to-run spread on this shared host outgrows three.
    min_runs: int = 1


@dataclass
class Table:
    """A Markdown table. Cells are strings or numbers (numbers are printed as given)."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    note: str = ""


@dataclass
class Figure:
    """A PNG under docs/img/ (``ctx.figure_path(name)``) and its caption."""

    path: Path
    caption: str


@dataclass
class Target:
    """One target of the issues, measured: goes into the summary at the top of the report."""

    name: str  # "durable ingest vs nginx"
    goal: str  # "≥ 0.30x"
    measured: str  # "0.41x"
    met: bool | None  # None = could not be measured
    note: str = ""


@dataclass
class Section:
    """What a scenario returns."""

    text: list[str] = field(default_factory=list)  # Markdown paragraphs, before the tables
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # Markdown paragraphs, after the tables
    data: dict[str, Any] = field(default_factory=dict)  # raw numbers, kept in the results JSON


class Context:
    """What a scenario gets: settings, a work directory, tools, helpers, progress and cleanup."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        quick: bool,
        runs: int,
        workdir: Path,
        img_dir: Path,
        tools: Tools,
        profile: bool = False,
        progress: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.scenario = scenario
        self.quick = quick
        self.runs = runs
        self.workdir = workdir
        self.img_dir = img_dir
        self.tools = tools
        self.profile = profile
        self._progress = progress
        self.cleanup = contextlib.ExitStack()
        self.log = workdir / "load.log"
        self.profiles: list[Path] = []

    # -- settings --------------------------------------------------------------
    def seconds(self, full: float, quick: float) -> float:
        """A duration: ``full`` normally, ``quick`` under --quick."""
        return quick if self.quick else full

    def step(self, message: str) -> None:
        """Show what is happening now in the progress display."""
        self._progress(message)

    def path(self, name: str) -> Path:
        """A fresh sub-directory of the work directory."""
        p = self.workdir / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    def figure_path(self, name: str) -> Path:
        """Where to save a figure: docs/img/<scenario>-<name>.png (quick runs elsewhere)."""
        self.img_dir.mkdir(parents=True, exist_ok=True)
        return self.img_dir / f"{self.scenario.name}-{name}.png"

    # -- systems (each stopped when the scenario ends) --------------------------
    def nginx(self, workers: int = 1) -> systems.System:
        s = systems.start_nginx(
            self.tools.require("nginx"), self.path(f"nginx-{_tag()}"), workers=workers
        )
        self.cleanup.callback(s.stop)
        return s

    def sink(self) -> Any:
        """An nginx delivery sink (``.url``, ``.access_log``, ``.stop()``)."""
        s = systems.start_sink(self.tools.require("nginx"), self.path(f"sink-{_tag()}"))
        self.cleanup.callback(s.stop)
        return s

    def redis(self) -> procs.Service:
        s = systems.start_redis(self.tools.require("redis-server"), self.path(f"redis-{_tag()}"))
        self.cleanup.callback(s.stop)
        return s

    def typical(self, **kwargs: Any) -> systems.System:
        """The typical stack with its own redis; kwargs as :func:`bench.systems.start_typical`."""
        s = systems.start_typical(self.path(f"typical-{_tag()}"), self.redis(), **kwargs)
        self.cleanup.callback(s.stop)
        return s

    def router(self, config: dict[str, Any], **kwargs: Any) -> systems.System:
        """hookrouter with ``config`` (listen/store/admin filled in); see start_router."""
        s = systems.start_router(self.path(f"router-{_tag()}"), config, **kwargs)
        self.cleanup.callback(s.stop)
        return s

    def start(self, name: str, argv: Sequence[str], port: int | None = None) -> procs.Service:
        """Any other helper process, logged and stopped with the scenario."""
        s = procs.start(
            name, argv, self.path(f"{name}-{_tag()}") / "out.log", port=port, cwd=systems.REPO
        )
        self.cleanup.callback(s.stop)
        return s

    # -- load -------------------------------------------------------------------
    def request_set(
        self, count: int, streams: Sequence[signing.Stream] | None = None, **kwargs: Any
    ) -> signing.RequestSet:
        """A fresh pre-signed request set (default: one Stripe source ``bench-stripe``)."""
        streams = streams or [signing.Stream("bench-stripe", "stripe", STRIPE_SECRET)]
        return signing.generate(self.path(f"set-{_tag()}"), streams, max(1, int(count)), **kwargs)

    def wrk(self, url: str, request_set: signing.RequestSet, **kwargs: Any) -> wrk_mod.LoadResult:
        """Closed-loop load (see :func:`bench.wrk.run`)."""
        return wrk_mod.run(self.tools.require("wrk"), url, request_set, log=self.log, **kwargs)

    def open_loop(
        self, url: str, request_set: signing.RequestSet, **kwargs: Any
    ) -> wrk_mod.LoadResult:
        """Fixed-rate load (see :func:`bench.openloop.run`)."""
        return openloop.run(url, request_set, log=self.log, **kwargs)

    def profiler(
        self, system: systems.System, label: str
    ) -> contextlib.AbstractContextManager[Any]:
        """A py-spy flame graph of ``system`` over the block, when --profile is on."""
        if not self.profile:
            return contextlib.nullcontext()
        out = self.img_dir / f"{self.scenario.name}-{label}-flame.svg"
        self.profiles.append(out)
        return procs.py_spy(self.tools.optional("py-spy", install=True), system.service.pid, out)

    def profile_tables(self) -> list[Table]:
        """Tables summarising the py-spy profiles recorded so far (empty without --profile)."""
        from bench.profile import summarise

        tables = []
        for svg in self.profiles:
            areas, leaves, total = summarise(svg.with_suffix(".raw.txt"))
            if not total:
                continue
            tables.append(
                Table(
                    f"Where the router's CPU went ({svg.name}, {total:,} py-spy samples)",
                    ["area of the code (innermost frame)", "share of samples"],
                    areas,
                    f"Flame graph: `docs/img/{svg.name}` (or next to this report). Shares of "
                    "CPU-active samples over all the router's threads.",
                )
            )
            tables.append(Table("Functions with the most self time", ["function", "share"], leaves))
        return tables


def _tag() -> str:
    return secrets.token_hex(3)
