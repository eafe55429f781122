"""CPU of the SQLite store per delivered event (on demand; not collected by pytest).

    .venv/bin/python tests/store/bench_delivery_path.py [--events 20000] [--runs 5]
        [--against OTHER_SRC] [--batch 16]

What one event costs the store on the end-to-end path, without HTTP: a real
``SqliteStore`` (default ``grouping="loop"``) and ``SqliteLedger``; events
(1 KiB body, Stripe-like headers, a provider event id, one endpoint) are
appended ``--batch`` at a time, as concurrent requests join one group commit;
after each batch's commit, the previous batch's deliveries finish and each
records a ``Delivered`` outcome with its attempt the way the delivery engine
does (``ledger.record([record])`` per delivery; the ledger groups them into
one job per flush). Events and records are built before the clock starts, so
the figure is the store's and ledger's own work: Python, SQLite on the loop
thread, and the checkpointer thread (``time.process_time`` counts every
thread of the process). A warm-up of ``--warmup`` events runs first.

``--against PATH`` names a second source tree (e.g. one made with ``git
archive <commit> src | tar -x -C /tmp/base``); runs of the two trees then
alternate, each in a fresh child process with ``PYTHONPATH`` pointing at its
tree, so noise from other users of this shared machine hits both alike. The
summary prints medians over runs.

Results on this shared 2-core VM (medians of 5-8 alternating runs, µs of CPU
per event; runs of a pair vary together by up to ±20 % with the machine's load):

========================================================  ======  ==========
tree                                                      before  after
========================================================  ======  ==========
e3b6482 event status derived, only 'failed' written        55.3    44.4
08092f3 schema v2: partial indexes                         51.7    45.7
both, against 74df230 (user 37.0 -> 23.7, sys 22.7 -> 16.9)  60.8    41.1
========================================================  ======  ==========

Tried and dropped (no gain): committing a cycle's outcome jobs in the same
transaction as its events (one fsync fewer per such cycle: fdatasync per
event 0.153 -> 0.126 in the end-to-end run, CPU per event unchanged within
noise); a longer outcome flush delay (20 ms); one ``json_each`` statement
instead of ``executemany`` for the outcome rows (7.4 vs 6.6 µs); a
``json_each``-free fan-out trigger for single-endpoint events (~0.5 µs);
page sizes 2-16 KiB (4 KiB is best).

What each part of the schema costs, counted rather than timed (2026-12-01:
callgrind, user-space instructions, same statements as ``commit_events`` and
the ledger's ``UPDATE_DELIVERY`` on schema v4, batches of 37 events with one
delivery each, outcomes in batches of ~300, ``synchronous = OFF``; ~123k
instructions per event in all, the Python binding included), by dropping
one part at a time:

=====================================================  ==================
dropped                                                instructions/event
=====================================================  ==================
``deliveries_undelivered`` (inserted at ingest, removed      -13.6k (11 %)
by the outcome, from the oldest end of the pending range)
``json_each`` in the fan-out trigger                          -2.9k
``events_tenant``                                             -2.7k
``PRAGMA foreign_keys`` (a parent probe per delivery row)     -1.8k
``deliveries_retry_due``                                      -0.5k
``events_tenant_stored_status``                                  0
=====================================================  ==================

Of the ~123k: building and inserting the event rows (ids and parameters
included) ~56k, the fan-out at ingest (trigger, delivery row, its index
entries) ~33k, the outcome ``UPDATE`` ~34k.

So the open-work index is the one big lever left in the schema; it serves
page-in, start-up recovery, parking and counts, which would then need
another way to find fresh pending deliveries (e.g. a persisted low-water
mark of event ids below which none is fresh).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE_SRC = Path(__file__).resolve().parents[2] / "src"
BODY = json.dumps({"id": "evt_x", "type": "invoice.paid", "data": {"pad": "x" * 960}}).encode()
HEADERS = {
    "host": "127.0.0.1:18091",
    "content-type": "application/json",
    "content-length": str(len(BODY)),
    "stripe-signature": "t=1796000000,v1=" + "a" * 64,
    "user-agent": "wrk",
}


async def _run(events: int, warmup: int, batch: int, root: Path) -> dict[str, Any]:
    # Imported here: the child process picks the source tree with PYTHONPATH.
    from hookrouter.flow.credits import DeliveryRef
    from hookrouter.ids import new_event_id
    from hookrouter.store.base import AttemptRecord, DeliveryState, NewEvent
    from hookrouter.store.ledger import OutcomeRecord
    from hookrouter.store.sqlite import SqliteStore
    from hookrouter.store.sqlite.ledger import SqliteLedger

    store = SqliteStore(root / "store")
    await store.open()
    ledger = SqliteLedger(store)
    now = time.time()

    def build(n: int, start: int) -> list[tuple[NewEvent, OutcomeRecord]]:
        out = []
        for i in range(start, start + n):
            event = NewEvent(
                new_event_id(),
                "acme",
                "acme-stripe",
                f"evt_provider_{i:09d}",
                "invoice.paid",
                now,
                HEADERS,
                BODY,
                ("sink",),
            )
            attempt = AttemptRecord(1, now, 1.234, 200, None)
            record = OutcomeRecord(
                DeliveryRef(event.event_id, "sink"),
                DeliveryState.DELIVERED,
                1,
                None,
                200,
                None,
                now,
                attempt,
            )
            out.append((event, record))
        return out

    async def drive(work: list[tuple[NewEvent, OutcomeRecord]]) -> None:
        previous: list[OutcomeRecord] = []
        for i in range(0, len(work), batch):
            chunk = work[i : i + batch]
            await asyncio.gather(*(store.append(e) for e, _ in chunk))
            for record in previous:
                ledger.record([record])
            previous = [r for _, r in chunk]
        for record in previous:
            ledger.record([record])
        await ledger.record([])  # barrier: every outcome committed

    await drive(build(warmup, 0))
    work = build(events, warmup)
    cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    await drive(work)
    cpu = time.process_time() - cpu0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    loop_cpu = time.thread_time() - thread0
    wall = time.perf_counter() - wall0
    stats = store.stats()
    await store.close()
    return {
        "cpu_us": cpu / events * 1e6,
        "user_us": (usage.ru_utime - usage0.ru_utime) / events * 1e6,
        "sys_us": (usage.ru_stime - usage0.ru_stime) / events * 1e6,
        "loop_us": loop_cpu / events * 1e6,
        "other_threads_us": (cpu - loop_cpu) / events * 1e6,
        "events_per_s": events / wall,
        "commits": stats["commits"],
        "db_kib": (root / "store" / "events.db").stat().st_size // 1024,
    }


def _child(args: argparse.Namespace) -> None:
    import uvloop

    with tempfile.TemporaryDirectory(prefix="hookrouter-bench-", dir=args.dir) as tmp:
        result = uvloop.run(_run(args.events, args.warmup, args.batch, Path(tmp)))
    print(json.dumps(result))


def _spawn(src: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", "--events", str(args.events)]
    command += ["--warmup", str(args.warmup), "--batch", str(args.batch)]
    if args.dir:
        command += ["--dir", args.dir]
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _main(args: argparse.Namespace) -> None:
    trees = {"this": HERE_SRC}
    if args.against:
        trees["against"] = Path(args.against).resolve()
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for run in range(args.runs):
        for name, src in trees.items():
            row = _spawn(src, args)
            rows[name].append(row)
            print(f"run {run} {name:8s} " + " ".join(f"{k}={_fmt(v)}" for k, v in row.items()))
            sys.stdout.flush()
    print(f"\nmedians over {args.runs} runs ({args.events} events, batches of {args.batch}):")
    for name, results in rows.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(f"{name:8s} {trees[name]} " + " ".join(f"{k}={_fmt(v)}" for k, v in med.items()))


def _fmt(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--batch", type=int, default=16, help="events per group commit")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", default=None, help="another source tree to compare with")
    parser.add_argument("--dir", default=None, help="directory for the database files")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.child:
        _child(parsed)
    else:
        _main(parsed)
