"""Expire a large time partition by unlink, against DELETE retention of the same events.

``python -m bench.partition_expiry --path DIR --events N --rate R --seconds S [--sides ...]``

1. Fills a store once (``DIR/filled``, reused by later runs) through
   ``SqliteStore.append`` (the real group commit and dedup tiers) with N
   unrouted events received 40 days ago, so that both default retention
   cutoffs (7 and 30 days) have passed.
2. **Unlink**: a fresh store gets a copy of the filled ``events.db`` as a
   sealed time partition (a partition file has the same tables), appends at
   R events/s for S seconds (the baseline), then for S seconds more while
   ``drop_expired_partitions`` removes the partition.
3. **DELETE**: a copy of the filled store, the same two paced runs, the
   second (repeated while it lasts) beside ``SqliteStore.prune`` deleting
   the N events in its write jobs.

Each run prints the append latency of the paced events (due time to commit,
open loop) and the expiry's wall time and the bytes the filesystem got back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from bench.store_fill import EventMaker
from hookrouter.ids import new_event_id
from hookrouter.store.base import NewEvent
from hookrouter.store.retention import RetentionPolicy
from hookrouter.store.sqlite import partition_files, partitions
from hookrouter.store.sqlite.store import SqliteStore

AGE_DAYS = 40
IN_FLIGHT = 8_192


class OldEventMaker(EventMaker):
    """``EventMaker``'s events, received ``AGE_DAYS`` ago."""

    def next(self) -> NewEvent:
        event = super().next()
        at = time.time() - AGE_DAYS * 86400
        return NewEvent(
            new_event_id(int(at * 1000)), event.tenant_id, event.source_id,
            event.provider_event_id, event.event_type, at, event.headers, event.body,
        )  # fmt: skip


async def fill_old(path: Path, count: int) -> None:
    maker = OldEventMaker("bench", "bench-stripe")
    store = SqliteStore(path)
    await store.open()
    try:
        pending: list[asyncio.Future[Any]] = []
        for _ in range(count):
            pending.append(store.append(maker.next()))
            if len(pending) >= IN_FLIGHT:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await store.close()


async def paced(
    store: SqliteStore, rate: float, seconds: float, log: list[tuple[float, float]] | None = None
) -> dict[str, float]:
    """Append at ``rate``/s for ``seconds``; latency percentiles from due time to commit.

    ``log`` gets (due time, latency) of every event, loop clock, seconds.
    """
    maker = EventMaker("bench", "bench-stripe")
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    start, sent, count = loop.time(), 0, int(rate * seconds)

    def recorder(due: float) -> Any:
        return lambda _r, _e: latencies.append(loop.time() - due)

    while sent < count:
        due_now = min(count, int((loop.time() - start) * rate) + 1)
        while sent < due_now:
            store.append_then(maker.next(), recorder(start + sent / rate))
            sent += 1
        await asyncio.sleep(0.001)
    await store.append(maker.next())  # commits resolve in order
    if log is not None:
        log.extend((start + i / rate, lat) for i, lat in enumerate(latencies))
    every = sorted(ms * 1000 for ms in latencies)
    return {
        **{f"p{p}_ms": round(every[int(len(every) * p / 100) - 1], 2) for p in (50, 99, 99.9)},
        "max_ms": round(every[-1], 2),
    }


def _bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def _free(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


async def _expire_rows(store: SqliteStore) -> int:
    cutoffs = RetentionPolicy().cutoffs(time.time())
    deleted, after = 0, None
    while True:
        result = await store.prune(cutoffs, after=after)
        deleted += result.deleted
        after = result.resume_after
        if after is None:
            return deleted


async def _expire_partition(store: SqliteStore) -> int:
    return len(await store.drop_expired_partitions(RetentionPolicy().cutoffs(time.time())))


async def _timed(work: Awaitable[int]) -> tuple[int, float, float]:
    """(result, loop time at start, at end)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    done = await work
    return done, began, loop.time()


def _split(log: list[tuple[float, float]], began: float, ended: float) -> dict[str, Any]:
    """The worst latency of events due while the expiry ran (+0.5 s) and of the others.

    Also when (from the expiry's start) the worst event was due and done,
    and when the unlink ran (``UNLINKS``), to tell which step a stall is.
    """
    inside = [(lat, due) for due, lat in log if began <= due <= ended + 0.5]
    outside = [lat for due, lat in log if not began <= due <= ended + 0.5]
    worst, due = max(inside, default=(0.0, began))
    return {
        "max_ms_while_expiring": round(worst * 1000, 2),
        "max_ms_rest_of_run": round(max(outside, default=0.0) * 1000, 2),
        "worst_due_at_ms": round((due - began) * 1000, 1),
        "worst_done_at_ms": round((due + worst - began) * 1000, 1),
        "unlinks_at_ms": [[round((t - began) * 1000, 1) for t in span] for span in UNLINKS],
    }


UNLINKS: list[tuple[float, float]] = []  # loop-clock spans of partition_files.remove
_remove = partition_files.remove


def _timed_remove(store_dir: Path, partition: partitions.Partition) -> int:
    began = time.monotonic()
    freed = _remove(store_dir, partition)
    UNLINKS.append((began, time.monotonic()))
    return freed


partition_files.remove = _timed_remove  # bench-only: the store calls it through the module


async def measure(store: SqliteStore, rate: float, seconds: float, how: str) -> dict[str, Any]:
    """A baseline paced run, then one with the expiry ``how`` running beside it."""
    baseline = await paced(store, rate, seconds)
    before, free_before = _bytes(store.path), _free(store.path)
    expire = _expire_rows(store) if how == "delete" else _expire_partition(store)
    task = asyncio.ensure_future(_timed(expire))
    log: list[tuple[float, float]] = []
    during = [await paced(store, rate, seconds, log)]
    while not task.done():  # every S-second run the expiry overlaps
        during.append(await paced(store, rate, seconds, log))
    removed, began, ended = await task
    took = ended - began
    await store.checkpoint()
    return {
        "events": store.stats()["appends"],
        "how": how,
        "baseline": baseline,
        "during": during,
        "removed": removed,
        "expiry_s": round(took, 2),
        **_split(log, began, ended),
        "store_mib_before": before >> 20,
        "store_mib_after": _bytes(store.path) >> 20,
        "fs_free_mib_gained": (_free(store.path) - free_before) >> 20,
    }


async def run(
    path: Path, events: int, rate: float, seconds: float, sides: list[str]
) -> list[dict[str, Any]]:
    filled = path / "filled"
    if not (filled / "events.db").exists():  # kept pristine: each side works on a copy
        await fill_old(filled, events)
    results = []
    for how in sides:
        side = path / how
        shutil.rmtree(side, ignore_errors=True)
        store = await (_as_rows(filled, side) if how == "delete" else _as_partition(filled, side))
        os.sync()  # the copy's dirty pages written back before the clock starts
        try:
            results.append(await measure(store, rate, seconds, how))
        finally:
            await store.close()
        shutil.rmtree(side)
    return results


async def _as_rows(filled: Path, side: Path) -> SqliteStore:
    """The filled store itself (a copy), to expire by DELETE."""
    shutil.copytree(filled, side)
    store = SqliteStore(side)
    await store.open()
    return store


async def _as_partition(filled: Path, side: Path) -> SqliteStore:
    """A fresh store with the filled events.db as a sealed, expired partition."""
    store = SqliteStore(side)
    await store.open()
    start = partitions.bucket_start(time.time() - AGE_DAYS * 86400, 6 * 3600)
    copy = side / partitions.partition_file(start)
    shutil.copyfile(filled / "events.db", copy)
    with contextlib.closing(sqlite3.connect(copy)) as conn, conn:
        # Sealing materializes a partition to its newest event (partition_files).
        conn.execute(
            "UPDATE meta SET value = (SELECT max(rowid) FROM events) WHERE key = 'fanout_rowid'"
        )
    partition_files.create(side, start + 6 * 3600, busy_timeout=1.0)
    for bucket in (start, start + 6 * 3600):
        await store.submit_write(lambda c, b=bucket: partitions.record_switch(c, b))
    await store.reload_catalog()
    return store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.partition_expiry", description=__doc__)
    ap.add_argument("--path", required=True, type=Path, help="an empty directory")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--sides", default="unlink,delete", help="which expiries, in order")
    ap.add_argument("--shrink-mib", type=int, help="partition_files.SHRINK_STEP; 0: one unlink")
    ap.add_argument("--shrink-pause", type=float, help="partition_files.SHRINK_PAUSE, seconds")
    args = ap.parse_args(argv)
    if args.shrink_mib is not None:  # bench-only: the step is a module setting
        partition_files.SHRINK_STEP = (args.shrink_mib << 20) or (1 << 62)
    if args.shrink_pause is not None:
        partition_files.SHRINK_PAUSE = args.shrink_pause
    sides = args.sides.split(",")
    for row in asyncio.run(run(args.path, args.events, args.rate, args.seconds, sides)):
        print("BENCH-JSON " + json.dumps(row))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
