"""Fill a SQLite store directory with N ingested-looking events, fast.

``python -m bench.store_fill --path DIR --events N`` appends events through
the store's own ``SqliteStore.append`` (the same group commit, dedup tiers
and files that ingest writes), skipping only HTTP and signature checks, so
the large-store scenario can start from millions of events in minutes
rather than the hours wrk would take at the router's peak rate.

Each event copies the shape of a request the bench signs (headers, a ~1 KB
Stripe body) with a fresh provider event id of the bench's scattered form,
so dedup keys land all over the key space as real senders' do. The store is
closed cleanly at the end (WAL folded in, dedup runs flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench import signing
from bench.api import STRIPE_SECRET
from hookrouter.ids import new_event_id
from hookrouter.store.base import NewEvent
from hookrouter.store.sqlite.store import SqliteStore

# Appends in flight at once: several full group commits' worth, below the
# store's max_pending (it would answer StoreSaturated).
IN_FLIGHT = 8_192


def sample_request(source_id: str) -> tuple[dict[str, str], bytes, str]:
    """(headers, body, provider id) of one request as the bench signs it."""
    with tempfile.TemporaryDirectory() as tmp:
        stream = signing.Stream(source_id, "stripe", STRIPE_SECRET)
        rs = signing.generate(Path(tmp), [stream], 1)
        _, headers, body = signing.split_request(next(signing.iter_requests(rs)))
        return headers, body, rs.event_id(0)


def _io() -> dict[str, int]:
    """This process's bytes read from and written to the disk so far (/proc/self/io)."""
    out = {}
    for line in Path("/proc/self/io").read_text().splitlines():
        name, _, value = line.partition(": ")
        if name in ("read_bytes", "write_bytes"):
            out[name] = int(value)
    return out


def _runqueue_ns() -> int:
    """ns this (the loop's) thread spent runnable but waiting for a CPU."""
    return int(
        Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").read_text().split()[1]
    )


def _dirty_mib() -> tuple[int, int]:
    """The host's dirty and under-writeback page cache, MiB (/proc/meminfo)."""
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Dirty", "Writeback"):
            values[name] = int(rest.split()[0]) // 1024
    return values.get("Dirty", 0), values.get("Writeback", 0)


def _thread_cpu(tid: int | None) -> float:
    """CPU seconds of one of this process's threads so far (0 when unknown)."""
    if tid is None:
        return 0.0
    try:
        return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0]) / 1e9
    except OSError:
        return 0.0


class ChunkProfile:
    """Per-event cost of the last chunk of appends, as the store grows.

    CPU time and bytes per event do not depend on what else runs on the host;
    the peaks (longest commit, checkpoint, WAL rewind in the chunk) and the
    rate do, so the loop thread's wait for a CPU is reported beside them.
    """

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self._mark()

    def _mark(self) -> None:
        times = os.times()
        self.t = time.monotonic()
        self.cpu = times.user + times.system
        self.io = _io()
        self.rq = _runqueue_ns()
        self.merges = self.store.stats().get("dedup_merges", 0)
        writer, ckpt = self.store._writer, self.store._checkpointer  # bench-only peek
        if writer is not None and ckpt is not None:
            writer.commit_ms_peak = writer.rewind_ms_peak = ckpt.peak_ms = 0.0

    def line(self, stored: int, events: int) -> dict[str, float]:
        times = os.times()
        io, stats = _io(), self.store.stats()
        span = time.monotonic() - self.t
        row = {
            "stored": stored,
            "rate": round(events / span),
            "cpu_us_per_event": round((times.user + times.system - self.cpu) / events * 1e6, 1),
            "write_bytes_per_event": round((io["write_bytes"] - self.io["write_bytes"]) / events),
            "read_bytes_per_event": round((io["read_bytes"] - self.io["read_bytes"]) / events),
            "loop_runqueue_share": round((_runqueue_ns() - self.rq) / 1e9 / span, 3),
            "commit_ms_peak": round(stats["commit_ms_peak"], 1),
            "checkpoint_ms_peak": round(stats["checkpoint_ms_peak"], 1),
            "rewind_ms_peak": round(stats["wal_rewind_ms_peak"], 1),
            "merges": stats.get("dedup_merges", 0) - self.merges,
        }
        self._mark()
        return row


class EventMaker:
    """Events shaped like the bench's signed requests, each with a fresh provider id."""

    def __init__(self, tenant: str, source: str) -> None:
        self.tenant, self.source = tenant, source
        self.headers, self.body, self.sample_id = sample_request(source)
        self.run_id = secrets.token_hex(4)
        self.made = 0

    def next(self) -> NewEvent:
        provider_id = signing.event_id(self.run_id, self.made)
        self.made += 1
        now = time.time()
        return NewEvent(
            event_id=new_event_id(int(now * 1000)),
            tenant_id=self.tenant,
            source_id=self.source,
            provider_event_id=provider_id,
            event_type="invoice.paid",
            received_at=now,
            headers=self.headers,
            body=self.body.replace(self.sample_id.encode(), provider_id.encode(), 1),
        )


def _recorder(
    done: list[tuple[float, float]], due: float, loop: asyncio.AbstractEventLoop
) -> Callable[[object, object], None]:
    def record(_result: object, _error: object) -> None:
        done.append((due, loop.time() - due))

    return record


async def paced(store: SqliteStore, maker: EventMaker, count: int, rate: float) -> None:
    """Append ``count`` events at ``rate``/s (1 ms ticks); print each second's append latency.

    Latency runs from an event's due time to its commit, so a stalled
    commit counts against every event due while it lasted (open loop).
    """
    loop = asyncio.get_running_loop()
    done: list[tuple[float, float]] = []  # (due, latency s)
    start = loop.time()
    sent = 0
    worker: dict[int, tuple[float, int]] = {}  # second -> (dedup worker CPU s, merges) at its start
    dirty: dict[int, tuple[int, int]] = {}  # second -> host's dirty and writeback MiB
    dedup_tid = next(
        (t.native_id for t in threading.enumerate() if t.name == "hookrouter-store-dedup"), None
    )
    while sent < count:
        now = loop.time()
        second = int(now - start)
        if second not in worker:
            worker[second] = (_thread_cpu(dedup_tid), store.dedup_stats()["dedup_merges"])
            dirty[second] = _dirty_mib()
        due_now = min(count, int((now - start) * rate) + 1)
        while sent < due_now:
            store.append_then(maker.next(), _recorder(done, start + sent / rate, loop))
            sent += 1
        await asyncio.sleep(0.001)
    await store.append(maker.next())  # commits resolve in order: all earlier ones are done
    by_second: dict[int, list[float]] = {}
    for due, latency in done:
        by_second.setdefault(int(due - start), []).append(latency * 1000)
    for second, values in sorted(by_second.items()):
        values.sort()
        cpu0, merges0 = worker.get(second, (0.0, 0))
        cpu1, merges1 = worker.get(second + 1, (cpu0, merges0))
        row = {
            "second": second,
            "dedup_worker_cpu_s": round(cpu1 - cpu0, 2),
            "merges_done": merges1 - merges0,
            "dirty_mib": dirty.get(second, (0, 0))[0],
            "writeback_mib": dirty.get(second, (0, 0))[1],
            "p50_ms": round(values[len(values) // 2], 2),
            "p99_ms": round(values[int(len(values) * 0.99) - 1], 2),
            "max_ms": round(values[-1], 2),
        }
        print("SECOND " + json.dumps(row))
    every = sorted(latency * 1000 for _, latency in done)
    total = {f"p{p}_ms": round(every[int(len(every) * p / 100) - 1], 2) for p in (50, 99, 99.9)}
    print("PACED " + json.dumps({**total, "max_ms": round(every[-1], 2), **store.dedup_stats()}))


async def fill(
    path: Path,
    count: int,
    tenant: str,
    source: str,
    profile_every: int = 0,
    paced_events: int = 0,
    rate: float = 0.0,
    merge_duty: float | None = None,
    bucket: int | None = None,
) -> dict[str, float]:
    maker = EventMaker(tenant, source)
    store = SqliteStore(path, bucket_seconds=bucket)
    await store.open()
    if merge_duty is not None and store._dedup is not None:  # bench-only peek
        store._dedup.merge_duty = merge_duty
    profile = ChunkProfile(store) if profile_every else None
    start = time.monotonic()
    pending: list[asyncio.Future[object]] = []
    try:
        for i in range(count):
            pending.append(store.append(maker.next()))  # type: ignore[arg-type]
            if len(pending) >= IN_FLIGHT:
                await asyncio.gather(*pending)
                pending.clear()
            if profile is not None and (i + 1) % profile_every == 0:
                await asyncio.gather(*pending)
                pending.clear()
                print("CHUNK " + json.dumps(profile.line(i + 1, profile_every)), flush=True)
        await asyncio.gather(*pending)
        if paced_events:
            await paced(store, maker, paced_events, rate)
    finally:
        await store.close()
    elapsed = time.monotonic() - start
    return {
        "events": count,
        "seconds": round(elapsed, 1),
        "rate": round(count / max(elapsed, 1e-9)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store_fill", description=__doc__)
    ap.add_argument("--path", required=True, type=Path, help="store directory")
    ap.add_argument("--events", required=True, type=int)
    ap.add_argument("--tenant", default="bench")
    ap.add_argument("--source", default="bench-stripe")
    ap.add_argument(
        "--profile-every", type=int, default=0, help="print the per-event cost every N events"
    )
    ap.add_argument("--paced", type=int, default=0, help="then append N more at --rate")
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--merge-duty", type=float, help="the dedup worker's merge duty cycle")
    ap.add_argument(
        "--bucket", type=int, help="time partitions of this many seconds (default: none)"
    )
    args = ap.parse_args(argv)
    options = (args.profile_every, args.paced, args.rate, args.merge_duty, args.bucket)
    result = asyncio.run(fill(args.path, args.events, args.tenant, args.source, *options))
    print("BENCH-JSON " + json.dumps(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
