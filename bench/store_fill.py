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
import secrets
import sys
import tempfile
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


async def fill(path: Path, count: int, tenant: str, source: str) -> dict[str, float]:
    headers, body, sample_id = sample_request(source)
    run_id = secrets.token_hex(4)
    store = SqliteStore(path)
    await store.open()
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
    args = ap.parse_args(argv)
    result = asyncio.run(fill(args.path, args.events, args.tenant, args.source))
    print("BENCH-JSON " + json.dumps(result))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
