"""asyncpg vs psycopg 3 for hookrouter's hot PostgreSQL statements (issue #32's driver choice).

Run: ``python -m bench.pg_driver [--rounds 5] [--seconds 0.4] [--json out.json]``.

It starts its own PostgreSQL (``tests/support/postgres_servers.py``: a free
127.0.0.1 port, ``fsync=on``, ``synchronous_commit=on``), opens one
connection per driver on uvloop and measures, per statement shape:

* ``ingest``: a group commit of N events (N = 1, 16, 128) in one explicit
  transaction into ``events`` with a unique index on
  ``(source, provider_event_id)`` and ``ON CONFLICT DO NOTHING RETURNING``,
  written four ways: one multi-row ``VALUES`` statement, one ``unnest`` of
  arrays, ``executemany`` (asyncpg ``fetchmany``, psycopg
  ``executemany(returning=True)``, which pipelines), and ``COPY`` into a
  temporary staging table followed by ``INSERT ... SELECT ... ON CONFLICT``.
  psycopg runs the ``VALUES``/``unnest`` transactions in pipeline mode, so
  BEGIN, INSERT and COMMIT share one round trip; asyncpg has no pipeline.
* ``outcome``: the epoch-fenced outcome write ``UPDATE deliveries ... WHERE
  partition = $1 AND epoch = $2 AND id = $3``: one per autocommit transaction
  (the caller reads the row count: 0 means fenced off), 16 statements in one
  transaction (pipelined by psycopg), and 16 rows in one ``unnest`` UPDATE.
* ``notify``: a ``pg_notify`` on one connection until a LISTENing connection
  of the same driver receives it, one at a time.

A sample is one driver running one shape for ``--seconds`` after a warm-up
(statements prepared, caches filled): events (rows or notifications) per
second of wall time, and client CPU per event (``time.process_time`` of this
process, which runs only the client; the server is another process).  Rounds
alternate which driver goes first, and each round's psycopg/asyncpg ratio is
kept, because the 2-core machine is shared: the medians and the spread of the
per-round ratios are what to read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import uvloop

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from tests.support.postgres_servers import postgres_server  # noqa: E402

DRIVERS = ("asyncpg", "psycopg")
BODY = b"x" * 512  # a small webhook body; the size is the same for every method
PARTITIONS = 256
DELIVERY_ROWS = 20_000
EPOCH = 7
COLUMNS = ("source", "provider_event_id", "tenant", "partition", "body")

SCHEMA = f"""
DROP TABLE IF EXISTS events, deliveries;
CREATE TABLE events (
    id bigserial PRIMARY KEY,
    source text NOT NULL,
    provider_event_id text NOT NULL,
    tenant text NOT NULL,
    partition int NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    body bytea NOT NULL
);
CREATE UNIQUE INDEX events_dedup ON events (source, provider_event_id);
CREATE TABLE deliveries (
    id bigint PRIMARY KEY,
    partition int NOT NULL,
    epoch bigint NOT NULL,
    attempts int NOT NULL DEFAULT 0,
    outcome text
);
INSERT INTO deliveries (id, partition, epoch)
    SELECT g, g % {PARTITIONS}, {EPOCH} FROM generate_series(0, {DELIVERY_ROWS - 1}) g;
"""
STAGING = (
    "CREATE TEMP TABLE staging (source text, provider_event_id text, tenant text, "
    "partition int, body bytea) ON COMMIT DELETE ROWS"
)
CONFLICT = "ON CONFLICT (source, provider_event_id) DO NOTHING RETURNING id, provider_event_id"
INSERT_ONE = f"INSERT INTO events ({', '.join(COLUMNS)}) VALUES ($1, $2, $3, $4, $5) {CONFLICT}"
INSERT_UNNEST = (
    f"INSERT INTO events ({', '.join(COLUMNS)}) "
    "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::bytea[]) "
    f"{CONFLICT}"
)
INSERT_STAGED = (
    f"INSERT INTO events ({', '.join(COLUMNS)}) SELECT {', '.join(COLUMNS)} FROM staging {CONFLICT}"
)
UPDATE_ONE = (
    "UPDATE deliveries SET outcome = $1, attempts = attempts + 1 "
    "WHERE partition = $2 AND epoch = $3 AND id = $4"
)
UPDATE_UNNEST = (
    "UPDATE deliveries d SET outcome = u.outcome, attempts = d.attempts + 1 "
    "FROM unnest($1::int8[], $2::text[]) AS u(id, outcome) "
    "WHERE d.partition = $3 AND d.epoch = $4 AND d.id = u.id RETURNING d.id"
)
OUTCOME_BATCH = 16


def values_sql(n: int) -> str:
    rows = ", ".join("(" + ", ".join(f"${i * 5 + j + 1}" for j in range(5)) + ")" for i in range(n))
    return f"INSERT INTO events ({', '.join(COLUMNS)}) VALUES {rows} {CONFLICT}"


def to_psycopg(sql: str) -> str:
    """``$n`` placeholders as psycopg's ``%s`` (every statement here uses them in order)."""
    numbers = [int(m) for m in re.findall(r"\$(\d+)", sql)]
    assert numbers == list(range(1, len(numbers) + 1)), sql
    out, i = sql, len(numbers) + 1
    for k in range(i - 1, 0, -1):  # $12 before $1
        out = out.replace(f"${k}", "%s")
    return out


class Events:
    """Fresh provider event ids, so every insert is a new event (the unique index is checked)."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.seq = 0

    def batch(self, n: int) -> list[tuple[str, str, str, int, bytes]]:
        rows = []
        for _ in range(n):
            self.seq += 1
            tenant = f"t{self.seq % 97}"
            rows.append(
                ("stripe", f"{self.driver}-{self.seq}", tenant, self.seq % PARTITIONS, BODY)
            )
        return rows


def columns_of(rows: list[tuple[str, str, str, int, bytes]]) -> list[list[Any]]:
    return [list(col) for col in zip(*rows, strict=True)]


def flatten(rows: list[tuple[str, str, str, int, bytes]]) -> list[Any]:
    return [v for row in rows for v in row]


def outcome_ids(seq: int, n: int) -> tuple[int, list[int]]:
    """``n`` delivery ids of one partition (an owner writes outcomes for its own partitions)."""
    partition = seq % PARTITIONS
    per_partition = DELIVERY_ROWS // PARTITIONS
    base = (seq // PARTITIONS) * n
    return partition, [partition + PARTITIONS * ((base + k) % per_partition) for k in range(n)]


Op = Callable[[], Awaitable[int]]  # one unit of work; returns the events it handled


class AsyncpgClient:
    name = "asyncpg"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.events = Events(self.name)

    async def open(self) -> None:
        self.conn = await asyncpg.connect(self.dsn)
        self.listener = await asyncpg.connect(self.dsn)
        await self.conn.execute(STAGING)
        self.got: asyncio.Future[str] | None = None

        def on_notify(_c: object, _pid: int, _channel: str, payload: object) -> None:
            if self.got is not None and not self.got.done():
                self.got.set_result(str(payload))

        await self.listener.add_listener("hr_events", on_notify)

    async def close(self) -> None:
        await self.conn.close()
        await self.listener.close()

    def ingest(self, method: str, n: int) -> Op:
        conn, events = self.conn, self.events
        sql_values = values_sql(n)

        async def values() -> int:
            rows = events.batch(n)
            async with conn.transaction():
                got = await conn.fetch(sql_values, *flatten(rows))
            return len(got)

        async def unnest() -> int:
            rows = events.batch(n)
            async with conn.transaction():
                got = await conn.fetch(INSERT_UNNEST, *columns_of(rows))
            return len(got)

        async def executemany() -> int:
            rows = events.batch(n)
            async with conn.transaction():
                got = await conn.fetchmany(INSERT_ONE, rows)
            return len(got)

        async def copy() -> int:
            rows = events.batch(n)
            async with conn.transaction():
                await conn.copy_records_to_table("staging", records=rows, columns=COLUMNS)
                got = await conn.fetch(INSERT_STAGED)
            return len(got)

        return {"values": values, "unnest": unnest, "executemany": executemany, "copy": copy}[
            method
        ]

    def outcome(self, method: str) -> Op:
        conn = self.conn
        seq = 0

        async def single() -> int:
            nonlocal seq
            seq += 1
            partition, ids = outcome_ids(seq, 1)
            status = await conn.execute(UPDATE_ONE, "ok", partition, EPOCH, ids[0])
            assert status == "UPDATE 1", status
            return 1

        async def statements() -> int:
            nonlocal seq
            seq += 1
            partition, ids = outcome_ids(seq, OUTCOME_BATCH)
            async with conn.transaction():
                for i in ids:
                    status = await conn.execute(UPDATE_ONE, "ok", partition, EPOCH, i)
                    assert status == "UPDATE 1", status
            return OUTCOME_BATCH

        async def unnest() -> int:
            nonlocal seq
            seq += 1
            partition, ids = outcome_ids(seq, OUTCOME_BATCH)
            got = await conn.fetch(UPDATE_UNNEST, ids, ["ok"] * len(ids), partition, EPOCH)
            assert len(got) == OUTCOME_BATCH
            return OUTCOME_BATCH

        return {"single": single, "16 statements/txn": statements, "16 rows unnest": unnest}[method]

    def notify(self) -> Op:
        seq = 0

        async def round_trip() -> int:
            nonlocal seq
            seq += 1
            self.got = asyncio.get_running_loop().create_future()
            await self.conn.execute("SELECT pg_notify('hr_events', $1)", str(seq))
            assert await self.got == str(seq)
            return 1

        return round_trip


class PsycopgClient:
    name = "psycopg"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.events = Events(self.name)

    async def open(self) -> None:
        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        self.listener = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        await self.conn.execute(STAGING)
        await self.listener.execute("LISTEN hr_events")
        self.got: asyncio.Future[str] | None = None
        self.reader = asyncio.create_task(self._read_notifies())

    async def _read_notifies(self) -> None:
        async for note in self.listener.notifies():
            if self.got is not None and not self.got.done():
                self.got.set_result(note.payload)

    async def close(self) -> None:
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        await self.conn.close()
        await self.listener.close()

    def ingest(self, method: str, n: int) -> Op:
        conn, events = self.conn, self.events
        sql_values = to_psycopg(values_sql(n))
        sql_one, sql_unnest = to_psycopg(INSERT_ONE), to_psycopg(INSERT_UNNEST)
        copy_sql = f"COPY staging ({', '.join(COLUMNS)}) FROM STDIN"

        async def values() -> int:
            rows = events.batch(n)
            async with conn.pipeline():
                async with conn.transaction():
                    cur = await conn.execute(sql_values, flatten(rows))
                got = await cur.fetchall()
            return len(got)

        async def unnest() -> int:
            rows = events.batch(n)
            async with conn.pipeline():
                async with conn.transaction():
                    cur = await conn.execute(sql_unnest, columns_of(rows))
                got = await cur.fetchall()
            return len(got)

        async def executemany() -> int:
            rows = events.batch(n)
            count = 0
            async with conn.transaction():
                cur = conn.cursor()
                await cur.executemany(sql_one, rows, returning=True)
                while True:
                    count += len(await cur.fetchall())
                    if not cur.nextset():
                        break
            return count

        async def copy() -> int:
            rows = events.batch(n)
            async with conn.transaction():
                cur = conn.cursor()
                async with cur.copy(copy_sql) as cp:
                    for row in rows:
                        await cp.write_row(row)
                await cur.execute(INSERT_STAGED)
                got = await cur.fetchall()
            return len(got)

        return {"values": values, "unnest": unnest, "executemany": executemany, "copy": copy}[
            method
        ]

    def outcome(self, method: str) -> Op:
        conn = self.conn
        update_one, update_unnest = to_psycopg(UPDATE_ONE), to_psycopg(UPDATE_UNNEST)
        seq = 0

        async def single() -> int:
            nonlocal seq
            seq += 1
            partition, ids = outcome_ids(seq, 1)
            cur = await conn.execute(update_one, ("ok", partition, EPOCH, ids[0]))
            assert cur.rowcount == 1, cur.rowcount
            return 1

        async def statements() -> int:
            nonlocal seq
            seq += 1
            partition, ids = outcome_ids(seq, OUTCOME_BATCH)
            async with conn.pipeline() as pipe:
                async with conn.transaction():
                    curs = [
                        await conn.execute(update_one, ("ok", partition, EPOCH, i)) for i in ids
                    ]
                await pipe.sync()
            assert all(c.rowcount == 1 for c in curs)
            return OUTCOME_BATCH

        async def unnest() -> int:
            nonlocal seq
            seq += 1
            partition, ids = outcome_ids(seq, OUTCOME_BATCH)
            cur = await conn.execute(update_unnest, (ids, ["ok"] * len(ids), partition, EPOCH))
            got = await cur.fetchall()
            assert len(got) == OUTCOME_BATCH
            return OUTCOME_BATCH

        return {"single": single, "16 statements/txn": statements, "16 rows unnest": unnest}[method]

    def notify(self) -> Op:
        seq = 0

        async def round_trip() -> int:
            nonlocal seq
            seq += 1
            self.got = asyncio.get_running_loop().create_future()
            await self.conn.execute("SELECT pg_notify('hr_events', %s)", (str(seq),))
            assert await self.got == str(seq)
            return 1

        return round_trip


Client = AsyncpgClient | PsycopgClient


@dataclass
class Sample:
    shape: str
    driver: str
    round: int
    events: int
    seconds: float
    cpu_seconds: float

    @property
    def per_second(self) -> float:
        return self.events / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu_seconds / self.events * 1e6


SHAPES: list[tuple[str, Callable[[Client], Op]]] = [
    *(
        (f"ingest {method} N={n}", lambda c, m=method, n=n: c.ingest(m, n))
        for n in (1, 16, 128)
        for method in ("values", "unnest", "executemany", "copy")
    ),
    *(
        (f"outcome {m}", lambda c, m=m: c.outcome(m))
        for m in ("single", "16 statements/txn", "16 rows unnest")
    ),
    ("notify round trip", lambda c: c.notify()),
]


async def measure(op: Op, seconds: float, warm_up: int = 5) -> tuple[int, float, float]:
    for _ in range(warm_up):
        await op()
    events = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        events += await op()
    return events, time.perf_counter() - t0, time.process_time() - cpu0


async def run(dsn: str, rounds: int, seconds: float, only: str | None) -> list[Sample]:
    admin = await asyncpg.connect(dsn)
    await admin.execute(SCHEMA)
    clients: dict[str, Client] = {"asyncpg": AsyncpgClient(dsn), "psycopg": PsycopgClient(dsn)}
    for c in clients.values():
        await c.open()
    samples: list[Sample] = []
    try:
        for r in range(rounds):
            order = DRIVERS if r % 2 == 0 else DRIVERS[::-1]
            for shape, make in SHAPES:
                if only and only not in shape:
                    continue
                for name in order:
                    # Same starting index size for both drivers.
                    await admin.execute("TRUNCATE events")
                    events, wall, cpu = await measure(make(clients[name]), seconds)
                    s = Sample(shape, name, r, events, wall, cpu)
                    samples.append(s)
                    print(
                        f"round {r} {shape:32} {name:8} {s.per_second:9.0f} ev/s "
                        f"{s.cpu_us:7.1f} µs/ev",
                        file=sys.stderr,
                    )
    finally:
        for c in clients.values():
            await c.close()
        await admin.close()
    return samples


def summarize(samples: list[Sample]) -> list[dict[str, Any]]:
    table = []
    for shape, _ in SHAPES:
        mine = [s for s in samples if s.shape == shape]
        if not mine:
            continue
        row: dict[str, Any] = {"shape": shape}
        for d in DRIVERS:
            ds = [s for s in mine if s.driver == d]
            row[f"{d}_per_s"] = statistics.median(s.per_second for s in ds)
            row[f"{d}_cpu_us"] = statistics.median(s.cpu_us for s in ds)
        ratios = []
        for r in sorted({s.round for s in mine}):
            a = next(s for s in mine if s.round == r and s.driver == "asyncpg")
            p = next(s for s in mine if s.round == r and s.driver == "psycopg")
            ratios.append(p.cpu_us / a.cpu_us)
        row["cpu_ratio_median"] = statistics.median(ratios)
        row["cpu_ratio_min"] = min(ratios)
        row["cpu_ratio_max"] = max(ratios)
        table.append(row)
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    lines = [
        "| statement | asyncpg ev/s | psycopg ev/s | asyncpg CPU µs/ev | psycopg CPU µs/ev "
        "| psycopg/asyncpg CPU (median, min-max of rounds) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in table:
        lines.append(
            f"| {row['shape']} | {row['asyncpg_per_s']:,.0f} | {row['psycopg_per_s']:,.0f} "
            f"| {row['asyncpg_cpu_us']:.1f} | {row['psycopg_cpu_us']:.1f} "
            f"| {row['cpu_ratio_median']:.2f} ({row['cpu_ratio_min']:.2f}-"
            f"{row['cpu_ratio_max']:.2f}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.4, help="per sample")
    parser.add_argument("--only", help="run the shapes whose name contains this")
    parser.add_argument("--json", type=Path, help="write samples and summary here")
    args = parser.parse_args(argv)

    with postgres_server() as server:
        version = server.psql("SHOW server_version")
        samples = uvloop.run(run(server.dsn, args.rounds, args.seconds, args.only))
    table = summarize(samples)
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "server": f"PostgreSQL {version} (fsync=on, synchronous_commit=on), same host",
        "asyncpg": asyncpg.__version__,
        "psycopg": f"{psycopg.__version__} ({psycopg.pq.__impl__})",
        "rounds": args.rounds,
        "seconds_per_sample": args.seconds,
    }
    print(json.dumps(meta))
    print(markdown(table))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"meta": meta, "summary": table, "samples": [asdict(s) for s in samples]},
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
