"""What a tenant's first delivery leaves behind in the engine's state (on demand).

    .venv/bin/python tests/delivery/bench_tenant_state.py [--tenants 2000] [--rounds 5]

Not collected by pytest. For each of N tenants (one endpoint each, the shape
``bench.tenant_cost`` stores) it builds what a first event builds on the
delivery side, with the engine's own classes: the credit queue with one
delivery offered, taken and finished, the scheduler's record, the endpoint
runtime (target, signer, shared retry policy, breaker) with one result in its
breaker and health. Prints, per tenant: Python heap bytes kept (tracemalloc),
objects the cyclic collector tracks, and the CPU µs to build it (median of
``--rounds``, collector off). Run it on two trees (``PYTHONPATH=<tree>/src``)
to compare; figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import base64
import gc
import statistics
import time
import tracemalloc
from typing import Any

from hookrouter.config.catalog import Catalog
from hookrouter.config.delivery import DeliverySettings
from hookrouter.config.entities import EndpointConfig, TenantConfig
from hookrouter.delivery.endpoints import EndpointTable
from hookrouter.flow.credits import CreditQueue, DeliveryRef
from hookrouter.flow.scheduler import FairScheduler

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()


def catalog_of(tenants: int) -> Catalog:
    return Catalog(
        [TenantConfig(f"t{i:06d}") for i in range(tenants)],
        [],
        [
            EndpointConfig(f"t{i:06d}-ep", f"t{i:06d}", f"http://127.0.0.1:9/t{i:06d}", SECRET)
            for i in range(tenants)
        ],
    )


def first_deliveries(catalog: Catalog, tenants: int) -> list[Any]:
    """The state N first deliveries leave; returned so that it stays alive."""
    scheduler = FairScheduler()
    table = EndpointTable(DeliverySettings(allow_private_networks=True))
    queues = []
    for i in range(tenants):
        tenant, endpoint = f"t{i:06d}", f"t{i:06d}-ep"
        queue = CreditQueue(tenant, 1000, endpoint_count=1)
        scheduler.add(queue)
        ref = DeliveryRef(f"evt_{i:012d}", endpoint)
        queue.offer(ref)
        (taken,) = queue.take(1)
        runtime = table.get(catalog, endpoint)
        assert runtime is not None
        runtime.breaker.record(True, 1000.0)
        table.observe(endpoint, True, 3.0, 1000.0)
        queue.finish(taken)
        queues.append(queue)
    return [scheduler, table, queues]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tenants", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = args.tenants
    catalog = catalog_of(n)
    gc.collect()
    gc.disable()
    cpus = []
    for _ in range(args.rounds):
        t0 = time.process_time()
        kept = first_deliveries(catalog, n)
        cpus.append((time.process_time() - t0) / n * 1e6)
        del kept
    gc.enable()
    gc.collect()
    tracked = len(gc.get_objects())
    tracemalloc.start()
    kept = first_deliveries(catalog, n)
    gc.collect()
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    objects = len(gc.get_objects()) - tracked
    print(
        f"{n} tenants: {size / n:.0f} bytes, {objects / n:.1f} tracked objects,"
        f" {statistics.median(cpus):.2f} µs CPU per tenant's first delivery"
    )
    del kept


if __name__ == "__main__":
    main()
