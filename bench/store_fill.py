"""Fill a SQLite store directory with N ingested-looking events, fast.

``python -m bench.store_fill --path DIR --events N`` appends events through
the store's own ``SqliteStore.append`` (the same group commit, dedup tiers
and files that ingest writes), skipping only HTTP and signature checks, so
the large-store scenario can start from millions of events in minutes
rather than the hours wrk would take at the router's peak rate.

The files are what a router that ingested those events over ``--span``
seconds (a week by default, ending now) would have left: each event's id
and ``received_at`` are stamped at its simulated arrival, evenly spread over
the span, so the writer moves through the time partitions of ``--bucket``
(the router's default) as ingest at that rate would, and the large store is
one sealed partition per bucket of the span plus the current one. The
delivery engine's periodic round (``promote_due``: fan-out watermark,
tenant-index merge) runs beside the appends as in a router, so a router
opening the store does not find millions of events still to merge.
``--span 0`` stamps real arrival times instead, ``--bucket 0`` writes the
single-file layout.

Each event copies the shape of a request the bench signs (headers, a ~1 KB
Stripe body) with a fresh provider event id of the bench's scattered form,
so dedup keys land all over the key space as real senders' do. The store is
closed cleanly at the end (WAL folded in, dedup runs flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import signing
from bench.api import STRIPE_SECRET
from bench.stats import percentiles
from hookrouter.delivery.engine import POLL_INTERVAL, PROMOTE_LIMIT
from hookrouter.ids import MonotonicIds
from hookrouter.store.base import NewEvent
from hookrouter.store.sqlite import fanout, tenant_index
from hookrouter.store.sqlite.partition_sql import On
from hookrouter.store.sqlite.partitions import DEFAULT_BUCKET_SECONDS, bucket_start
from hookrouter.store.sqlite.store import SqliteStore

# Appends in flight at once: several full group commits' worth, below the
# store's max_pending (it would answer StoreSaturated).
IN_FLIGHT = 8_192
# The simulated past the fill spreads its events over by default: the
# router's default retention of delivered events, so its files are those of
# a router that has run for as long as it keeps anything.
WEEK = 7 * 86_400


@dataclass(frozen=True, slots=True)
class Span:
    """Simulated arrival times: ``count`` events evenly over ``seconds`` ending at ``end``."""

    end: float
    seconds: float
    count: int

    def at(self, index: int) -> float:
        """The arrival time (wall seconds) of event ``index`` (the last one at ``end``)."""
        return self.end - self.seconds + (index + 1) * self.seconds / max(1, self.count)


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
        self.last_at = 0.0  # arrival time of the latest event made
        # Ids minted as ingest mints them (hookrouter.ids), at the arrival
        # time given: the id names the event's time partition.
        self._ids = MonotonicIds()

    def next(self, at: float | None = None) -> NewEvent:
        """The next event, arrived at ``at`` (wall seconds; None: now)."""
        provider_id = signing.event_id(self.run_id, self.made)
        self.made += 1
        now = self.last_at = time.time() if at is None else at
        return NewEvent(
            event_id=self._ids(int(now * 1000)),
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
        shares = percentiles(values, (50, 99))
        cpu0, merges0 = worker.get(second, (0.0, 0))
        cpu1, merges1 = worker.get(second + 1, (cpu0, merges0))
        row = {
            "second": second,
            "dedup_worker_cpu_s": round(cpu1 - cpu0, 2),
            "merges_done": merges1 - merges0,
            "dirty_mib": dirty.get(second, (0, 0))[0],
            "writeback_mib": dirty.get(second, (0, 0))[1],
            "p50_ms": round(shares["p50"], 2),
            "p99_ms": round(shares["p99"], 2),
            "max_ms": round(max(values), 2),
        }
        print("SECOND " + json.dumps(row))
    every = [latency * 1000 for _, latency in done]
    total = {f"{k}_ms": round(v, 2) for k, v in percentiles(every, (50, 99, 99.9)).items()}
    print("PACED " + json.dumps({**total, "max_ms": round(max(every), 2), **store.dedup_stats()}))


async def ledger_rounds(store: SqliteStore, now: Callable[[], float], stop: asyncio.Event) -> int:
    """The delivery engine's poll (``promote_due``) every ``POLL_INTERVAL`` until ``stop``.

    Its job is the ledger's periodic round, which raises the fan-out
    watermark and merges the tenant index as ingest goes: without it a
    router opening the store would merge everything the fill wrote in its
    first round. ``now`` is the simulated wall time. Returns the rounds run.
    """
    ledger = store.delivery_ledger()
    rounds = 0
    while not stop.is_set():
        await ledger.promote_due(now(), PROMOTE_LIMIT)
        rounds += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), POLL_INTERVAL)
    return rounds


async def unmerged(store: SqliteStore) -> tuple[int, int]:
    """Events of the newest partition above its fan-out and its tenant-index watermarks."""

    def job(conn: sqlite3.Connection) -> tuple[int, int]:
        on = On(conn, store.catalog.newest)
        newest = fanout.newest_rowid(on)
        merged = on.execute(f"SELECT {tenant_index.WATERMARK_SQL}").fetchone()[0]
        return newest - (fanout.watermark(on) or newest), newest - int(merged)

    return await store.submit_write(job)


async def catch_up(store: SqliteStore, now: float) -> int:
    """Rounds until the newest partition is left as a router leaves it between two polls.

    That is: every event below the last round's newest materialized, fewer
    than ``tenant_index.MERGE_AT`` waiting for the tenant index. A fill
    faster than the rounds' chunk leaves more behind; the rounds take it.
    """
    ledger = store.delivery_ledger()
    rounds = 0
    while True:
        await ledger.promote_due(now, PROMOTE_LIMIT)
        rounds += 1
        fresh, waiting = await unmerged(store)
        if rounds >= 2 and fresh == 0 and waiting < tenant_index.MERGE_AT:
            return rounds


async def fill(
    path: Path,
    count: int,
    tenant: str,
    source: str,
    profile_every: int = 0,
    paced_events: int = 0,
    rate: float = 0.0,
    merge_duty: float | None = None,
    bucket: int | None = DEFAULT_BUCKET_SECONDS,
    span: float = WEEK,
    end: float | None = None,
) -> dict[str, float]:
    """Append ``count`` events to the store at ``path`` (see the module docstring)."""
    maker = EventMaker(tenant, source)
    timeline = Span(time.time() if end is None else end, span, count) if span > 0 else None
    store = SqliteStore(path, bucket_seconds=bucket or None)
    await store.open()
    if merge_duty is not None and store._dedup is not None:  # bench-only peek
        store._dedup.merge_duty = merge_duty
    profile = ChunkProfile(store) if profile_every else None
    start = time.monotonic()
    pending: list[asyncio.Future[object]] = []
    stop = asyncio.Event()
    rounds = asyncio.create_task(ledger_rounds(store, lambda: maker.last_at, stop))
    bucket_now = 0
    try:
        for i in range(count):
            event = maker.next(None if timeline is None else timeline.at(i))
            if timeline is not None and bucket:
                # Ingest never has events of two buckets waiting at once: the
                # appends of the bucket before are committed first, so each
                # goes into its own partition as the writer moves on.
                began = bucket_start(event.received_at, bucket)
                if began != bucket_now:
                    await asyncio.gather(*pending)
                    pending.clear()
                    bucket_now = began
            pending.append(store.append(event))  # type: ignore[arg-type]
            if len(pending) >= IN_FLIGHT:
                await asyncio.gather(*pending)
                pending.clear()
            if profile is not None and (i + 1) % profile_every == 0:
                await asyncio.gather(*pending)
                pending.clear()
                print("CHUNK " + json.dumps(profile.line(i + 1, profile_every)), flush=True)
        await asyncio.gather(*pending)
        stop.set()
        ran = await rounds + await catch_up(store, maker.last_at)
        partitions = len(store.catalog.partitions)
        if paced_events:
            await paced(store, maker, paced_events, rate)
    finally:
        stop.set()
        if not rounds.done():
            rounds.cancel()
        with contextlib.suppress(BaseException):
            await rounds
        await store.close()
    elapsed = time.monotonic() - start
    return {
        "events": count,
        "seconds": round(elapsed, 1),
        "rate": round(count / max(elapsed, 1e-9)),
        "span_s": span,
        "bucket_s": bucket or 0,
        "partitions": partitions,
        "ledger_rounds": ran,
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
        "--bucket",
        type=int,
        default=DEFAULT_BUCKET_SECONDS,
        help="time partitions of this many seconds (default: the router's; 0: a single file)",
    )
    ap.add_argument(
        "--span",
        type=float,
        default=WEEK,
        help="spread the events' arrival times over this many seconds ending now"
        " (default: a week; 0: stamp them as they are appended)",
    )
    args = ap.parse_args(argv)
    options = (
        args.profile_every,
        args.paced,
        args.rate,
        args.merge_duty,
        args.bucket,
        args.span,
    )
    result = asyncio.run(fill(args.path, args.events, args.tenant, args.source, *options))
    print("BENCH-JSON " + json.dumps(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
