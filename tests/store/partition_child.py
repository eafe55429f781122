"""Child process for the partition crash test (not a test module).

Usage: python partition_child.py STORE_DIR BASE_SECONDS

Opens the store and, while 8 producers append events, moves the catalog to
a new bucket and removes the expired one, over and over. It writes a line
to stdout after each step completed: ``A <event id>`` for an acknowledged
append, ``S <start>`` for a recorded switch, ``D <file>`` for a removed
partition; the parent kills it with SIGKILL in the middle of all that.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from hookrouter.ids import new_event_id
from hookrouter.store import NewEvent
from hookrouter.store.retention import Cutoffs
from hookrouter.store.sqlite import SqliteStore, partition_files, partitions

BUCKET = 60


def _say(line: str) -> None:
    os.write(sys.stdout.fileno(), line.encode() + b"\n")  # one unbuffered write per step


async def _produce(store: SqliteStore) -> None:
    while True:
        event = NewEvent(
            new_event_id(), "ten_a", "src_a", None, "crash.test", time.time(),
            {"content-type": "application/json"}, b'{"n": 1}', (),
        )  # fmt: skip
        result = await store.append(event)
        _say(f"A {result.event_id}")


async def _switch_and_expire(store: SqliteStore, base: int) -> None:
    cutoffs = Cutoffs(delivered_before=time.time(), failed_before=time.time())
    start = max(store.catalog.newest.start, base)
    while True:
        start += BUCKET
        await asyncio.to_thread(partition_files.create, store.path, start, busy_timeout=2.0)
        await store.submit_write(lambda c, s=start: partitions.record_switch(c, s))
        store.catalog = await store.run_read(partitions.load)
        _say(f"S {start}")
        for dropped in await store.drop_expired_partitions(cutoffs):
            _say(f"D {dropped}")


async def _main(path: Path, base: int) -> None:
    store = SqliteStore(path)
    await store.open()
    await asyncio.gather(_switch_and_expire(store, base), *(_produce(store) for _ in range(8)))


if __name__ == "__main__":
    asyncio.run(_main(Path(sys.argv[1]), int(sys.argv[2])))
