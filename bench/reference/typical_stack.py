"""The typical stack: the webhook service a Python team writes first.

It is the baseline the router's ratios are quoted against, so it is kept
small, idiomatic and fair -- the same durability, the same data, the same
machine -- and does exactly this per event:

1. FastAPI on uvicorn (``--loop uvloop --http httptools``, one worker, like
   the router's one process) receives ``POST /in/{source_id}``.
2. The Stripe signature is verified with the official SDK
   (``stripe.Webhook.construct_event``, 300 s tolerance), which also parses
   the event.
3. One ``EVALSHA`` of a token-bucket script through redis-py's asyncio
   client (``register_script``: EVALSHA, EVAL on NOSCRIPT) decides the
   tenant's rate limit; a denial is a 429 with Retry-After.
4. The event is inserted into SQLite -- WAL, ``synchronous=FULL``, one
   commit per request, duplicates (same source + provider id) answered with
   the original id -- on one dedicated writer thread (SQLite has one writer
   anyway; running it on the event loop would stall every request behind
   each fsync), and only then answered 200 with the id.
5. Unless started with ``deliver = false``, the committed event goes on an
   in-memory queue; ``delivery_workers`` asyncio tasks POST it with one
   shared aiohttp session (keep-alive pool) to each endpoint of the tenant,
   signed with the ``standardwebhooks`` library, 10 s timeout, and record
   each attempt in SQLite (one commit each). A failed attempt is retried
   after 1, 2, 4, 8 s, then left failed.

What it deliberately lacks (the router's features): group commit, per-tenant
queues, breakers, spill, leases. Its configuration is a JSON file named by
the environment variable ``TYPICAL_STACK_CONFIG``::

    {"db": "/tmp/x/typical.db", "redis_url": "redis://127.0.0.1:6390/0",
     "sources": {"acme-stripe": {"tenant": "acme", "secret": "whsec_..."}},
     "endpoints": {"acme": [{"url": "http://127.0.0.1:8081/acme", "secret": "whsec_..."}]},
     "rate_limit": {"capacity": 1000000, "refill_per_second": 1000000},
     "delivery_workers": 64, "deliver": true}

Run it with ``uvicorn bench.reference.typical_stack:app``; ``GET /stats``
returns its counters for the harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import redis.asyncio as aioredis
import stripe
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from standardwebhooks.webhooks import Webhook

# A token bucket in one atomic script: refill by elapsed time (Redis' clock),
# take one token if there is one, report what is left and when to retry.
BUCKET_LUA = """
local cap, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local saved = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(saved[1]), tonumber(saved[2])
if tokens == nil then tokens = cap
else tokens = math.min(cap, tokens + math.max(0, now - ts) * rate) end
local granted, wait = 0, 0
if tokens >= 1 then granted = 1; tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
return {granted, tostring(wait)}
"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY, source TEXT NOT NULL, provider_id TEXT NOT NULL,
  tenant TEXT NOT NULL, type TEXT, body BLOB NOT NULL, received REAL NOT NULL,
  UNIQUE (source, provider_id));
CREATE TABLE IF NOT EXISTS attempts (
  id INTEGER PRIMARY KEY, event_id INTEGER NOT NULL, endpoint TEXT NOT NULL,
  status INTEGER, error TEXT, at REAL NOT NULL);
"""
RETRY_DELAYS_S = (1, 2, 4, 8)


@dataclass
class Job:
    row_id: int
    tenant: str
    provider_id: str
    body: bytes
    attempt: int = 0
    endpoints: list[dict[str, str]] = field(default_factory=list)


class Store:
    """SQLite on one writer thread: one commit per call."""

    def __init__(self, path: str) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        self.path = path
        self.db: sqlite3.Connection | None = None

    def _open(self) -> None:
        self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    async def call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    def insert(
        self, source: str, pid: str, tenant: str, etype: str, body: bytes
    ) -> tuple[int, bool]:
        assert self.db is not None
        with self.db:  # BEGIN ... COMMIT: one fsync'd commit per request
            cur = self.db.execute(
                "INSERT OR IGNORE INTO events (source, provider_id, tenant, type, body, received)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (source, pid, tenant, etype, body, time.time()),
            )
            if cur.rowcount == 1:
                return int(cur.lastrowid or 0), True
            row = self.db.execute(
                "SELECT id FROM events WHERE source = ? AND provider_id = ?", (source, pid)
            ).fetchone()
            return int(row[0]), False

    def record(self, event_id: int, endpoint: str, status: int | None, error: str | None) -> None:
        assert self.db is not None
        with self.db:
            self.db.execute(
                "INSERT INTO attempts (event_id, endpoint, status, error, at) VALUES (?,?,?,?,?)",
                (event_id, endpoint, status, error, time.time()),
            )

    def counts(self) -> dict[str, int]:
        assert self.db is not None
        events = self.db.execute("SELECT count(*) FROM events").fetchone()[0]
        ok = self.db.execute(
            "SELECT count(*) FROM attempts WHERE status BETWEEN 200 AND 299"
        ).fetchone()[0]
        attempts = self.db.execute("SELECT count(*) FROM attempts").fetchone()[0]
        return {"events": events, "delivered": ok, "attempts": attempts}


class Service:
    """The app's state: config, store, Redis client, delivery queue and workers."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.store = Store(config["db"])
        self.redis = aioredis.from_url(config["redis_url"])
        self.bucket = self.redis.register_script(BUCKET_LUA)
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.session: aiohttp.ClientSession | None = None
        self.workers: list[asyncio.Task[None]] = []
        self.signers = {
            ep["url"]: Webhook(ep["secret"])
            for eps in config.get("endpoints", {}).values()
            for ep in eps
        }
        self.counters = {"accepted": 0, "duplicates": 0, "rejected": 0, "limited": 0}

    async def start(self) -> None:
        await self.store.call(self.store._open)
        if self.config.get("deliver", True):
            limit = aiohttp.TCPConnector(limit=self.config.get("delivery_workers", 64))
            self.session = aiohttp.ClientSession(
                connector=limit, timeout=aiohttp.ClientTimeout(total=10)
            )
            for _ in range(self.config.get("delivery_workers", 64)):
                self.workers.append(asyncio.create_task(self.worker()))

    async def stop(self) -> None:
        for task in self.workers:
            task.cancel()
        if self.session:
            await self.session.close()
        await self.redis.aclose()
        self.store.pool.shutdown(wait=True)

    async def allowed(self, tenant: str) -> tuple[bool, float]:
        rl = self.config["rate_limit"]
        granted, wait = await self.bucket(
            keys=[f"{{{tenant}}}:bucket"], args=[rl["capacity"], rl["refill_per_second"]]
        )
        return bool(granted), float(wait)

    async def worker(self) -> None:
        while True:
            job = await self.queue.get()
            await self.deliver(job)

    async def deliver(self, job: Job) -> None:
        assert self.session is not None
        pending = []
        for ep in job.endpoints:
            now = datetime.now(tz=UTC)
            msg_id = f"msg_{job.row_id}"
            signature = self.signers[ep["url"]].sign(msg_id, now, job.body.decode())
            headers = {
                "content-type": "application/json",
                "webhook-id": msg_id,
                "webhook-timestamp": str(int(now.timestamp())),
                "webhook-signature": signature,
            }
            status: int | None = None
            error: str | None = None
            try:
                async with self.session.post(ep["url"], data=job.body, headers=headers) as resp:
                    await resp.read()
                    status = resp.status
            except (TimeoutError, aiohttp.ClientError) as exc:
                error = type(exc).__name__
            await self.store.call(self.store.record, job.row_id, ep["url"], status, error)
            if status is None or not 200 <= status < 300:
                pending.append(ep)
        if pending and job.attempt < len(RETRY_DELAYS_S):
            retry = Job(job.row_id, job.tenant, job.provider_id, job.body, job.attempt + 1, pending)
            delay = RETRY_DELAYS_S[job.attempt]
            asyncio.get_running_loop().call_later(delay, self.queue.put_nowait, retry)


def _load_config() -> dict[str, Any]:
    path = os.environ.get("TYPICAL_STACK_CONFIG")
    if not path:
        raise RuntimeError("set TYPICAL_STACK_CONFIG to the JSON config file")
    with open(path) as fh:
        return dict(json.load(fh))


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    service = Service(_load_config())
    await service.start()
    app.state.service = service
    yield
    await service.stop()


app = FastAPI(lifespan=lifespan)


@app.post("/in/{source_id}")
async def ingest(source_id: str, request: Request) -> JSONResponse:
    service: Service = request.app.state.service
    source = service.config["sources"].get(source_id)
    if source is None:
        return JSONResponse({"error": "unknown_source"}, status_code=404)
    payload = await request.body()
    try:
        event = stripe.Webhook.construct_event(
            payload, request.headers.get("stripe-signature", ""), source["secret"]
        )
    except (ValueError, stripe.SignatureVerificationError):
        service.counters["rejected"] += 1
        return JSONResponse({"error": "bad_signature"}, status_code=401)
    granted, wait = await service.allowed(source["tenant"])
    if not granted:
        service.counters["limited"] += 1
        headers = {"Retry-After": str(max(1, math.ceil(wait)))}
        return JSONResponse({"error": "rate_limited"}, status_code=429, headers=headers)
    row_id, fresh = await service.store.call(
        service.store.insert, source_id, event["id"], source["tenant"], event["type"], payload
    )
    if not fresh:
        service.counters["duplicates"] += 1
        return JSONResponse({"id": row_id, "duplicate": True})
    service.counters["accepted"] += 1
    endpoints = service.config.get("endpoints", {}).get(source["tenant"], [])
    if service.session is not None and endpoints:
        service.queue.put_nowait(Job(row_id, source["tenant"], event["id"], payload, 0, endpoints))
    return JSONResponse({"id": row_id})


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.get("/stats")
async def stats(request: Request) -> dict[str, Any]:
    service: Service = request.app.state.service
    counts = await service.store.call(service.store.counts)
    return {**service.counters, **counts, "queued": service.queue.qsize()}
