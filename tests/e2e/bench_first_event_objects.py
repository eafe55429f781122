"""Objects the cyclic collector tracks that a tenant's first event leaves behind (on demand).

    .venv/bin/python tests/e2e/bench_first_event_objects.py [--tenants 300] [--top 25]

Not collected by pytest. One router in this process (the tests' engine and
store), N tenants created through its entity service as a platform does on
sign-up, one Stripe source and one endpoint each, deliveries to a real
receiver. The heap is frozen (``gc.freeze``) before each phase, so after it
``gc.get_objects`` lists only what the phase made and kept:

* *first*: one event to each tenant (every event its tenant's first);
* *again*: one more event to each of the same tenants (state already built).

Printed per tenant and by type: tracked objects each phase kept, and their
difference, i.e. what a first event leaves for the collector to traverse
until it reaches the old generation. Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
from collections import Counter
from pathlib import Path

import aiohttp
from tests.e2e.conftest import put_stripe_tenants, stripe_event
from tests.support.delivery_servers import Receiver
from tests.support.router import base_config

from hookrouter.config import parse_config
from hookrouter.runtime import Router


def _census() -> Counter[str]:
    """Tracked objects made since the last freeze, by type (after a full collection)."""
    gc.collect()
    return Counter(
        f"{type(o).__module__}.{type(o).__qualname__}".removeprefix("builtins.")
        for o in gc.get_objects()
    )


async def _phase(
    http: aiohttp.ClientSession, url: str, receiver: Receiver, router: Router, label: str, n: int
) -> Counter[str]:
    """One event to each of the ``n`` tenants, delivered and settled; what stayed."""
    gc.collect()
    gc.freeze()
    want = len(receiver.requests) + n
    for i in range(n):
        body, headers = stripe_event(f"evt_{label}_{i}")
        async with http.post(f"{url}/in/c{i}-in", data=body, headers=headers) as response:
            assert response.status == 200, response.status
    for _ in range(3000):
        delivery = router.delivery
        if len(receiver.requests) >= want and delivery is not None and delivery.idle():
            break
        await asyncio.sleep(0.01)
    assert len(receiver.requests) >= want, f"{len(receiver.requests)} of {want} arrived"
    await asyncio.sleep(0.2)  # outcomes recorded, page-in and metrics turns done
    return _census()


async def _run(tenants: int, top: int) -> None:
    receiver = await Receiver().start()
    with tempfile.TemporaryDirectory(prefix="census-") as tmp:
        router = Router(parse_config(base_config(Path(tmp) / "data", 0)))
        host, port = await router.start()
        try:
            await put_stripe_tenants(router, tenants, receiver.port)
            url = f"http://{host}:{port}"
            async with aiohttp.ClientSession() as http:
                await _phase(http, url, receiver, router, "warmup", 1)  # one-off lazy state
                first = await _phase(http, url, receiver, router, "first", tenants)
                again = await _phase(http, url, receiver, router, "again", tenants)
        finally:
            gc.unfreeze()
            await router.stop()
            await receiver.stop()
    _report(first, again, tenants, top)


def _report(first: Counter[str], again: Counter[str], tenants: int, top: int) -> None:
    print(f"{'type':<58} {'first':>7} {'again':>7} {'kept':>7}  (per tenant)")
    kinds = sorted(set(first) | set(again), key=lambda k: again[k] - first[k])
    for kind in kinds[:top]:
        f, a = first[kind] / tenants, again[kind] / tenants
        print(f"{kind:<58} {f:7.2f} {a:7.2f} {f - a:7.2f}")
    total_f, total_a = sum(first.values()) / tenants, sum(again.values()) / tenants
    print(f"{'total':<58} {total_f:7.2f} {total_a:7.2f} {total_f - total_a:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tenants", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    asyncio.run(_run(args.tenants, args.top))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
