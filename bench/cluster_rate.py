"""Cluster cost per event at a fixed offered rate, printed: ``python -m bench.cluster_rate``.

The ``cluster-rate`` scenario (``python -m bench cluster-rate`` writes its
section of docs/benchmarks.md) with the rate, rounds and modes as options;
prints one JSON line per round and writes nothing.

    .venv/bin/python -m bench.cluster_rate --rate 3000 --rounds 3
    .venv/bin/python -m bench.cluster_rate --rate 1500 --modes pg-3
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.ab import no_section
from bench.api import Context, Scenario
from bench.scenarios import cluster_rate
from bench.tools import Tools


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rate", type=float, default=cluster_rate.RATE, help="events/s, all routers")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default=",".join(cluster_rate.MODES))
    args = ap.parse_args(argv)
    tools = Tools()
    tools.require("nginx")
    with tempfile.TemporaryDirectory(prefix="hookbench-cluster-rate-") as tmp:
        workdir = Path(tmp)
        scenario = Scenario("cluster-rate", "fixed rate", 0, no_section)
        ctx = Context(
            scenario, quick=False, runs=args.rounds, workdir=workdir, img_dir=workdir, tools=tools
        )
        with ctx.cleanup:
            modes = tuple(args.modes.split(","))
            results = cluster_rate.measure(ctx, modes, args.rate, args.seconds)
    for mode, rounds in results.items():
        for i, row in enumerate(rounds):
            print(json.dumps({"mode": mode, "rate": args.rate, "round": i, **row}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
