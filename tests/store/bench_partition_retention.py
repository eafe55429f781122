"""What a retention pass costs over partitions kept by failed events (on demand).

    .venv/bin/python tests/store/bench_partition_retention.py [--partitions 120] [--delivered 20]

Not collected by pytest. Two stores side by side, each filled through
``SqliteStore.append`` and the ledger with the same events: ``--partitions``
one-minute buckets, each holding ``--delivered`` delivered events and one
failed event (so no bucket is unlinked whole), plus one newest event. One
store has ``bucket_seconds=60`` (a file per bucket), the other none (all in
``events.db``). Then per store: the first pass (which deletes every
delivered event) and ``--rounds`` passes with nothing left to delete (the
steady state: the failed events are scanned again each pass), and the
unlink checks alone (``drop_expired_partitions``, which opens each
candidate file) as often. Prints wall and process-CPU milliseconds per
pass, rows deleted, and the read connection's attaches. Results:
docs/performance.md, "Row retention in the partitions kept".
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.support.store_backends import make_event

from hookrouter.clock import ManualClock
from hookrouter.flow.credits import DeliveryRef
from hookrouter.store.base import AttemptRecord, DeliveryState, NewEvent
from hookrouter.store.ledger import OutcomeRecord
from hookrouter.store.pruner import Pruner
from hookrouter.store.retention import RetentionPolicy
from hookrouter.store.sqlite import SqliteStore, partition_sql, partitions

BUCKET = 60
# Delivered events kept a minute, failed ones a day: every bucket is kept by its failed one.
POLICY = RetentionPolicy(delivered_seconds=60, failed_seconds=86400)


def _outcome(event: NewEvent, state: DeliveryState) -> OutcomeRecord:
    attempt = AttemptRecord(1, 100.0, 3.0, 200 if state is DeliveryState.DELIVERED else 500, None)
    ref = DeliveryRef(event.event_id, "ep_a")
    return OutcomeRecord(ref, state, 1, None, attempt.status_code, None, 100.0, attempt)


async def _fill(store: SqliteStore, starts: list[int], delivered: int) -> None:
    ledger = store.delivery_ledger()
    for start in starts:
        done = [
            make_event(at_ms=(start * 1000 + i * 100), endpoints=("ep_a",))
            for i in range(delivered)
        ]
        failed = make_event(at_ms=(start + 50) * 1000, endpoints=("ep_a",))
        for event in (*done, failed):
            await store.append(event)
        outcomes = [_outcome(e, DeliveryState.DELIVERED) for e in done]
        await ledger.record([*outcomes, _outcome(failed, DeliveryState.DEAD)])
    await ledger.record([])
    await store.append(make_event(at_ms=(starts[-1] + BUCKET + 1) * 1000))


async def _timed(run: Callable[[], Awaitable[int]]) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    deleted = await run()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, deleted


def _reader_attaches(conn: object) -> int:
    attachments = partition_sql.attachments_of(conn)  # type: ignore[arg-type]
    return 0 if attachments is None else attachments.attaches


async def _one(bucket: int | None, starts: list[int], args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "store", bucket_seconds=bucket)
        await store.open()
        try:
            await _fill(store, starts, args.delivered)
            now = starts[-1] + BUCKET + 30
            pruner = Pruner(store, POLICY, ManualClock(wall=now), batch_pause=0)
            first = await _timed(pruner.run_pass)
            steady = [await _timed(pruner.run_pass) for _ in range(args.rounds)]
            cutoffs = POLICY.cutoffs(now)

            async def drops() -> int:
                return len(await store.drop_expired_partitions(cutoffs))

            checks = [await _timed(drops) for _ in range(args.rounds)]
            attaches = await store.run_read(_reader_attaches)
        finally:
            await store.close()
    name = "no bucket" if bucket is None else f"bucket {bucket} s"
    print(
        f"{name:>12}: partitions {len(store.catalog.partitions):4d}"
        f"  first pass {first[0]:8.1f} ms wall {first[1]:8.1f} ms cpu, deleted {first[2]:6d}"
        f"  steady pass median {statistics.median(s[0] for s in steady):7.2f} ms wall"
        f" {statistics.median(s[1] for s in steady):7.2f} ms cpu"
        f" (of which unlink checks {statistics.median(c[1] for c in checks):7.2f} ms cpu)"
        f"  reader attaches {attaches}"
    )


async def _main(args: argparse.Namespace) -> None:
    first = partitions.bucket_start(time.time() - 86400, BUCKET)
    starts = [first + i * BUCKET for i in range(args.partitions)]
    for bucket in (BUCKET, None, BUCKET, None):
        await _one(bucket, starts, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--partitions", type=int, default=120)
    parser.add_argument("--delivered", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
