"""Interpreted Python calls per event in the running router: ``python -m bench.pyframes``.

The compiled router should run no Python bytecode per event: every
interpreted frame on the hot path (a NamedTuple's generated ``__new__``, a
dataclass's generated ``__init__``, a lambda, a method of an uncompiled
module) costs a frame push plus attribute lookups by name (figures in
docs/performance.md, "Bench tools"). Neither perf (which sees
``_PyEval_EvalFrameDefault``) nor py-spy (which sees nothing inside compiled
modules) names them; this does.

The router runs under a small wrapper (``probe``, this module) that counts
the ``call`` events of ``sys.setprofile`` between two signals, while the
harness sends Stripe-signed events and waits for their deliveries. The
count is exact (it does not sample), but the profiler slows the router, so
batches are smaller than under the timed scenarios: read per-event figures
for calls made once per event, and per-commit ones with that in mind.

    .venv/bin/python -m bench.pyframes                  # 3,000 events over 8 connections
    .venv/bin/python -m bench.pyframes --events 5000 --top 40
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from bench import ab
from bench.api import Context, Scenario
from bench.instructions import _send
from bench.scenarios._common import SinkLog, TenantSpec, router_with_redis
from bench.tools import Tools

CallSite = tuple[str, int, str]  # (file, first line, function)


def call_site(frame: FrameType) -> CallSite:
    """Where a Python frame's code lives; generated code (``<string>``) is named by its class."""
    code = frame.f_code
    name = code.co_name
    if code.co_filename == "<string>":  # namedtuple __new__, dataclass __init__, ...
        local = frame.f_locals
        if "_cls" in local:  # collections.namedtuple's __new__ is a generated lambda
            name, owner = "__new__", local["_cls"]
        else:
            owner = local.get("self")
        cls = owner if isinstance(owner, type) else type(owner)
        name = f"{name} of {cls.__module__}.{cls.__qualname__}"
    path = code.co_filename
    for marker in ("site-packages/", "src/"):
        path = path.split(marker)[-1]
    return path, code.co_firstlineno, name


def router_argv(argv: Sequence[str]) -> list[str]:
    """The ``hookrouter`` CLI arguments in a router command line (from ``serve`` on)."""
    try:
        return list(argv[list(argv).index("serve") :])
    except ValueError:
        raise SystemExit(f"not a 'hookrouter serve' command line: {list(argv)!r}") from None


def probe(out: Path, argv: Sequence[str]) -> int:
    """Run the router CLI; count interpreted calls from SIGUSR1 until SIGUSR2, then write them."""
    counts: Counter[CallSite] = Counter()

    def count(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            counts[call_site(frame)] += 1

    def start(*_: object) -> None:
        counts.clear()
        sys.setprofile(count)  # the loop thread, where the signal handler runs

    def stop(*_: object) -> None:
        sys.setprofile(None)
        lines = [f"{n}\t{path}\t{line}\t{name}" for (path, line, name), n in counts.most_common()]
        out.write_text("\n".join(lines) + "\n")

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from hookrouter.cli import main as router_main

    return router_main(router_argv(argv))


def read_counts(path: Path) -> list[tuple[int, str]]:
    """(count, "file:line function") rows written by ``probe``, largest first."""
    rows = []
    for line in path.read_text().splitlines():
        if line:
            n, file, first_line, name = line.split("\t", 3)
            rows.append((int(n), f"{file}:{first_line} {name}"))
    return rows


def report(rows: list[tuple[int, str]], events: int, top: int) -> str:
    """The ``top`` call sites with their calls per event."""
    total = sum(n for n, _ in rows)
    per_event = total / events
    head = f"interpreted Python calls: {total:,} for {events:,} events ({per_event:.2f} per event)"
    lines = [head, f"{'per event':>10}  {'calls':>8}  call site"]
    lines += [f"{n / events:>10.3f}  {n:>8,}  {site}" for n, site in rows[:top]]
    return "\n".join(lines)


def measure(events: int, connections: int, top: int) -> str:
    tools = Tools()
    for tool in ("wrk", "nginx", "redis-server"):
        tools.require(tool)
    with tempfile.TemporaryDirectory(prefix="hookbench-pyframes-") as tmp:
        workdir = Path(tmp)
        out = workdir / "calls.tsv"
        scenario = Scenario("pyframes", "pyframes", 0, ab.no_section)
        ctx = Context(scenario, quick=False, runs=1, workdir=workdir, img_dir=workdir, tools=tools)
        with ctx.cleanup:
            sink = ctx.sink()
            prefix = [sys.executable, "-m", "bench.pyframes", "probe", str(out)]
            tenant = TenantSpec("bench", endpoint_url=f"{sink.url}/bench")
            system = router_with_redis(ctx, [tenant], prefix=prefix, ready_timeout=120)
            log = SinkLog(sink.access_log)
            pid = system.service.pid
            _send(ctx, system, log, max(200, events // 3), connections)  # warm-up: leases, pools
            os.kill(pid, signal.SIGUSR1)
            delivered = _send(ctx, system, log, events, connections)
            os.kill(pid, signal.SIGUSR2)
            for _ in range(100):
                if out.exists():
                    break
                time.sleep(0.1)
            system.stop()
            return report(read_counts(out), delivered, top)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["probe"]:  # inside the router process (see measure)
        return probe(Path(args_in[1]), args_in[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--events", type=int, default=3000, help="events in the counted window")
    ap.add_argument("--connections", type=int, default=8, help="sender connections")
    ap.add_argument("--top", type=int, default=30, help="call sites to list")
    args = ap.parse_args(args_in)
    print(measure(args.events, args.connections, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
