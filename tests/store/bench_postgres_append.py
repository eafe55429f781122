"""Appends and outcomes: rate and CPU per event, PostgreSQL store beside SQLite (on demand).

    .venv/bin/python tests/store/bench_postgres_append.py [--seconds 3] [--producers 64]
        [--rounds 3]

Each round starts ``--producers`` tasks that append events (512-byte body,
a provider event id, one endpoint) in a loop for ``--seconds``, on a
``PostgresStore`` over its own PostgreSQL (tests/support/postgres_servers.py,
``fsync=on``, ``synchronous_commit=on``) and on a ``SqliteStore`` (loop
grouping) in a temporary directory, alternating. Client CPU is
``time.process_time`` of this process (the PostgreSQL server's own CPU is
not in it) divided by acknowledged events; server CPU is the user + system
time of the postmaster and all its children (backends, WAL writer,
checkpointer) over the round, from psutil. Then every acknowledged event's
delivery is recorded as delivered through the ledger, ``--producers`` outcomes
at a time (one flush each), for the CPU per outcome. Figures:
docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.postgres_servers import postgres_server
from tests.support.store_backends import make_event

from hookrouter.flow.credits import DeliveryRef
from hookrouter.store import DeliveryState, EventStore, NewEvent
from hookrouter.store.ledger import AttemptRecord, OutcomeRecord
from hookrouter.store.postgres import PostgresStore
from hookrouter.store.sqlite import SqliteStore

BODY = b"x" * 512


def server_cpu(pid: int | None) -> float:
    """CPU seconds of the postmaster and its children so far (0 for SQLite)."""
    if pid is None:
        return 0.0
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


async def flood(
    store: EventStore, seconds: float, producers: int, server_pid: int | None
) -> tuple[float, float, float, dict]:
    await store.open()
    stop = time.monotonic() + seconds
    acked: list[NewEvent] = []
    serial = 0

    async def producer() -> None:
        nonlocal serial
        while time.monotonic() < stop:
            serial += 1
            event = make_event(provider_event_id=f"pe_{serial}", body=BODY, endpoints=("ep_a",))
            await store.append(event)
            acked.append(event)

    cpu0, wall0, server0 = time.process_time(), time.monotonic(), server_cpu(server_pid)
    await asyncio.gather(*(producer() for _ in range(producers)))
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    server = server_cpu(server_pid) - server0
    stats = store.stats()
    stats["outcome_client_us"], stats["outcome_server_us"] = await outcomes(
        store, acked, producers, server_pid
    )
    await store.close()
    count = len(acked)
    return count / wall, cpu / count * 1e6, server / count * 1e6, stats


async def outcomes(
    store: EventStore, events: list[NewEvent], batch: int, server_pid: int | None
) -> tuple[float, float]:
    """Client and server CPU µs per delivered outcome, recorded ``batch`` at a time."""
    ledger = store.delivery_ledger()
    assert ledger is not None
    records = [
        OutcomeRecord(
            DeliveryRef(e.event_id, "ep_a"), DeliveryState.DELIVERED, 1, None, 200, None,
            time.time(), AttemptRecord(1, time.time(), 3.0, 200, None), True, e.tenant_id,
        )
        for e in events
    ]  # fmt: skip
    cpu0, server0 = time.process_time(), server_cpu(server_pid)
    for start in range(0, len(records), batch):
        await asyncio.gather(*(ledger.record([r]) for r in records[start : start + batch]))
    cpu, server = time.process_time() - cpu0, server_cpu(server_pid) - server0
    return cpu / len(records) * 1e6, server / len(records) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--producers", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, ...]]] = {"postgres": [], "sqlite": []}
    with postgres_server() as server, tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for kind in ("postgres", "sqlite") if round_ % 2 == 0 else ("sqlite", "postgres"):
                store: EventStore
                if kind == "postgres":
                    store = PostgresStore(server.dsn, schema_name=f"b{round_}")
                    pid = server.pid
                else:
                    store = SqliteStore(Path(tmp) / f"s{round_}")
                    pid = None
                rate, cpu_us, server_us, stats = await flood(
                    store, args.seconds, args.producers, pid
                )
                mean = stats["events_per_commit_mean"]
                out_c, out_s = stats["outcome_client_us"], stats["outcome_server_us"]
                results[kind].append((rate, cpu_us, server_us, mean, out_c, out_s))
                print(
                    f"round {round_} {kind:8} {rate:8.0f} ev/s {cpu_us:6.1f} µs/ev client"
                    f" {server_us:6.1f} µs/ev server {mean:6.1f} ev/commit;"
                    f" outcome {out_c:6.1f} µs client {out_s:6.1f} µs server",
                    flush=True,
                )
    for kind, rows in results.items():
        print(
            f"median {kind:8} {statistics.median(r[0] for r in rows):8.0f} ev/s"
            f" {statistics.median(r[1] for r in rows):6.1f} µs/ev client"
            f" {statistics.median(r[2] for r in rows):6.1f} µs/ev server"
            f" {statistics.median(r[3] for r in rows):6.1f} ev/commit;"
            f" outcome {statistics.median(r[4] for r in rows):6.1f} µs client"
            f" {statistics.median(r[5] for r in rows):6.1f} µs server"
        )


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
