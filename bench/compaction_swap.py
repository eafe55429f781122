"""What a compaction's swap costs the writer: the copy made on it, against the copy made ahead.

``python -m bench.compaction_swap [--events N] [--kept K] [--rounds R] [--out FILE]``

Builds one sealed time partition the way a busy hour leaves it (N events of
~1 KB over 1,000 tenants, each with its delivery and attempt rows and its
tenant-index entry), K of them dead-lettered, the rest delivered and past
their cutoff: the partition retention compacts (``store/sqlite/compaction``).
Then, alternating, R rounds of what the writer's job does per compaction:

- **copy on the writer** (before): the fingerprint, then ``copy_kept``
  (copy the kept rows into a new file, commit and sync it, close it);
- **copy made ahead** (now): the fingerprint, a commit (the job commits
  the cycle's work before it asks), and the copy's watch read once; the
  copy itself runs on a thread beforehand and is not timed here.

Each round gets a fresh target file (made outside the timing). Medians in
ms, on the calling thread; the writer's job blocks appends (and, on the
loop committer, the loop) for this long.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hookrouter.store.sqlite import compaction, partition_files
from hookrouter.store.sqlite.partition_sql import On
from hookrouter.store.sqlite.partitions import Partition
from hookrouter.store.sqlite.schema import connect

TENANTS = 1_000
BODY_BYTES = 1_000
_FILL: str = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
INSERT INTO events (event_id, tenant_id, source_id, provider_event_id, event_type,
                    received_at, status, headers, body, endpoints)
SELECT printf('evt_%012d', i), printf('t%06d', i % {tenants}), 'src', printf('p%012d', i),
       'invoice.paid', 1.0e9 + i / 1000.0,
       CASE WHEN i % ?2 = 0 THEN 'failed' ELSE 'delivered' END,
       '{{"content-type":"application/json"}}', randomblob({body}), NULL
FROM n"""
_DELIVERIES = """
INSERT INTO deliveries (event_id, endpoint_id, tenant_id, state, attempts, next_attempt_at,
                        last_status_code, last_error, updated_at, last_attempt,
                        last_started_at, last_duration_ms)
SELECT event_id, 'ep', tenant_id, CASE status WHEN 'failed' THEN 'dead' ELSE 'delivered' END,
       1, NULL, CASE status WHEN 'failed' THEN 500 ELSE 200 END, NULL, received_at + 0.1, 1,
       received_at, 3.0
FROM events"""
_ATTEMPTS = """
INSERT INTO attempts (event_id, endpoint_id, attempt, started_at, duration_ms, status_code,
                      error, response_excerpt)
SELECT event_id, endpoint_id, 1, last_started_at, 3.0, last_status_code, NULL, 'ok'
FROM deliveries"""
_TENANT_INDEX = (
    "INSERT INTO tenant_events (run, tenant_id, event_id)"
    " SELECT 1, tenant_id, event_id FROM events ORDER BY tenant_id, event_id"
)
_TENANT_RUN = (
    "INSERT INTO tenant_runs (run, lo, hi, size) SELECT 1, 0, max(rowid), count(*) FROM events"
)


def build(directory: Path, events: int, kept: int) -> Partition:
    """The sealed partition: ``events`` events of which every ``events // kept``-th failed."""
    partition = Partition(start=1_000_000_000, end=1_000_003_600, file="p-old.db")
    partition_files.create_named(directory, partition.file, busy_timeout=5)
    conn = sqlite3.connect(directory / partition.file, isolation_level=None)
    try:
        conn.execute("BEGIN")
        fill = _FILL.format(tenants=TENANTS, body=BODY_BYTES)
        conn.execute(fill, (events, max(1, events // kept)))
        for statement in (_DELIVERIES, _ATTEMPTS, _TENANT_INDEX, _TENANT_RUN):
            conn.execute(statement)
        newest = "(SELECT max(rowid) FROM events)"
        conn.execute(f"UPDATE meta SET value = {newest}")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return partition


def plan_of(directory: Path, partition: Partition) -> compaction.Plan:
    """What ``compaction.plan`` would find: the failed events and the newest row kept."""
    conn = connect(directory / "events.db", role="reader", busy_timeout=5, create=True)
    try:
        on = On(conn, partition)
        kept = [
            int(r[0])
            for r in on.execute(
                "SELECT rowid FROM events WHERE status = 'failed'"
                " OR rowid = (SELECT max(rowid) FROM events)"
            )
        ]
        total = int(on.execute("SELECT count(*) FROM events").fetchone()[0])
        return compaction.Plan(partition, tuple(kept), total, compaction.fingerprint(on))
    finally:
        conn.close()


def _before(
    writer: sqlite3.Connection, directory: Path, plan: compaction.Plan, target: str
) -> float:
    """The writer's job until now: the fingerprint, then the copy made on it."""
    started = time.perf_counter()
    writer.execute("BEGIN IMMEDIATE")
    compaction.fingerprint(On(writer, plan.partition))
    copy = compaction.copy_kept(directory, plan, target, busy_timeout=5)
    writer.execute("ROLLBACK")
    elapsed = (time.perf_counter() - started) * 1000
    copy.watch.close()  # opened with the copy, so counted on this side
    return elapsed


def _now(writer: sqlite3.Connection, copy: compaction.Copy) -> float:
    """The writer's job now: the fingerprint, the cycle's commit, the copy's watch read."""
    started = time.perf_counter()
    writer.execute("BEGIN IMMEDIATE")
    compaction.fingerprint(On(writer, copy.plan.partition))
    writer.execute("COMMIT")  # the job commits the cycle's work before it asks the watch
    changed = copy.watch.changed()
    elapsed = (time.perf_counter() - started) * 1000
    if changed:
        raise AssertionError("nothing wrote to the old partition, yet its version moved")
    return elapsed


def measure(directory: Path, plan: compaction.Plan, rounds: int) -> dict[str, list[float]]:
    """Per round, ms on this thread: the writer's work before and now."""
    writer = connect(directory / "events.db", role="writer", busy_timeout=5)
    out: dict[str, list[float]] = {"copy on the writer": [], "copy made ahead": []}
    try:
        for index in range(rounds):
            target = f"p-new-{index}.db"
            partition_files.create_named(directory, target, busy_timeout=5)
            out["copy on the writer"].append(_before(writer, directory, plan, target))
            partition_files.remove(directory, Partition(0, None, target))
            partition_files.create_named(directory, target, busy_timeout=5)
            copy = compaction.copy_kept(directory, plan, target, busy_timeout=5)
            try:
                out["copy made ahead"].append(_now(writer, copy))
            finally:
                copy.watch.close()
            partition_files.remove(directory, Partition(0, None, target))
    finally:
        writer.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--kept", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    directory = Path(tempfile.mkdtemp(prefix="compaction-swap-"))
    try:
        started = time.perf_counter()
        partition = build(directory, args.events, args.kept)
        built_s = time.perf_counter() - started
        plan = plan_of(directory, partition)
        rounds = measure(directory, plan, args.rounds)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result = {
        "events": args.events,
        "kept": len(plan.kept),
        "build_s": round(built_s, 1),
        "rounds_ms": {k: [round(v, 2) for v in vs] for k, vs in rounds.items()},
        "median_ms": {k: round(statistics.median(vs), 2) for k, vs in rounds.items()},
    }
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
