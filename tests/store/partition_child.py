"""Child process for the partition crash test (not a test module).

Usage: python partition_child.py STORE_DIR BASE_SECONDS [KEEP_BUCKETS]

Opens a store with one-minute buckets while 8 producers append events whose
ids run on a fast clock from BASE_SECONDS (a second per event), so the
writer moves to a new bucket every minute of that clock, and retention
removes the expired buckets over and over. It writes a line to stdout after
each step completed: ``A <event id>`` for an acknowledged append,
``S <start>`` when the catalog's newest bucket moved, ``D <file>`` for a
removed partition; the parent kills it with SIGKILL in the middle of all that.
With KEEP_BUCKETS, retention keeps that many buckets behind the newest event
(on the fast clock) instead of expiring every sealed one, so the store holds
more partitions than SQLite attaches to one connection.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
import time
from pathlib import Path

from hookrouter.ids import new_event_id
from hookrouter.store import NewEvent
from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite import SqliteStore

BUCKET = 60


def _say(line: str) -> None:
    os.write(sys.stdout.fileno(), line.encode() + b"\n")  # one unbuffered write per step


async def _produce(store: SqliteStore, clock: itertools.count[int], latest: list[int]) -> None:
    while True:
        at = latest[0] = next(clock)
        event = NewEvent(
            new_event_id(at * 1000), "ten_a", "src_a", None, "crash.test", float(at),
            {"content-type": "application/json"}, b'{"n": 1}', (),
        )  # fmt: skip
        result = await store.append(event)
        _say(f"A {result.event_id}")


class _Switches(logging.Handler):
    """Says ``S <start>`` as the writer logs each switch, right after its commit."""

    def emit(self, record: logging.LogRecord) -> None:
        if "the writer moved to time partition" in record.msg and isinstance(record.args, tuple):
            _say(f"S {record.args[-1]}")


async def _expire(store: SqliteStore, keep: int | None, latest: list[int]) -> None:
    while True:
        await asyncio.sleep(0.01)
        before = time.time() if keep is None else latest[0] - keep * BUCKET
        cutoffs = Cutoffs(delivered_before=before, failed_before=before)
        for dropped in await store.drop_expired_partitions(cutoffs):
            _say(f"D {dropped}")


async def _main(path: Path, base: int, keep: int | None) -> None:
    logger = logging.getLogger("hookrouter.store")
    logger.setLevel(logging.INFO)
    logger.addHandler(_Switches())
    store = SqliteStore(path, bucket_seconds=BUCKET)
    await store.open()
    clock = itertools.count(base)
    latest = [base]
    producers = (_produce(store, clock, latest) for _ in range(8))
    await asyncio.gather(_expire(store, keep, latest), *producers)


if __name__ == "__main__":
    keep = int(sys.argv[3]) if len(sys.argv) > 3 else None
    asyncio.run(_main(Path(sys.argv[1]), int(sys.argv[2]), keep))
