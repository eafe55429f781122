"""Cluster fault costs as distributions: router-kill takeover and database-failover ingest pause.

Run: ``python -m bench.cluster_faults [--runs 5] [--lease 3]``.

Uses the cluster tests' harness (``tests/cluster``): real router processes,
real PostgreSQL servers started for the run, the attempt-logging sink.

* **takeover**: three routers, a paced flood over 12 tenants through all
  three; ``kill -9`` one; the time until the two survivors hold every
  partition (polled every 50 ms). Also counted: events delivered twice.
* **failover**: two routers on a primary with a synchronous standby via a
  multi-host DSN; ``kill -9`` the primary, ``pg_ctl promote`` the standby at
  once; the ingest pause is the time from the kill to the first 2xx after
  it, and every acknowledged event must be delivered.

Each run is a fresh set of processes and a fresh schema. Prints each run and
the median, min and max; nothing is written to docs/ (copy the figures into
docs/cluster.md with the date).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from tests.cluster import harness  # noqa: E402
from tests.cluster.harness import Flood, balanced, cluster, cluster_config, holders, wait_for  # noqa: E402
from tests.cluster.sink import AttemptSink  # noqa: E402
from tests.support.postgres_servers import primary_with_standby  # noqa: E402


def takeover_once(workdir: Path) -> tuple[float, int]:
    tenants = harness.tenant_names(12)
    names = ["router-1", "router-2", "router-3"]
    with (
        AttemptSink() as sink,
        cluster(
            workdir, sink, names, lambda n: cluster_config(workdir, n, sink, tenants)
        ) as routers,
    ):
        wait_for(balanced(workdir, names), 20, "leases spread")
        with Flood(list(routers.values()), tenants, total=100_000, threads=3, pace=0.005) as flood:
            time.sleep(2.0)
            routers["router-3"].kill()
            killed = time.monotonic()
            survivors = {"router-1", "router-2"}
            wait_for(
                lambda: (
                    set(holders(workdir)) == survivors
                    and sum(holders(workdir).values()) == harness.PARTITIONS
                ),
                30,
                "takeover",
                step=0.05,
            )
            took = time.monotonic() - killed
            time.sleep(1.0)
            flood.stop()
        wanted = set(flood.acked.values())
        wait_for(lambda: wanted <= sink.delivered(), 60, "all delivered")
        ok = Counter(a.event_id for a in sink.snapshot() if a.succeeded)
        return took, sum(1 for n in ok.values() if n > 1)


def failover_once(workdir: Path) -> tuple[float, int]:
    tenants = harness.tenant_names(8)
    names = ["router-1", "router-2"]
    with primary_with_standby(sync=True) as pair:
        pair.wait_streaming()

        def config(name: str) -> dict[str, object]:
            return cluster_config(workdir, name, sink, tenants, dsn=pair.dsn)

        with AttemptSink() as sink, cluster(workdir, sink, names, config) as routers:
            with Flood(list(routers.values()), tenants, total=100_000, threads=3, pace=0.005) as f:
                time.sleep(2.0)
                pair.primary.kill9()
                killed = time.monotonic()
                pair.standby.promote()
                wait_for(lambda: any(t > killed for t in f.acked_at), 60, "ingest back")
                pause = min(t for t in f.acked_at if t > killed) - killed
                time.sleep(1.0)
                f.stop()
            wanted = set(f.acked.values())
            wait_for(lambda: wanted <= sink.delivered(), 60, "all delivered")
            return pause, f.statuses[503]


def _summary(name: str, values: list[float]) -> str:
    return (
        f"{name}: median {statistics.median(values):.2f} s, min {min(values):.2f}, "
        f"max {max(values):.2f} (n={len(values)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_faults")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    takeovers, pauses = [], []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="hr-faults-") as tmp:
            took, twice = takeover_once(Path(tmp))
        takeovers.append(took)
        print(f"run {i + 1}: takeover {took:.2f} s, {twice} events delivered twice", flush=True)
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="hr-faults-") as tmp:
            pause, refused = failover_once(Path(tmp))
        pauses.append(pause)
        print(f"run {i + 1}: failover ingest pause {pause:.2f} s, {refused} x 503", flush=True)
    print(f"lease {harness.LEASE:g} s")
    print(_summary("takeover after kill -9", takeovers))
    print(_summary("ingest pause, primary kill -9 + immediate promote", pauses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
