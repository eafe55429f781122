"""PostgreSQL CPU per event in cluster mode, this tree against another commit, same run.

Run: ``python -m bench.cluster_ab --against REV [--routers 3] [--rounds 4] [--seconds 8]``.

The ``cluster`` scenario's load (wrk, 64 connections split over the routers,
8 tenants, one nginx sink per tree) on N routers of each tree, both trees on
one PostgreSQL of its own (with ``pg_stat_statements``), each tree on a schema
of its own. A tree's routers run only during its rounds (started afresh each
round on the same schema, so both stores grow alike). ``REV`` runs from its
source (``git archive``, interpreted, like an editable install with
``HOOKROUTER_COMPILE=0``, with this tree's built C extensions). Rounds
alternate the trees (A B, B A, ...). Per round: delivered events/s, router
and PostgreSQL CPU per delivered event, events per group commit and per
outcome write, the statements' execution time per event, and the server's
own counters per event (``pg_counters``: CPU user/system, transactions,
buffer misses and evictions, WAL records, full-page images and flushes).

The two sides are set up alike, since any difference shows up as a ratio:
both run from a copy (this tree's ``src`` as it is on disk, uncommitted
edits included, and ``REV``'s from ``git archive``) on ``PYTHONPATH``; both
sides' nodes have the same ids (lease preferences hash the node id, so
other ids would hand the 8 tenants to the nodes differently) and start one
at a time, each once the last holds its share (together, who turned first
decided the split); a round starts once every node holds its share of the
partitions (until then one node holds them all and the round would measure
the hand-over) and after a
``CHECKPOINT`` with no autovacuum worker running (their CPU would be
charged to whichever side runs next), and after ``--warm-up`` seconds of
the same load, not counted (pools open connections lazily: backend
start-up, asyncpg's type introspection and the first plans of each
prepared statement would land in the round). Each round prints which node
delivers which tenants. When both copies are byte-identical the report
says so and flags a ratio outside ±10 %: run ``--against HEAD`` first to
see this host's A/A spread.
``--setting NAME=VALUE`` (this tree) and ``--base-setting NAME=VALUE`` (REV)
give each tree a server of its own with those postgresql.conf lines: with
``--against HEAD`` that compares server settings alone; ``--warm-wal MB``
leaves that much WAL recycled on this tree's server first (as on a server in
steady state; a fresh one zero-fills each new segment). Prints; writes
nothing to docs/.
"""

from __future__ import annotations

import argparse
import filecmp
import io
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.postgres_servers import PostgresServer, postgres_server

from bench import pg_counters, procs
from bench.ab import no_section
from bench.api import Context, Scenario
from bench.scenarios._common import SinkLog, TenantSpec, router_config, wait_quiet
from bench.scenarios.cluster import (
    CONNECTIONS,
    flood_routers,
    postgres_cpu,
    request_sets,
    tenant_specs,
)
from bench.systems import REPO, System
from bench.tools import Tools
from hookrouter.store.postgres.lease_plan import quotas
from hookrouter.store.postgres.partitioning import tenant_partition
from hookrouter.store.postgres.schema import DEFAULT_PARTITIONS

SETTINGS = {
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.track_planning": "on",
    "max_connections": "200",
}
TOP = 8
NODE_PREFIX = "ab"  # both sides' node ids: lease preferences hash them
AA_TOLERANCE = 0.10


@dataclass
class Side:
    """One tree: its routers, sink and per-round figures."""

    name: str
    schema: str
    env: dict[str, str] | None
    sink: SinkLog
    pg: PostgresServer
    routers: list[System] = field(default_factory=list)
    rounds: list[dict[str, float]] = field(default_factory=list)


def source_tree(rev: str, workdir: Path) -> Path:
    """``rev``'s ``src`` directory unpacked: a directory to put on ``PYTHONPATH``."""
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(workdir, filter="data")
    # git has no built extensions: both trees use this tree's, so only the Python differs.
    for built in (REPO / "src").rglob("*.so"):
        target = workdir / built.relative_to(REPO)
        if target.parent.is_dir():
            shutil.copy2(built, target)
    return workdir / "src"


def working_tree(workdir: Path) -> Path:
    """This tree's ``src`` copied as it is on disk: found on ``PYTHONPATH`` like the other side."""
    target = workdir / "src"
    shutil.copytree(
        REPO / "src", target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    return target


def identical(a: Path, b: Path) -> bool:
    """Whether two source trees hold the same files with the same bytes."""
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    return _same(cmp)


def _same(cmp: filecmp.dircmp[str]) -> bool:
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_same(sub) for sub in cmp.subdirs.values())


def _settle(side: Side, tenants: list[TenantSpec], timeout_s: float = 60.0) -> str:
    """Wait until every node holds its quota of partitions; which node has which tenants."""
    nodes = [f"{NODE_PREFIX}-{n}" for n in range(len(side.routers))]
    want = quotas(nodes, DEFAULT_PARTITIONS)
    deadline = time.monotonic() + timeout_s
    while True:
        rows = side.pg.psql(
            f"SELECT owner, count(*) FROM {side.schema}.partitions"
            " WHERE owner IS NOT NULL AND expires_at > now() GROUP BY owner",
            user="postgres",
        )
        held = {o: int(c) for o, c in (r.split("|") for r in rows.splitlines())}
        if held == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    owners = dict(
        line.split("|")
        for line in side.pg.psql(
            f"SELECT partition, owner FROM {side.schema}.partitions WHERE owner IS NOT NULL",
            user="postgres",
        ).splitlines()
    )
    by_node: dict[str, list[str]] = {n: [] for n in nodes}
    for t in tenants:
        owner = owners.get(str(tenant_partition(t.id, DEFAULT_PARTITIONS)), "none")
        by_node.setdefault(owner, []).append(t.id)
    note = "" if held == want else f" (NOT SETTLED after {timeout_s:.0f} s: {held})"
    return " ".join(f"{n}:{','.join(ts) or '-'}" for n, ts in sorted(by_node.items())) + note


def _start(ctx: Context, side: Side, tenants: list[TenantSpec], count: int) -> str:
    """The side's nodes, started one at a time once the last holds its share; the placement.

    Started together, the nodes split the tenants by who turned first, which
    changed between rounds (docs/performance.md); one at a time, the
    releases and takes follow the lease preferences alone.
    """
    pg = side.pg
    store = {
        "backend": "postgres",
        "postgres": {"dsn": pg.dsn, "schema": side.schema, "pool_size": 8},
    }
    side.routers = []
    placement = ""
    for n in range(count):
        cluster = {"node_id": f"{NODE_PREFIX}-{n}"}
        config = router_config(tenants, extra={"store": store, "cluster": cluster})
        side.routers.append(_router(ctx, config, side.env))
        placement = _settle(side, tenants)
    return placement


def _router(ctx: Context, config: dict[str, Any], env: dict[str, str] | None) -> System:
    """A router, started again when it could not listen: its free port can be taken meanwhile."""
    for _ in range(2):
        try:
            return ctx.router(config, env=env)
        except procs.ServiceError as exc:
            print(f"    router did not start ({str(exc).splitlines()[-1]}); again", flush=True)
    return ctx.router(config, env=env)


def _quiesce(pg: PostgresServer, timeout_s: float = 60.0) -> None:
    """A checkpoint, and no autovacuum worker running: each round starts from the same state."""
    pg.psql("CHECKPOINT", user="postgres", timeout=120)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = pg.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'",
            user="postgres",
        )
        if busy == "0":
            return
        time.sleep(0.5)


def _statements(pg: PostgresServer, delivered: int) -> list[tuple[float, float, float, str]]:
    """(calls, execution µs, planning µs) per delivered event and the text of each statement."""
    rows = pg.psql(
        "SELECT s.calls, s.total_exec_time, s.total_plan_time,"
        " regexp_replace(left(s.query, 70), '\\s+', ' ', 'g')"
        " FROM pg_stat_statements AS s"
        " WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " ORDER BY s.total_exec_time + s.total_plan_time DESC",
        user="postgres",
    )
    out = []
    for row in rows.splitlines():
        calls, ms, plan_ms, query = row.split("|", 3)
        n = delivered
        out.append((int(calls) / n, float(ms) * 1000 / n, float(plan_ms) * 1000 / n, query))
    return out


def _warm_up(ctx: Context, side: Side, tenants: list[TenantSpec], seconds: float) -> None:
    """The round's load for ``seconds``, not counted: every pooled connection opened and used."""
    if seconds <= 0:
        return
    per = max(1, CONNECTIONS // len(side.routers))
    sets = request_sets(ctx, len(side.routers), tenants, seconds)
    base = side.sink.mark()
    accepted, _ = flood_routers(ctx, [r.url for r in side.routers], sets, per, seconds)
    wait_quiet(lambda: side.sink.poll() - base, target=accepted, quiet_s=1.5, timeout_s=180)


def _round(
    ctx: Context,
    side: Side,
    tenants: list[TenantSpec],
    seconds: float,
) -> None:
    per = max(1, CONNECTIONS // len(side.routers))
    sets = request_sets(ctx, len(side.routers), tenants, seconds)
    base = side.sink.mark()
    pids = [pid for r in side.routers for pid in r.pids()]
    pg = side.pg
    pg.psql("SELECT pg_stat_statements_reset()", user="postgres")
    counters0 = pg_counters.snapshot(pg)
    cpu0, pg0, t0 = procs.cpu_seconds(pids), postgres_cpu(pg.pid or 0), time.time()
    accepted, p99 = flood_routers(ctx, [r.url for r in side.routers], sets, per, seconds)
    delivered, _ = wait_quiet(
        lambda: side.sink.poll() - base, target=accepted, quiet_s=1.5, timeout_s=180
    )
    cpu, pgcpu = procs.cpu_seconds(pids) - cpu0, postgres_cpu(pg.pid or 0) - pg0
    counters = pg_counters.per_event(counters0, pg_counters.snapshot(pg), delivered)
    times = side.sink.times[base:]
    span = max(1e-3, (max(times) if times else t0) - t0)
    n = max(1, delivered)
    stmts = _statements(pg, n)
    inserts = sum(c for c, _, _, q in stmts if "INSERT INTO event_keys" in q)
    outcomes = sum(c for c, _, _, q in stmts if "WITH held AS" in q)
    figures = {
        "delivered": delivered,
        "events_per_s": delivered / span,
        "router_us": cpu / n * 1e6,
        "pg_us": pgcpu / n * 1e6,
        "exec_us": sum(us for _, us, _, _ in stmts),
        "plan_us": sum(us for _, _, us, _ in stmts),
        "per_commit": 1 / inserts if inserts else 0.0,
        "per_outcome_write": 1 / outcomes if outcomes else 0.0,
        "calls": sum(c for c, _, _, _ in stmts),
        "xact": counters["xact"],
        "ingest_p99_ms": p99,
    }
    side.rounds.append(figures)
    load_avg = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"  {side.name}: {delivered} delivered, {figures['events_per_s']:,.0f}/s,"
        f" router {figures['router_us']:.0f} µs/ev, PostgreSQL {figures['pg_us']:.0f} µs/ev"
        f" (statements: execution {figures['exec_us']:.0f}, planning {figures['plan_us']:.0f}),"
        f" {figures['per_commit']:.1f} ev/commit,"
        f" {figures['per_outcome_write']:.1f} ev/outcome write,"
        f" ingest p99 {p99:.1f} ms; load {' '.join(load_avg)}",
        flush=True,
    )
    print(f"    {figures['calls']:.2f} statements/ev; {pg_counters.describe(counters)}", flush=True)
    for calls, us, plan_us, query in stmts[:TOP]:
        print(f"      {us:7.1f} + {plan_us:5.1f} µs/ev {calls:6.2f} calls/ev  {query}", flush=True)


def _report(sides: list[Side], *, aa: bool) -> None:
    a, b = sides
    print(f"\nmedians over {len(a.rounds)} rounds ({a.name} / {b.name})")
    keys = ("events_per_s", "router_us", "pg_us", "exec_us", "plan_us", "calls", "per_commit",
            "ingest_p99_ms")  # fmt: skip
    biased = []
    for key in (*keys, "per_outcome_write"):
        ma = statistics.median(r[key] for r in a.rounds)
        mb = statistics.median(r[key] for r in b.rounds)
        ratios = [x[key] / y[key] for x, y in zip(a.rounds, b.rounds, strict=True) if y[key]]
        ratio = statistics.median(ratios) if ratios else float("nan")
        print(f"  {key:>18}: {ma:10.1f} {mb:10.1f}   per-round ratio median {ratio:.2f}")
        if not abs(ratio - 1) <= AA_TOLERANCE:
            biased.append(key)
    if aa:
        verdict = f"outside ±10 %: {', '.join(biased)}" if biased else "all within ±10 %"
        print(f"A/A self-check (identical sources): {verdict}")


def _settings(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` arguments as postgresql.conf lines."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--setting wants NAME=VALUE, got {pair!r}")
        out[name.strip()] = value.strip()
    return out


def _server(ctx: Context, extra: dict[str, str], warm_wal_mb: int = 0) -> PostgresServer:
    pg = ctx.cleanup.enter_context(postgres_server({**SETTINGS, **extra}))
    pg.psql("CREATE EXTENSION pg_stat_statements", user="postgres")
    if warm_wal_mb:
        _warm_wal(pg, warm_wal_mb)
    return pg


def _warm_wal(pg: PostgresServer, mb: int) -> None:
    """Leave about ``mb`` MiB of WAL segments recycled, as on a server past its first checkpoints.

    A fresh server writes every new 16 MiB segment full of zeros before
    using it; one in steady state reuses the segments a checkpoint freed.
    Keeping them needs ``min_wal_size`` at least as large (``--setting``).
    """
    rows = mb * 1000  # about 1 KiB of WAL per row
    pg.psql(
        "CREATE TABLE wal_warm_up AS SELECT repeat('x', 1000) AS x"
        f" FROM generate_series(1, {rows})",
        user="postgres",
        timeout=600,
    )
    pg.psql("DROP TABLE wal_warm_up", user="postgres")
    pg.psql("CHECKPOINT", user="postgres", timeout=600)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--against", required=True, help="the baseline commit")
    ap.add_argument("--routers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warm-up", type=float, default=2.0, help="seconds of load before a round")
    ap.add_argument("--setting", action="append", default=[], help="NAME=VALUE, this tree")
    ap.add_argument("--base-setting", action="append", default=[], help="NAME=VALUE, REV")
    ap.add_argument("--warm-wal", type=int, default=0, help="MiB of recycled WAL, this tree")
    args = ap.parse_args(argv)
    tools = Tools()
    for tool in ("wrk", "nginx"):
        tools.require(tool)
    with tempfile.TemporaryDirectory(prefix="hookbench-cluster-ab-") as tmp:
        workdir = Path(tmp)
        src = source_tree(args.against, workdir / "base")
        this_src = working_tree(workdir / "this")
        same = identical(this_src, src)
        kind = "identical sources, an A/A run" if same else "sources differ"
        print(f"this tree and {args.against}: {kind}", flush=True)
        scenario = Scenario("cluster-ab", "A/B", 0, no_section)
        ctx = Context(
            scenario, quick=False, runs=args.rounds, workdir=workdir, img_dir=workdir, tools=tools
        )
        with ctx.cleanup:
            pg = _server(ctx, _settings(args.setting), args.warm_wal)
            # Settings of their own: a server of their own (an idle one costs the round nothing).
            base_pg = _server(ctx, _settings(args.base_setting)) if args.base_setting else pg
            sides: list[Side] = []
            sinks: dict[str, str] = {}
            for name, schema, tree, server in (
                ("this tree", "ab_this", this_src, pg),
                (args.against, "ab_base", src, base_pg),
            ):
                nginx = ctx.sink()
                env = {"PYTHONPATH": str(tree)}
                sides.append(Side(name, schema, env, SinkLog(nginx.access_log), server))
                sinks[name] = nginx.url
            for rnd in range(args.rounds):
                order = sides if rnd % 2 == 0 else sides[::-1]
                for side in order:
                    print(f"round {rnd + 1}/{args.rounds}: {side.name}", flush=True)
                    _quiesce(side.pg)
                    # Only the measured tree runs: an idle tree's lease turns would be counted.
                    tenants = tenant_specs(sinks[side.name])
                    placement = _start(ctx, side, tenants, args.routers)
                    print(f"    tenants by node: {placement}", flush=True)
                    _warm_up(ctx, side, tenants, args.warm_up)
                    _round(ctx, side, tenants, args.seconds)
                    for router in side.routers:
                        router.stop()
            _report(sides, aa=same)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
