"""``python -m bench``: run benchmark scenarios and write docs/benchmarks.md.

    python -m bench list                    # scenarios and slots
    python -m bench all [--quick]           # every scenario, then the report
    python -m bench ingest e2e [--quick]    # some scenarios (their sections are refreshed)
    python -m bench report                  # rebuild the report from saved results

Full runs write docs/benchmarks.md, docs/img/*.png and bench/results/*.json.
``--quick`` (one short run per figure, for smoke checks) writes under
bench/out/quick/ instead, so smoke numbers never land in the docs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from bench import machine, report
from bench.api import Context, Scenario
from bench.scenarios import discover
from bench.systems import REPO, router_available
from bench.tools import ToolError, Tools


def _paths(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    """(report file, image dir, results dir) for this mode."""
    if args.out:
        out = Path(args.out).resolve()
        return out, out.parent / "img", out.parent / "results"
    if args.quick:
        base = REPO / "bench" / "out" / "quick"
        return base / "benchmarks.md", base / "img", base / "results"
    return REPO / "docs" / "benchmarks.md", REPO / "docs" / "img", REPO / "bench" / "results"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("what", nargs="+", help="'all', 'list', 'report' or scenario names")
    ap.add_argument("--quick", action="store_true", help="short smoke runs (1 run per figure)")
    ap.add_argument("--runs", type=int, help="runs per figure (default 3; 1 with --quick)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="record py-spy flame graphs of the router (installs py-spy if missing)",
    )
    ap.add_argument("--out", help="report path (default docs/benchmarks.md)")
    ap.add_argument("--keep", action="store_true", help="keep the temp work directory")
    ap.add_argument("--no-report", action="store_true", help="run, save results, skip Markdown")
    return ap


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Stop cleanly (servers stopped, work directory kept) on SIGTERM too, and on
    # SIGINT even when started in the background, where the shell ignores SIGINT.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    console = Console(stderr=True)
    scenarios, broken = discover()
    for name, err in broken.items():
        console.print(f"[yellow]scenario module {name} failed to import:[/]\n{err}")
    by_name = {s.name: s for s in scenarios}
    out_path, img_dir, results_dir = _paths(args)
    if args.what == ["list"]:
        for s in scenarios:
            when = "" if s.in_all else " (on demand: not in `all`)"
            console.print(f"{s.name:12} {s.title} — {s.summary}{when}")
        for name, (title, _, where) in report.KNOWN_SLOTS.items():
            if name not in by_name:
                console.print(f"{name:12} {title} — slot: {where}")
        return 0
    tools = Tools()
    if args.what == ["report"]:
        _write_report(tools, out_path, results_dir, scenarios, console)
        return 0
    chosen = [s for s in scenarios if s.in_all] if args.what == ["all"] else []
    for name in [] if args.what == ["all"] else args.what:
        if name not in by_name:
            console.print(f"[red]unknown scenario {name!r}; try `python -m bench list`[/]")
            return 2
        chosen.append(by_name[name])
    runs = args.runs or (1 if args.quick else 3)
    # Described before the run: the checkout as measured (the run itself rewrites
    # the results and the report) and the load average at the start.
    info = machine.describe(tools, REPO)
    failures = _run_all(chosen, args, runs, tools, img_dir, results_dir, console)
    if not args.no_report:
        _write_report(tools, out_path, results_dir, scenarios, console, info)
    return 1 if failures else 0


def _write_report(
    tools: Tools,
    out_path: Path,
    results_dir: Path,
    scenarios: list[Scenario],
    console: Console,
    info: dict[str, Any] | None = None,
) -> None:
    results = report.load_all(results_dir)
    info = info or machine.describe(tools, REPO)
    info["installed"] = list(tools.installed)
    report.write(out_path, report.render(results, info, out_path, scenarios))
    console.print(f"report: {out_path}")


def _run_all(
    chosen: list[Scenario],
    args: argparse.Namespace,
    runs: int,
    tools: Tools,
    img_dir: Path,
    results_dir: Path,
    console: Console,
) -> int:
    router_ok, router_reason = router_available()
    failures = 0
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        budgets = [s.budget_s[0 if args.quick else 1] for s in chosen]
        overall = progress.add_task("[bold]all scenarios", total=sum(budgets) or 1)
        done_budget = 0
        for scenario, budget in zip(chosen, budgets, strict=True):
            task = progress.add_task(f"{scenario.name}: starting", total=budget)
            payload = _run_one(
                scenario,
                args,
                runs if args.quick or args.runs else max(runs, scenario.min_runs),
                tools,
                img_dir,
                progress,
                task,
                overall,
                done_budget,
                budget,
                router_ok,
                router_reason,
            )
            done_budget += budget
            progress.update(
                task, completed=budget, description=f"{scenario.name}: {payload['status']}"
            )
            progress.update(overall, completed=done_budget)
            report.save(results_dir, scenario, payload)
            if payload["status"] == "failed":
                failures += 1
                console.print(f"[red]{scenario.name} failed:[/] {payload['reason']}")
    return failures


def _run_one(
    scenario: Scenario,
    args: argparse.Namespace,
    runs: int,
    tools: Tools,
    img_dir: Path,
    progress: Progress,
    task: Any,
    overall: Any,
    done_budget: float,
    budget: float,
    router_ok: bool,
    router_reason: str,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "scenario": scenario.name,
        "title": scenario.title,
        "order": scenario.order,
        "quick": args.quick,
        "load_average": round(os.getloadavg()[0], 2),
        "host_speed_ms": machine.host_speed_ms(),
        # Per result: the report is rendered elsewhere and later, and its
        # sections come from runs on different hosts and commits.
        "host": machine.host_label(),
        "commit": machine.checkout(REPO),
        "runs": runs,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if scenario.needs_router and not router_ok:
        return {**payload, "status": "skipped", "reason": router_reason, "duration_s": 0}
    workdir = Path(tempfile.mkdtemp(prefix=f"hookbench-{scenario.name}-"))
    t0 = time.monotonic()
    stop = threading.Event()

    def tick() -> None:  # move the bars with elapsed time; steps only change the text
        while not stop.wait(0.5):
            elapsed = min(time.monotonic() - t0, budget * 0.97)
            progress.update(task, completed=elapsed)
            progress.update(overall, completed=done_budget + elapsed)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    ctx = Context(
        scenario,
        quick=args.quick,
        runs=runs,
        workdir=workdir,
        img_dir=img_dir,
        tools=tools,
        profile=args.profile,
        progress=lambda msg: progress.update(task, description=f"{scenario.name}: {msg}"),
    )
    try:
        for tool in scenario.needs:
            ctx.step(f"finding {tool}")
            tools.require(tool)
        with ctx.cleanup:
            section = scenario.run(ctx)
        payload.update(status="ok", section=report.section_to_json(section))
    except (Exception, KeyboardInterrupt) as exc:
        payload.update(
            status="failed",
            reason=f"{type(exc).__name__}: {exc}"[:2000],
            traceback=traceback.format_exc(limit=8),
        )
        if isinstance(exc, ToolError | KeyboardInterrupt):
            payload["status"] = "skipped" if isinstance(exc, ToolError) else "failed"
        if isinstance(exc, KeyboardInterrupt):
            stop.set()
            raise
    finally:
        stop.set()
        ticker.join(2)
        payload["duration_s"] = time.monotonic() - t0
        payload["host_speed_end_ms"] = machine.host_speed_ms()
        payload["profiles"] = [str(p) for p in ctx.profiles if p.exists()]
        if args.keep or payload.get("status") == "failed":
            payload["workdir"] = str(workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return payload


if __name__ == "__main__":
    sys.exit(main())
