"""CPU and WAL pages per stored event: tenant index per insert or merged (on demand).

    .venv/bin/python tests/store/bench_tenant_index.py [--rounds 3] [--rows 60000]
        [--tenants 1,1000] [--merge-every 4096]

Not collected by pytest. The real schema (``connect`` + ``migrate``: WAL,
``synchronous = FULL``) and the writer's own statement (``batch``), events in
13-row commits as the end-to-end runs' group commits hold, each to a random
tenant of ``--tenants``; two layouts: ``per insert`` (schema version 8, the
``events_tenant`` index) and ``merged`` (version 9, ``tenant_index.merge``
after each commit once ``--merge-every`` events wait, as the ledger's round
does). The cases alternate within each round so the host's noise hits
them alike; the first third of each run is untimed. Prints, medians over
rounds, CPU µs per event (this process: SQLite runs in it) and WAL pages
written per event (the checkpoint then writes each page again). Results:
docs/performance.md ("The tenant index merged in batches").
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from hookrouter.store.base import NewEvent
from hookrouter.store.sqlite import tenant_index
from hookrouter.store.sqlite.batch import _insert_sql, _rows, padded_size
from hookrouter.store.sqlite.schema import DB_FILENAME, MIGRATIONS, connect, migrate

BATCH = 13  # events per commit, as the end-to-end runs' group commits hold
BODY = os.urandom(700)
LAYOUTS = ("per insert", "merged")


def _event(i: int, tenant_id: str) -> NewEvent:
    return NewEvent(
        event_id=f"evt_{i:012d}",
        tenant_id=tenant_id,
        source_id="src",
        provider_event_id=f"p{i}",
        event_type="invoice.paid",
        received_at=1.0,
        headers={"content-type": "application/json"},
        body=BODY,
        endpoint_ids=("ep",),
    )


def _wal_pages(wal: Path, page: int) -> int:
    return max(0, wal.stat().st_size - 32) // (page + 24) if wal.exists() else 0


def run(root: Path, tenants: int, layout: str, rows: int, merge_every: int) -> tuple[float, float]:
    """Insert ``rows`` events into a fresh store; (CPU µs, WAL pages) per timed event."""
    db = root / DB_FILENAME
    conn = connect(db, role="writer", busy_timeout=5.0, create=True)
    migrate(conn, MIGRATIONS if layout == "merged" else MIGRATIONS[:8])
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    wal = root / f"{DB_FILENAME}-wal"
    owners = [f"t{random.randrange(tenants):06d}" for _ in range(rows)]
    started, timed, pages = 0.0, False, 0
    for first in range(0, rows, BATCH):
        if first >= rows // 3 and not timed:
            started, timed = time.process_time(), True
        batch = [_event(i, owners[i]) for i in range(first, min(first + BATCH, rows))]
        conn.execute(_insert_sql(padded_size(len(batch))), _rows(batch))
        if layout == "merged":  # as the ledger's round: once a batch waits
            conn.execute("BEGIN")
            tenant_index.merge(conn, merge_every)
            conn.execute("COMMIT")
        if first % (BATCH * 400) == 0:  # the checkpointer keeps the WAL short
            pages += _wal_pages(wal, page) if timed else 0
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages += _wal_pages(wal, page)
    elapsed = time.process_time() - started
    conn.close()
    timed_rows = rows - rows // 3
    return elapsed / timed_rows * 1e6, pages / timed_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--tenants", default="1,1000")
    parser.add_argument("--merge-every", type=int, default=tenant_index.MERGE_AT)
    args = parser.parse_args()
    counts = [int(n) for n in args.tenants.split(",")]
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for tenants in counts:
            for layout in LAYOUTS:
                with tempfile.TemporaryDirectory(prefix="tenant-index-") as tmp:
                    got = run(Path(tmp), tenants, layout, args.rows, args.merge_every)
                results.setdefault((tenants, layout), []).append(got)
        print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for (tenants, layout), values in results.items():
        cpu = statistics.median(v[0] for v in values)
        pages = statistics.median(v[1] for v in values)
        print(f"{tenants:>6} tenants, {layout:>10}: {cpu:.1f} µs CPU, {pages:.2f} WAL pages/event")


if __name__ == "__main__":
    main()
