"""Same-run A/B of the router at another commit: ``python -m bench.ab --against REV``.

On the shared 2-core bench host the same build's figures move from round to
round and more between runs an hour apart (docs/performance.md, "Running the
benchmarks"), so a change is judged only
against a baseline measured in the same run. This builds ``REV`` the way a
release is built (``pip wheel``: the mypyc modules and the C engine
compiled), unpacks the wheel and starts one router per tree, each with its
own store and Redis (and, with ``--deliver``, its own nginx sink). Rounds
then alternate the trees (A B, B A, ...) under the same closed-loop load:
Stripe-signed ingest, a fresh request set per round so every provider id is
new. Both stores grow alike, so store-size effects hit both trees.

Printed per round and as medians of the per-round ratios (this tree / REV):
2xx per second and router CPU µs per event (all the router's threads; with
``--deliver`` per delivered event, the drain included). Nothing is written
to docs/: quote the ratios, with the host and the date, where they matter.

    .venv/bin/python -m bench.ab --against de7effe
    .venv/bin/python -m bench.ab --against HEAD~3 --deliver --rounds 6 --seconds 15
    .venv/bin/python -m bench.ab --against main --this HEAD  # both sides compiled
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bench import signing
from bench.api import Context, Scenario, Section
from bench.scenarios._common import (
    SinkLog,
    TenantSpec,
    cpu_reading,
    router_with_redis,
    set_size,
    wait_quiet,
)
from bench.systems import REPO, System
from bench.tools import Tools

CONNECTIONS = 64


@dataclass
class Tree:
    """One side of the comparison: a router, its sink (with --deliver) and its rounds."""

    name: str
    system: System
    sink: SinkLog | None
    rates: list[float]
    cpu_us: list[float]
    events: list[int] = field(default_factory=list)  # per round: delivered (or 2xx) events


def build_wheel(rev: str, workdir: Path) -> Path:
    """``rev`` built as a wheel and unpacked: a directory to put on ``PYTHONPATH``."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree, wheels, site = workdir / "tree", workdir / "wheel", workdir / "site"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(tree)],
            check=True,
        )
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )
    wheel = next(wheels.glob("hookrouter-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def start_tree(ctx: Context, name: str, deliver: bool, pythonpath: str | None) -> Tree:
    """A router (with its Redis and, with ``deliver``, an nginx sink) ready for rounds."""
    sink = ctx.sink() if deliver else None
    tenant = TenantSpec(
        "bench",
        endpoint_url=f"{sink.url}/bench" if sink else None,
        queue_capacity=10_000,
        max_in_flight=128,
    )
    system = router_with_redis(ctx, [tenant], pythonpath=pythonpath)
    return Tree(name, system, SinkLog(sink.access_log) if sink else None, [], [])


def run_round(ctx: Context, tree: Tree, request_set: signing.RequestSet, seconds: float) -> None:
    """One closed-loop run against ``tree``; appends its events, rate and CPU per event."""
    base = tree.sink.mark() if tree.sink else 0
    cpu0, _, _ = cpu_reading(tree.system)
    started = time.time()
    load = ctx.wrk(
        tree.system.url,
        request_set,
        connections=CONNECTIONS,
        duration_s=seconds,
        count_statuses=True,
    )
    accepted = sum(n for code, n in load.statuses.items() if code.startswith("2"))
    events = accepted
    if tree.sink is not None:
        sink = tree.sink
        events, _ = wait_quiet(
            lambda: sink.poll() - base, target=accepted, quiet_s=1.0, timeout_s=120.0
        )
        times = sink.times[base:]
        span = max(times) - started if times else seconds
        tree.rates.append(events / max(span, 1e-3))
    else:
        tree.rates.append(accepted / load.duration_s if load.duration_s else 0.0)
    cpu1, _, _ = cpu_reading(tree.system)
    tree.events.append(events)
    tree.cpu_us.append((cpu1 - cpu0) / events * 1e6 if events else float("nan"))


def _ratios(ours: list[float], theirs: list[float]) -> list[float]:
    return [a / b for a, b in zip(ours, theirs, strict=True) if b]


def _report(rev: str, current: Tree, base: Tree, deliver: bool) -> None:
    unit = "delivered events/s" if deliver else "2xx/s"
    print(f"\nround  {'this tree':>24}  {rev:>24}   (rate {unit}; router CPU µs per event)")
    for i, (r, c, br, bc) in enumerate(
        zip(current.rates, current.cpu_us, base.rates, base.cpu_us, strict=True), 1
    ):
        print(f"{i:>5}  {r:>12,.0f} {c:>10.1f}  {br:>12,.0f} {bc:>10.1f}")
    rate = statistics.median(_ratios(current.rates, base.rates))
    cpu = statistics.median(_ratios(current.cpu_us, base.cpu_us))
    print(f"\nmedian of per-round ratios (this tree / {rev}): rate {rate:.2f}x, CPU {cpu:.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--against", required=True, help="the baseline commit (any git revision)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per tree (default 4)")
    ap.add_argument("--seconds", type=float, default=10.0, help="load per round (default 10)")
    ap.add_argument("--deliver", action="store_true", help="deliver to an nginx sink as well")
    ap.add_argument(
        "--this",
        help="build this side from a commit too (e.g. HEAD), so both sides are compiled "
        "when the installed tree is not",
    )
    args = ap.parse_args(argv)
    tools = Tools()
    for tool in ("wrk", "nginx", "redis-server"):
        tools.require(tool)
    with tempfile.TemporaryDirectory(prefix="hookbench-ab-") as tmp:
        workdir = Path(tmp)
        print(f"building {args.against} as a wheel ...", flush=True)
        site = build_wheel(args.against, workdir / "base")
        this_site = None
        if args.this:
            print(f"building {args.this} as a wheel ...", flush=True)
            this_site = str(build_wheel(args.this, workdir / "this"))
        scenario = Scenario("ab", "A/B", 0, no_section)
        ctx = Context(
            scenario, quick=False, runs=args.rounds, workdir=workdir, img_dir=workdir, tools=tools
        )
        with ctx.cleanup:
            current = start_tree(ctx, args.this or "this tree", args.deliver, this_site)
            base = start_tree(ctx, args.against, args.deliver, str(site))
            for rnd in range(args.rounds):
                request_set = ctx.request_set(set_size(40_000, args.seconds), [stream()])
                order = (current, base) if rnd % 2 == 0 else (base, current)
                for tree in order:
                    print(f"round {rnd + 1}/{args.rounds}: {tree.name}", flush=True)
                    run_round(ctx, tree, request_set, args.seconds)
            _report(args.against, current, base, args.deliver)
    return 0


def stream() -> signing.Stream:
    """The Stripe-signed stream of the rounds' tenant."""
    return TenantSpec("bench").stream()


def no_section(_ctx: Context) -> Section:
    """The run of the Scenario that tools outside the report wrap their Context in."""
    raise RuntimeError("this tool is not a report scenario")


if __name__ == "__main__":
    raise SystemExit(main())
