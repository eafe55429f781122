"""Server CPU per call of the cluster store's hot statements, one at a time, no contention.

Run: ``python -m bench.pg_statement_cost [--batch 12] [--seconds 2] [--fill 20000]
[--setting NAME=VALUE ...] [--no-row-lock] [--notify] [--migrations N]``.

Starts a PostgreSQL of its own (``tests/support/postgres_servers.py``, plus
``--setting`` lines), opens a ``PostgresStore`` on it (the store's own
sessions, statements and code paths) and fills it with ``--fill`` events of
8 tenants (one endpoint each, 1 KiB bodies, random provider event ids) in
group commits of ``--batch``. Then, for ``--seconds`` each, one call at a time
from one task: group commits of ``--batch`` events, fenced outcome writes of
``--batch`` delivered outcomes, body read-backs (``load``) and page queries
of ``--batch`` deliveries, a partition scan (``pending_in`` from the newest
event id), a catch-up scan (``pending_in`` of every pending delivery), the scan an
owner runs for a work notice without lanes (``pending_in`` over the last
batch's partitions from its lowest event id), and two floors:
``SELECT 1`` (a round trip) and a one-row update in autocommit (a round trip
and a flushed commit). For each: calls, the server's CPU per call (user and
system, postmaster and every backend, ``pg_counters``) and wall time per call.
``--notify``: group commits send their work notice as in cluster mode, to a
connection of this tool's that LISTENs. ``--migrations N``: the store's
schema stops at version N (its indexes as they were then), the statements
are this tree's; the WAL records and bytes per call (``pg_walinspect`` over
the WAL inserted during the phase: exact, where ``pg_stat_wal`` lags by up to
10 s) say what a schema change does to each write without timing it.

The cluster benchmarks (``cluster_ab``) see what a statement costs under
load on a shared 2-core host; this is what it costs alone, so the difference
is contention, not the statement. Prints; writes nothing to docs/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
from tests.support.postgres_servers import PostgresServer, postgres_server

from bench.pg_counters import server_cpu
from hookrouter.flow.credits import DeliveryRef
from hookrouter.ids import new_event_id
from hookrouter.store.base import DeliveryState, NewEvent
from hookrouter.store.ledger import AttemptRecord, OutcomeRecord
from hookrouter.store.postgres import PostgresStore, ledger_sql
from hookrouter.store.postgres.schema import MIGRATIONS

TENANTS = 8
SETTINGS = {
    "max_connections": "100",
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.track_planning": "on",
}
# The statements run since the last reset (this tool's own psql calls excluded).
_STATEMENTS = (
    "SELECT sum(calls), sum(total_exec_time), sum(total_plan_time) FROM pg_stat_statements"
    " WHERE query NOT LIKE '%pg_stat_statements%'"
)
_TOP = (
    "SELECT calls, total_exec_time, regexp_replace(left(query, 60), '\\s+', ' ', 'g')"
    " FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'"
    " ORDER BY total_exec_time DESC LIMIT 3"
)
# The WAL inserted since an LSN: records and bytes.
# A phase that wrote no WAL leaves the flush position where it was, and
# pg_get_wal_records_info refuses a start that is not behind it.
_WAL = (
    "SELECT CASE WHEN pg_current_wal_flush_lsn() > '{0}' THEN (SELECT count(*)"
    " FROM pg_get_wal_records_info('{0}', pg_current_wal_flush_lsn())) ELSE 0 END,"
    " pg_wal_lsn_diff(pg_current_wal_flush_lsn(), '{0}')::bigint"
)
CHANNEL = "hookrouter.cost"  # --notify: the work channel's name in cluster mode
BODY = b'{"id":"evt","object":"event","data":{"object":{"amount":' + b"1" * 960 + b"}}}"


def _event(n: int) -> NewEvent:
    tenant = f"ten_{n % TENANTS}"
    return NewEvent(
        new_event_id(),
        tenant,
        f"src_{tenant}",
        os.urandom(12).hex(),
        "payment_intent.succeeded",
        time.time(),
        {"content-type": "application/json", "stripe-signature": "t=1,v1=" + "a" * 64},
        BODY,
        (f"ep_{tenant}",),
    )


def _delivered(e: NewEvent) -> OutcomeRecord:
    now = time.time()
    ref = DeliveryRef(e.event_id, e.endpoint_ids[0])
    attempt = AttemptRecord(1, now, 2.0, 200, None)
    # One endpoint per event: the engine marks such an outcome as settling its
    # event, so the write does not ask whether the event ended failed.
    return OutcomeRecord(ref, DeliveryState.DELIVERED, 1, None, 200, None, now, attempt,
                         settles_event=True, tenant_id=e.tenant_id)  # fmt: skip


class Bench:
    """The store, the events appended so far, and the measurements."""

    def __init__(self, pg: PostgresServer, store: PostgresStore, batch: int) -> None:
        self.pg, self.store, self.batch = pg, store, batch
        self.events: list[NewEvent] = []
        self.used = 0  # events whose delivery an outcome phase already wrote

    async def append(self) -> None:
        events = [_event(len(self.events) + i) for i in range(self.batch)]
        await asyncio.gather(*(self.store.append(e) for e in events))
        self.events.extend(events)

    def take(self) -> list[NewEvent]:
        """The next ``batch`` appended events whose delivery is still pending."""
        taken = self.events[self.used : self.used + self.batch]
        self.used += self.batch
        return taken

    async def outcomes(self) -> None:
        await self.store.ledger.record([_delivered(e) for e in self.take()])

    async def load(self) -> None:
        refs = [DeliveryRef(e.event_id, e.endpoint_ids[0]) for e in self.events[-self.batch :]]
        await self.store.ledger.load(refs)

    async def page(self) -> None:
        e = self.events[self.used]
        await self.store.ledger.page_pending(e.tenant_id, e.endpoint_ids[0], None, self.batch)

    async def scan(self) -> None:
        await self.store.ledger.pending_in(sorted(self.store.ledger.held), self.events[-1].event_id)

    async def catch_up_scan(self) -> None:
        await self.store.ledger.pending_in(sorted(self.store.ledger.held))

    async def notice_scan(self) -> None:
        last = self.events[-self.batch :]
        partitions = sorted({self.store.partition_of(e.tenant_id) for e in last})
        await self.store.ledger.pending_in(partitions, min(e.event_id for e in last))

    async def select1(self) -> None:
        await self.store.run(lambda c: c.fetchval("SELECT 1"))

    async def update1(self) -> None:
        await self.store.run(
            lambda c: c.execute("UPDATE meta SET value = value WHERE key = 'partitions'")
        )


async def _measure(
    b: Bench, name: str, call: Callable[[], Awaitable[None]], seconds: float
) -> None:
    for _ in range(20):  # warm-up: statements prepared, plans cached
        await call()
    pid = b.pg.pid or 0
    b.pg.psql("SELECT pg_stat_statements_reset()", user="postgres")
    await asyncio.sleep(0.3)  # psql's backend exits and is reaped before the count starts
    lsn0 = b.pg.psql("SELECT pg_current_wal_flush_lsn()", user="postgres").strip()
    u0, s0 = server_cpu(pid)
    t0 = time.perf_counter()
    calls = 0
    while time.perf_counter() - t0 < seconds:
        await call()
        calls += 1
    wall = time.perf_counter() - t0
    u1, s1 = server_cpu(pid)
    per = 1e6 / calls
    records, wal_bytes = b.pg.psql(_WAL.format(lsn0), user="postgres").split("|")
    stmts, exec_ms, plan_ms = b.pg.psql(_STATEMENTS, user="postgres").split("|")
    print(
        f"{name:>14}: {calls:6d} calls, server CPU {(u1 - u0) * per:6.0f} user"
        f" + {(s1 - s0) * per:5.0f} sys µs/call, wall {wall * per:6.0f} µs/call;"
        f" {int(stmts) / calls:.1f} statements/call: execution {float(exec_ms) * 1e3 / calls:.0f},"
        f" planning {float(plan_ms) * 1e3 / calls:.0f} µs/call;"
        f" WAL {int(records) / calls:.1f} records, {int(wal_bytes) / calls:.0f} B/call",
        flush=True,
    )
    for row in b.pg.psql(_TOP, user="postgres").splitlines():
        n, ms, query = row.split("|", 2)
        print(f"{'':>16}{int(n) / calls:5.2f}/call {float(ms) * 1e3 / calls:6.0f} µs/call  {query}")


async def run(pg: PostgresServer, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory():
        store = PostgresStore(
            pg.dsn, schema_name="cost", migrations=MIGRATIONS[: args.migrations or None]
        )
        await store.open()
        listener = await asyncpg.connect(pg.dsn) if args.notify else None
        if listener is not None:
            await listener.add_listener(CHANNEL, _heard)
            store.committer.notify = (CHANNEL, "bench")
        try:
            b = Bench(pg, store, args.batch)
            while len(b.events) < args.fill:
                await b.append()
            print(f"filled: {len(b.events)} events, batch {args.batch}", flush=True)
            for name, call in (
                ("select 1", b.select1),
                ("update 1 row", b.update1),
                ("group commit", b.append),
                ("outcome write", b.outcomes),
                ("load", b.load),
                ("page", b.page),
                ("partition scan", b.scan),
                ("catch-up scan", b.catch_up_scan),
                ("notice scan", b.notice_scan),
            ):
                if not args.only or name in args.only:
                    await _measure(b, name, call, args.seconds)
        finally:
            if listener is not None:
                await listener.close()
            await store.close()


def _heard(*_: object) -> None:
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--fill", type=int, default=20_000)
    ap.add_argument("--setting", action="append", default=[], help="NAME=VALUE")
    ap.add_argument("--only", action="append", default=[], help="a phase's name, e.g. 'load'")
    ap.add_argument("--notify", action="store_true", help="group commits notify, as in a cluster")
    ap.add_argument("--migrations", type=int, default=0, help="stop the schema at this version")
    ap.add_argument(
        "--no-row-lock",
        action="store_true",
        help="experiment: the outcome write without the fence's FOR SHARE (unsafe)",
    )
    args = ap.parse_args(argv)
    if args.no_row_lock:
        ledger_sql.WRITE_OUTCOMES = ledger_sql.WRITE_OUTCOMES.replace("FOR SHARE OF p", "")
    settings = dict(s.split("=", 1) for s in args.setting)
    with postgres_server({**SETTINGS, **settings}) as pg:
        pg.psql("CREATE EXTENSION pg_stat_statements", user="postgres")
        pg.psql("CREATE EXTENSION pg_walinspect", user="postgres")
        print(f"postmaster {pg.pid}", flush=True)
        asyncio.run(run(pg, args))
    print(f"({Path(__file__).name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
