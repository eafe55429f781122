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


async def fill(
    path: Path, count: int, tenant: str, source: str, profile_every: int = 0
) -> dict[str, float]:
    headers, body, sample_id = sample_request(source)
    run_id = secrets.token_hex(4)
    store = SqliteStore(path)
    await store.open()
    profile = ChunkProfile(store) if profile_every else None
    start = time.monotonic()
    pending: list[asyncio.Future[object]] = []
    try:
        for i in range(count):
            provider_id = signing.event_id(run_id, i)
            now = time.time()
            event = NewEvent(
                event_id=new_event_id(int(now * 1000)),
                tenant_id=tenant,
                source_id=source,
                provider_event_id=provider_id,
                event_type="invoice.paid",
                received_at=now,
                headers=headers,
                body=body.replace(sample_id.encode(), provider_id.encode(), 1),
            )
            pending.append(store.append(event))  # type: ignore[arg-type]
            if len(pending) >= IN_FLIGHT:
                await asyncio.gather(*pending)
                pending.clear()
            if profile is not None and (i + 1) % profile_every == 0:
                await asyncio.gather(*pending)
                pending.clear()
                print("CHUNK " + json.dumps(profile.line(i + 1, profile_every)), flush=True)
        await asyncio.gather(*pending)
    finally:
        await store.close()
    elapsed = time.monotonic() - start
    return {"events": count, "seconds": round(elapsed, 1), "rate": round(count / elapsed)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.store_fill", description=__doc__)
    ap.add_argument("--path", required=True, type=Path, help="store directory")
    ap.add_argument("--events", required=True, type=int)
    ap.add_argument("--tenant", default="bench")
    ap.add_argument("--source", default="bench-stripe")
    ap.add_argument(
        "--profile-every", type=int, default=0, help="print the per-event cost every N events"
    )
    args = ap.parse_args(argv)
    result = asyncio.run(fill(args.path, args.events, args.tenant, args.source, args.profile_every))
    print("BENCH-JSON " + json.dumps(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
