"""What the provider-id dedup index costs a group commit (on demand; not collected by pytest).

    .venv/bin/python -m tests.store.bench_dedup_index [--preload 200000] [--events 60000]
        [--batch 64] [--runs 2]

(run from the repository root: the events come from the suite's ``make_event``).

A fresh store file (created and migrated as ``SqliteStore.open`` does) is
filled with ``--preload`` events (random provider event ids, as Stripe's
are), then ``--events`` more are committed ``--batch`` at a time
with ``sqlite_batch.commit_events`` on one connection, a PASSIVE checkpoint
every 25 commits. Printed per variant: CPU (user, sys) and wall time per
event. Variants alternate within each run: the schema as shipped, without
``events_dedup`` and without ``events_tenant`` (the two secondary indexes an
append writes).

Why it exists: a random key spreads a batch over as many index leaves as it
has events once the index has more leaves than that (~70 keys per 4 KiB
leaf), so each event dirties one 4 KiB page of its own that the WAL and then
the checkpoint write out. Measured on this 2-core VM (2 runs, 200k preloaded,
batches of 64), µs per event:

==========================  ===========  ===========
variant                     CPU          wall
==========================  ===========  ===========
schema as shipped           31.0 / 38.0  47.3 / 54.7
without events_dedup        17.3 / 14.8  21.7 / 18.8
without events_tenant       36.8 / 31.8  52.7 / 47.4
==========================  ===========  ===========

So at steady state the exact dedup index is about half of the store's cost
per event, and the ingest CPU per request grows with the number of stored
events until the index outgrows a batch (a few thousand events). Tried on
the same script, no gain: page sizes 2 and 8 KiB (4 KiB best, as in
``bench_delivery_path``), a 16 or 64 MiB writer page cache. A smaller key (a
64-bit hash) does not help either: the index has fewer leaves but still more
than a batch, so each insert still dirties its own page. Making inserts local
would need an LSM-like tier whose merges are much larger than the index, not
a change of key.
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

from tests.support.store_backends import make_event

from hookrouter.store.base import NewEvent
from hookrouter.store.sqlite.batch import commit_events
from hookrouter.store.sqlite.dedup import attach_runs, connect_runs, ensure_store_id, open_tiers
from hookrouter.store.sqlite.dedup_tiers import DedupTiers, TierPolicy
from hookrouter.store.sqlite.dedup_worker import DedupWorker
from hookrouter.store.sqlite.schema import connect, migrate

BODY = b'{"id":"evt_x","type":"invoice.paid","data":{"pad":"' + b"x" * 960 + b'"}}'
HEADERS = {
    "host": "127.0.0.1:8080",
    "content-type": "application/json",
    "stripe-signature": "t=1796000000,v1=" + "a" * 64,
    "user-agent": "bench",
}
# The index every append paid for until schema version 3 (now the dedup tiers' job).
V2_INDEX = """CREATE UNIQUE INDEX events_dedup ON events (source_id, provider_event_id)
    WHERE provider_event_id IS NOT NULL"""
VARIANTS = {"dedup tiers (as shipped)": None, "plus the v2 unique index": V2_INDEX}
CHECKPOINT_EVERY = 25  # commits


def _event() -> NewEvent:
    return make_event(
        tenant="t",
        source="s",
        provider_event_id="evt_" + uuid.uuid4().hex[:24],
        endpoints=("ep",),
        body=BODY,
        headers=HEADERS,
        event_type="invoice.paid",
    )


def _measure(extra_index: str | None, args: argparse.Namespace) -> tuple[float, float, float]:
    """CPU of the whole process (the dedup worker's thread included) per event."""
    with tempfile.TemporaryDirectory(prefix="hookrouter-dedup-") as tmp:
        db, runs_db = Path(tmp) / "events.db", Path(tmp) / "dedup.db"
        conn = connect(db, role="writer", busy_timeout=5.0, create=True)
        migrate(conn)
        if extra_index:
            conn.execute(extra_index)
        runs = connect_runs(runs_db, db)
        tiers = open_tiers(runs, ensure_store_id(conn), TierPolicy())
        attach_runs(conn, runs_db)
        worker = DedupWorker(runs, tiers)
        worker.start()
        try:
            last = _commit_all(conn, tiers, worker, [_event() for _ in range(args.preload)], 1024)
            conn.execute("PRAGMA main.wal_checkpoint(TRUNCATE)")
            events = [_event() for _ in range(args.events)]
            before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            worker_before = worker.cpu_seconds
            _commit_all(conn, tiers, worker, events, args.batch, last)
            after, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            spent = (worker.cpu_seconds - worker_before) / len(events) * 1e6
            print(f"  (of which the dedup worker: {spent:.1f} us/event)")
        finally:
            worker.stop()
            conn.close()
    n = len(events)
    user = (after.ru_utime - before.ru_utime) / n * 1e6
    system = (after.ru_stime - before.ru_stime) / n * 1e6
    return user, system, (t1 - t0) / n * 1e6


def _commit_all(
    conn: sqlite3.Connection,
    tiers: DedupTiers,
    worker: DedupWorker,
    events: list[NewEvent],
    batch: int,
    last: int = 0,
) -> int:
    """Commit ``events`` ``batch`` at a time as the committer does; wait for the worker."""
    for commit, start in enumerate(range(0, len(events), batch)):
        last = commit_events(conn, events[start : start + batch], last, tiers).last_rowid
        if tiers.rotation_due():
            worker.flush(tiers.rotate(last), last)
        if commit % CHECKPOINT_EVERY == 0:
            conn.execute("PRAGMA main.wal_checkpoint(PASSIVE)")
    while not worker.settled():
        time.sleep(0.01)
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preload", type=int, default=200_000)
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    for run in range(args.runs):
        for name, drop in VARIANTS.items():
            user, system, wall = _measure(drop, args)
            print(
                f"run {run} {name:24s} cpu {user + system:5.1f} us/event"
                f" (user {user:4.1f}, sys {system:4.1f})  wall {wall:5.1f} us/event",
                flush=True,
            )


if __name__ == "__main__":
    main()
