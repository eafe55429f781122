"""Publish API: events/s through ``/events:batch``, ``/events`` and ``POST /in/`` (issue 36).

One router, one tenant with no endpoints (ingest and durable commit alone,
as scenario 1), three ways in for the same stream of small JSON events:

* ``POST /in/bench-stripe``: one Stripe-signed webhook per request;
* ``POST /admin/v1/events``: one published event per request (tenant key);
* ``POST /admin/v1/events:batch``: 1000 published events per request.

The load generator is Python (asyncio, keep-alive connections, one request
at a time on each), run on the same machine: single-event rates are bounded
by it as much as by the router; the batch rate much less (one request
carries a thousand events). Events/s counts 2xx answers only.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import urllib.request
from collections.abc import Callable

from bench.api import STRIPE_SECRET, Context, Scenario, Section, Table, Target
from bench.systems import System

BATCH = 1000
TARGET_EVENTS_PER_S = 20_000
PAYLOAD = {"order": 7, "amount": 1299, "currency": "eur", "note": "x" * 200}


def _request(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: bench\r\ncontent-length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"\r\n" + body


def _stripe(counter: list[int]) -> bytes:
    counter[0] += 1
    body = json.dumps(
        {"id": f"evt_pub{counter[0]:012d}", "type": "order.paid", "data": {"object": PAYLOAD}}
    ).encode()
    stamp = int(time.time())
    mac = hmac.new(STRIPE_SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
    sig = f"t={stamp},v1={mac.hexdigest()}"
    return _request("/in/bench-stripe", body, {"stripe-signature": sig})


async def _load(
    port: int, make: Callable[[], bytes], per_request: int, connections: int, seconds: float
) -> float:
    """Events/s acknowledged (2xx) by ``connections`` keep-alive clients for ``seconds``."""
    done = [0]
    deadline = time.monotonic() + seconds

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.monotonic() < deadline:
            writer.write(make())
            status = int((await reader.readuntil(b"\r\n")).split()[1])
            length = 0
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            if 200 <= status < 300:
                done[0] += per_request
        writer.close()

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(connections)))
    return done[0] / (time.monotonic() - started)


def _tenant_key(system: System) -> str:
    req = urllib.request.Request(
        system.url + "/admin/v1/tenants/bench/keys",
        data=b"{}",
        headers={"Authorization": f"Bearer {system.admin_token}"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        key: str = json.loads(resp.read())["key"]
    return key


def run(ctx: Context) -> Section:
    ctx.step("starting hookrouter")
    system = ctx.router(
        {
            "server": {"max_body_bytes": 8 * 1024 * 1024},
            "tenants": [{"id": "bench", "max_backlog": 100_000_000}],
            "sources": [
                {
                    "id": "bench-stripe",
                    "tenant": "bench",
                    "provider": "stripe",
                    "secrets": [STRIPE_SECRET],
                }
            ],
        }
    )
    auth = {"authorization": f"Bearer {_tenant_key(system)}", "content-type": "application/json"}
    single = _request(
        "/admin/v1/events", json.dumps({"type": "order.paid", "payload": PAYLOAD}).encode(), auth
    )
    items = [{"type": "order.paid", "payload": PAYLOAD}] * BATCH
    batch = _request("/admin/v1/events:batch", json.dumps({"events": items}).encode(), auth)
    counter = [0]
    seconds = ctx.seconds(10, 3)
    modes: list[tuple[str, Callable[[], bytes], int, int]] = [
        ("POST /in/ (Stripe-signed webhook)", lambda: _stripe(counter), 1, 64),
        ("POST /admin/v1/events", lambda: single, 1, 64),
        (f"POST /admin/v1/events:batch ({BATCH} per request)", lambda: batch, BATCH, 4),
    ]
    rows, rates = [], {}
    for name, make, per_request, connections in modes:
        measured = []
        for index in range(ctx.runs):
            ctx.step(f"{name}: run {index + 1}/{ctx.runs}")
            measured.append(
                asyncio.run(_load(system.port, make, per_request, connections, seconds))
            )
        rate = sorted(measured)[len(measured) // 2]
        rates[name] = rate
        rows.append([name, connections, round(rate), f"{min(measured):.0f}-{max(measured):.0f}"])
    batch_rate = rates[modes[2][0]]
    return Section(
        text=[__doc__.split("\n\n", 1)[1].strip()] if __doc__ else [],
        tables=[
            Table(
                "Events acknowledged per second (median of runs)",
                ["way in", "connections", "events/s", "range"],
                rows,
            )
        ],
        targets=[
            Target(
                "publish batch throughput",
                f"≥ {TARGET_EVENTS_PER_S:,} events/s",
                f"{batch_rate:,.0f} events/s",
                batch_rate >= TARGET_EVENTS_PER_S,
            )
        ],
        data={"events_per_s": rates},
    )


SCENARIO = Scenario(
    name="publish",
    title="Publish API: batch vs single vs POST /in/",
    order=78,
    run=run,
    summary="events/s through /admin/v1/events:batch, /admin/v1/events and POST /in/",
    needs=(),
    needs_router=True,
    budget_s=(30, 120),
)
