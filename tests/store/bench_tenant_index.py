"""CPU per stored event with and without ``events_tenant``, few vs many tenants (on demand).

    .venv/bin/python tests/store/bench_tenant_index.py [--rounds 3] [--rows 60000]

Not collected by pytest. The real schema (``connect`` + ``migrate``: WAL,
``synchronous = FULL``), events inserted in 13-row commits as the group
commit makes them, each to a random tenant of 10 or of 20,000; the four
cases alternate within each round so the host's noise hits them alike, and
the first third of each run is untimed. Prints CPU µs per event, medians
over rounds. Results and what they mean: docs/performance.md, "The four
levers, measured".
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from hookrouter.store.sqlite.schema import DB_FILENAME, connect, migrate

BATCH = 13  # events per commit, as the end-to-end runs' group commits hold
BODY = os.urandom(700)
INSERT = (
    "INSERT INTO events (event_id, tenant_id, source_id, provider_event_id, event_type,"
    " received_at, status, headers, body, endpoints) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _row(i: int, tenant_id: str) -> tuple[object, ...]:
    return (
        f"evt_{i:012d}",
        tenant_id,
        "src",
        f"p{i}",
        "invoice.paid",
        1.0,
        "pending",
        "{}",
        BODY,
        '["ep"]',
    )


def cpu_per_event(root: Path, tenants: int, index: bool, rows: int) -> float:
    """Insert ``rows`` events into a fresh store under ``root``; CPU µs per timed event."""
    conn = connect(root / DB_FILENAME, role="writer", busy_timeout=5.0, create=True)
    migrate(conn)
    if not index:
        conn.execute("DROP INDEX events_tenant")
    owners = [f"t{random.randrange(tenants):06d}" for _ in range(rows)]
    started, timed = 0.0, 0
    for first in range(0, rows, BATCH):
        if first >= rows // 3 and not timed:
            started, timed = time.process_time(), 1
        batch = range(first, min(first + BATCH, rows))
        conn.execute("BEGIN")
        conn.executemany(INSERT, [_row(i, owners[i]) for i in batch])
        conn.execute("COMMIT")
        if first % (BATCH * 400) == 0:  # the checkpointer keeps the WAL short
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    elapsed = time.process_time() - started
    conn.close()
    return elapsed / (rows - rows // 3) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=60_000)
    args = parser.parse_args()
    results: dict[tuple[int, bool], list[float]] = {}
    for _ in range(args.rounds):
        for tenants in (10, 20_000):
            for index in (True, False):
                with tempfile.TemporaryDirectory(prefix="tenant-index-") as tmp:
                    cpu = cpu_per_event(Path(tmp), tenants, index, args.rows)
                results.setdefault((tenants, index), []).append(cpu)
        print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for (tenants, index), cpus in results.items():
        name = "with" if index else "without"
        print(f"{tenants:>6} tenants, {name:>7} events_tenant: {statistics.median(cpus):.1f} µs")


if __name__ == "__main__":
    main()
