"""Compare group-commit designs for the SQLite store (on demand; not collected by pytest).

    .venv/bin/python tests/store/bench_group_commit.py [--seconds 3] [--runs 5]

Designs, all with WAL + synchronous=FULL and the same schema and batch code
(``sqlite_batch.commit_batch``):

* ``thread``: ``SqliteStore`` as shipped: a writer thread takes the whole
  pending batch whenever it is idle; one ``call_soon_threadsafe`` per batch.
* ``loop``: commit on the event-loop thread once per loop turn: the first
  append of a turn schedules ``call_soon(flush)``; ``flush`` commits all
  appends gathered so far and resolves their futures directly.
* ``thread-autockpt``: ``thread`` with SQLite's automatic checkpoint
  (1000 pages) back on and the checkpointer thread stopped, to show what the
  deliberate checkpoints buy in tail latency.

Workload: ``--producers`` coroutines on uvloop, each repeatedly doing ~15 µs
of request-like Python work (HMAC-SHA256 and ``orjson.loads`` of a 1 KiB
body, a fresh event id), then awaiting ``append``. Reported per run:
acknowledged appends/s, ack latency (append -> future resolved) p50/p99,
commit latency (BEGIN..COMMIT) p50/max, events per commit, and event-loop
thread CPU per event. Runs of the designs alternate so that noise from other
users of this shared machine hits them alike; the summary prints medians.
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
from hookrouter.store.sqlite_batch import commit_events
from hookrouter.store.sqlite_schema import DB_FILENAME, connect, migrate

BODY = orjson.dumps({"id": "evt_x", "type": "invoice.paid", "data": {"pad": "x" * 900}})
SECRET = b"whsec_bench"
ENDPOINTS = ("ep_a",)  # one delivery row per event, as for a typical route
HEADERS = {"content-type": "application/json", "webhook-id": "msg_1", "webhook-signature": "v1,x"}


class LoopTurnStore:
    """The alternative design: commit on the loop thread once per loop turn."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.conn = connect(path / DB_FILENAME, role="writer", busy_timeout=2.0, create=True)
        migrate(self.conn)
        self.loop = asyncio.get_running_loop()
        self.events: list[NewEvent] = []
        self.futs: list[asyncio.Future[AppendResult]] = []
        self.commit_ms: list[float] = []
        self.batches: list[int] = []

    def append(self, event: NewEvent) -> asyncio.Future[AppendResult]:
        fut: asyncio.Future[AppendResult] = self.loop.create_future()
        if not self.events:
            self.loop.call_soon(self.flush)
        self.events.append(event)
        self.futs.append(fut)
        return fut

    def flush(self) -> None:
        events, futs = self.events, self.futs
        self.events, self.futs = [], []
        started = time.perf_counter()
        outcome = commit_events(self.conn, events, 0)
        self.commit_ms.append((time.perf_counter() - started) * 1000)
        self.batches.append(len(events))
        for fut, result in zip(futs, outcome.results, strict=True):
            if not fut.done():
                fut.set_result(result)  # type: ignore[arg-type]

    async def close(self) -> None:
        self.conn.close()


async def _producer(
    append: Callable[[NewEvent], asyncio.Future[AppendResult]],
    deadline: float,
    latencies: list[float],
) -> int:
    done = 0
    while time.perf_counter() < deadline:
        # Request-like CPU work: verify a signature, parse the body, mint an id.
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


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def _run_once(design: str, seconds: float, producers: int, root: Path) -> dict[str, Any]:
    path = root / f"{design}-{time.monotonic_ns()}"
    sampler_stop = asyncio.Event()
    commit_samples: list[float] = []
    store: Any
    if design == "loop":
        store = LoopTurnStore(path)
    else:
        store = SqliteStore(path)
        await store.open()
        if design == "thread-autockpt":
            await asyncio.to_thread(store._checkpointer.stop)
            store._writer._conn.execute("PRAGMA wal_autocheckpoint = 1000")

        async def sample() -> None:  # the writer keeps only last/peak; sample the last
            while not sampler_stop.is_set():
                commit_samples.append(store.stats()["commit_ms_last"])
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(sample())
    latencies: list[float] = []
    cpu0 = time.thread_time()
    started = time.perf_counter()
    deadline = started + seconds
    counts = await asyncio.gather(
        *(_producer(store.append, deadline, latencies) for _ in range(producers))
    )
    elapsed = time.perf_counter() - started
    cpu = time.thread_time() - cpu0
    total = sum(counts)
    sampler_stop.set()
    if design == "loop":
        commit_ms, batches = store.commit_ms, store.batches
        mean_batch = statistics.fmean(batches)
        commit_max = max(commit_ms)
    else:
        await sampler
        stats = store.stats()
        commit_ms = commit_samples
        mean_batch = stats["events_per_commit_mean"]
        commit_max = stats["commit_ms_peak"]
    await store.close()
    return {
        "design": design,
        "appends_per_s": total / elapsed,
        "ack_p50_ms": _pct(latencies, 0.50) * 1000,
        "ack_p99_ms": _pct(latencies, 0.99) * 1000,
        "ack_max_ms": max(latencies) * 1000,
        "commit_p50_ms": _pct(commit_ms, 0.50),
        "commit_max_ms": commit_max,
        "events_per_commit": mean_batch,
        "loop_cpu_us_per_event": cpu / total * 1e6,
    }


async def _main(args: argparse.Namespace) -> None:
    designs = args.designs.split(",")
    results: dict[str, list[dict[str, Any]]] = {d: [] for d in designs}
    with tempfile.TemporaryDirectory(prefix="hookrouter-bench-", dir=args.dir) as tmp:
        for run in range(args.runs):
            for design in designs:
                row = await _run_once(design, args.seconds, args.producers, Path(tmp))
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
    parser.add_argument("--designs", default="thread,loop,thread-autockpt")
    parser.add_argument("--dir", default=None, help="directory for the database files")
    parser.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval")
    parsed = parser.parse_args()
    if parsed.switch_interval is not None:
        sys.setswitchinterval(parsed.switch_interval)
    uvloop.run(_main(parsed))
