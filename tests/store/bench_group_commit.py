"""Compare group-commit designs for the SQLite store (on demand; not collected by pytest).

    .venv/bin/python tests/store/bench_group_commit.py [--seconds 3] [--runs 5]

Designs (``SqliteStore(grouping=...)``), all with WAL + synchronous=FULL and
the same one-statement batch commit (``sqlite_batch.commit_events``):

* ``loop`` (the default): commit on the event-loop thread once per loop
  turn; the first append of a turn schedules the flush.
* ``thread``: a writer thread takes the whole pending batch whenever it is
  idle; one ``call_soon_threadsafe`` per batch.
* ``<design>-autockpt``: SQLite's automatic checkpoint (1000 pages) back on
  and the checkpointer thread stopped, to show what deliberate checkpoints
  buy in tail latency.

Workload: ``--producers`` coroutines on uvloop, each repeatedly doing ~8 µs
of request-like Python work (HMAC-SHA256 and ``orjson.loads`` of a 1 KiB
body, a fresh event id), then awaiting ``append``. Reported per run:
acknowledged appends/s, ack latency (append -> future resolved) p50/p99/max,
commit latency (the batch statement) p50/p99/max, events per commit, event-loop
thread CPU per event, and event-loop lag (how late a 1 ms timer fires: the
stall every other task on the loop would see). Runs of the designs alternate
so that noise from other users of this shared machine hits them alike; the
summary prints medians over runs.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import uvloop

from hookrouter.ids import new_event_id
from hookrouter.store.base import AppendResult, NewEvent
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.committer import Committer

BODY = orjson.dumps({"id": "evt_x", "type": "invoice.paid", "data": {"pad": "x" * 900}})
SECRET = b"whsec_bench"
ENDPOINTS = ("ep_a",)  # one delivery row per event, as for a typical route
HEADERS = {"content-type": "application/json", "webhook-id": "msg_1", "webhook-signature": "v1,x"}


# Every commit's duration, recorded by wrapping the committers' bookkeeping.
_COMMIT_MS: list[float] = []
_count_commit = Committer._count_commit


def _recording_count_commit(self: Committer, events: int, duplicates: int, ms: float) -> None:
    if events:
        _COMMIT_MS.append(ms)
    _count_commit(self, events, duplicates, ms)


Committer._count_commit = _recording_count_commit  # type: ignore[method-assign]


async def _producer(
    append: Callable[[NewEvent], asyncio.Future[AppendResult]],
    deadline: float,
    latencies: list[float],
    work: int,
) -> int:
    done = 0
    while time.perf_counter() < deadline:
        # Request-like CPU work: verify a signature, parse the body, mint an id.
        for _ in range(work):
            hmac.new(SECRET, BODY, hashlib.sha256).digest()
            orjson.loads(BODY)
        event = NewEvent(
            new_event_id(),
            "ten_a",
            "src_a",
            None,
            "invoice.paid",
            time.time(),
            HEADERS,
            BODY,
            ENDPOINTS,
        )
        started = time.perf_counter()
        await append(event)
        latencies.append(time.perf_counter() - started)
        done += 1
    return done


async def _loop_lag(lags: list[float], stop: asyncio.Event) -> None:
    """How late a 1 ms timer fires: what every other task on the loop (deliveries,
    health checks, other connections) would wait while the store does its work."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(max(0.0, time.perf_counter() - started - 0.001))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def _run_once(
    design: str, seconds: float, producers: int, root: Path, work: int = 1
) -> dict[str, Any]:
    path = root / f"{design}-{time.monotonic_ns()}"
    stop = asyncio.Event()
    grouping, _, variant = design.partition("-")
    store = SqliteStore(path, grouping=grouping)  # type: ignore[arg-type]
    await store.open()
    if variant == "autockpt":  # SQLite's own checkpoints: in whichever COMMIT crosses 1000 pages
        await asyncio.to_thread(store._checkpointer.stop)  # type: ignore[union-attr]
        store._writer._conn.execute("PRAGMA wal_autocheckpoint = 1000")  # type: ignore[union-attr]
    _COMMIT_MS.clear()
    latencies: list[float] = []
    lags: list[float] = []
    lag_task = asyncio.create_task(_loop_lag(lags, stop))
    cpu0 = time.thread_time()
    started = time.perf_counter()
    deadline = started + seconds
    counts = await asyncio.gather(
        *(_producer(store.append, deadline, latencies, work) for _ in range(producers))
    )
    elapsed = time.perf_counter() - started
    cpu = time.thread_time() - cpu0
    total = sum(counts)
    stop.set()
    await lag_task
    stats = store.stats()
    commit_ms = list(_COMMIT_MS)
    await store.close()
    return {
        "design": design,
        "appends_per_s": total / elapsed,
        "ack_p50_ms": _pct(latencies, 0.50) * 1000,
        "ack_p99_ms": _pct(latencies, 0.99) * 1000,
        "ack_max_ms": max(latencies) * 1000,
        "commit_p50_ms": _pct(commit_ms, 0.50),
        "commit_p99_ms": _pct(commit_ms, 0.99),
        "commit_max_ms": max(commit_ms),
        "events_per_commit": stats["events_per_commit_mean"],
        "loop_cpu_us_per_event": cpu / total * 1e6,
        "loop_lag_p99_ms": _pct(lags, 0.99) * 1000,
        "loop_lag_max_ms": max(lags) * 1000,
        "checkpoint_ms_peak": stats["checkpoint_ms_peak"],
        "wal_rewinds": stats["wal_rewinds"],
        "wal_rewind_ms_peak": stats["wal_rewind_ms_peak"],
        "wal_frames": stats["wal_frames"],
    }


async def _main(args: argparse.Namespace) -> None:
    designs = args.designs.split(",")
    results: dict[str, list[dict[str, Any]]] = {d: [] for d in designs}
    with tempfile.TemporaryDirectory(prefix="hookrouter-bench-", dir=args.dir) as tmp:
        for run in range(args.runs):
            for design in designs:
                row = await _run_once(design, args.seconds, args.producers, Path(tmp), args.work)
                results[design].append(row)
                print(f"run {run} " + " ".join(f"{k}={_fmt(v)}" for k, v in row.items()))
                sys.stdout.flush()
    print("\nmedians over runs:")
    for design, rows in results.items():
        keys = [k for k in rows[0] if k != "design"]
        med = {k: statistics.median(r[k] for r in rows) for k in keys}
        print(f"{design:16s} " + " ".join(f"{k}={_fmt(v)}" for k, v in med.items()))


def _fmt(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--producers", type=int, default=64)
    parser.add_argument("--designs", default="loop,thread,loop-autockpt")
    parser.add_argument(
        "--work", type=int, default=1, help="repeat the per-event work (1 = ~8 µs, 6 = ~35 µs)"
    )
    parser.add_argument("--dir", default=None, help="directory for the database files")
    parser.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval")
    parsed = parser.parse_args()
    if parsed.switch_interval is not None:
        sys.setswitchinterval(parsed.switch_interval)
    uvloop.run(_main(parsed))
