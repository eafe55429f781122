"""The per-tenant records declared ``acyclic`` for mypyc (hookrouter/heap.py).

An acyclic instance is not tracked by the cyclic collector, so a young
collection never scans it; the promise that makes this safe is that nothing
it reaches refers back to it (a reference cycle through an untracked object
is never collected). The first two tests hold the promise, in either build,
for the records a delivery leaves behind and for a source's verifiers; the
last checks that the compiled build keeps them all out of the collector's
view.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Iterator

import pytest

from hookrouter.buildinfo import compiled_status
from hookrouter.delivery.engine import DeliveryEngine
from hookrouter.verify.standard import StandardVerifier
from hookrouter.verify.stripe import StripeVerifier

from .test_tenant_scale import SECRET, World, delivered, world  # noqa: F401 (the fixture)
from .test_worker import until

_SKIPPED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
_WALK_LIMIT = 200_000


def _records(engine: DeliveryEngine, tenant_id: str, endpoint_id: str) -> dict[str, object]:
    """The acyclic records a tenant's delivery left in ``engine``."""
    tenant = engine._tenants[tenant_id]
    runtime = tenant.runtime
    assert runtime is not None, "the tenant's record holds the runtime it delivered to"
    return {
        "tenant record": tenant,
        "backlog count": tenant.backlog,
        "lane": tenant.queue._find(endpoint_id),
        "endpoint runtime": runtime,
        "breaker": runtime.breaker,
        "prepared endpoint": engine.endpoints._prepared[endpoint_id],
        "signer": runtime.signer,
        "delivered count": tenant.delivered,
        "latency histogram": tenant.latency,
    }


def _fields(obj: object) -> Iterator[object]:
    """What ``obj`` refers to: its referents, and for the router's own classes their fields.

    An untracked record has no referents for ``gc``, so its fields are read.
    """
    yield from gc.get_referents(obj)
    if not type(obj).__module__.startswith("hookrouter."):
        return  # builtins' descriptors (float.real, ...) make new objects
    for name, slot in vars(type(obj)).items():
        is_field = isinstance(slot, types.GetSetDescriptorType | types.MemberDescriptorType)
        if is_field and not name.startswith("__"):
            value = getattr(obj, name, None)
            if value is not None:
                yield value


def _leads_back(record: object, *targets: object) -> bool:
    """Whether anything ``record`` reaches is ``record`` itself or one of ``targets``."""
    wanted = {id(record), *(id(t) for t in targets)}
    seen: set[int] = set()
    stack = list(_fields(record))
    while stack:
        obj = stack.pop()
        if id(obj) in wanted:
            return True
        if id(obj) in seen or isinstance(obj, _SKIPPED):
            continue
        seen.add(id(obj))
        assert len(seen) < _WALK_LIMIT, "the walk reached far more than a tenant's state"
        stack.extend(_fields(obj))
    return False


async def _one_delivery(world: World) -> DeliveryEngine:  # noqa: F811 (the fixture's name)
    engine = await world.engine()
    await world.send(engine, "t1", "e1")
    await until(lambda: delivered(engine) == 1, "the first delivery")
    return engine


async def test_no_acyclic_record_reaches_itself_or_the_engine(world: World) -> None:  # noqa: F811
    engine = await _one_delivery(world)
    for name, record in _records(engine, "t1", "e1").items():
        assert record is not None, name
        assert not _leads_back(record, engine), f"the {name} closes a reference cycle"


def _verifiers() -> dict[str, object]:
    """A source's verifiers, as ingest builds them on its first request."""
    return {
        "Stripe verifier": StripeVerifier(["whsec_test_secret"], 300),
        "Standard Webhooks verifier": StandardVerifier([SECRET], 300),
    }


def test_no_verifier_reaches_itself() -> None:
    for name, verifier in _verifiers().items():
        assert not _leads_back(verifier), f"the {name} closes a reference cycle"


async def test_compiled_records_stay_out_of_the_collectors_view(
    world: World,  # noqa: F811
) -> None:
    if "hookrouter.delivery.engine" not in compiled_status().compiled:
        pytest.skip("interpreted build: mypyc_attr(acyclic=True) applies to compiled classes")
    engine = await _one_delivery(world)
    records = {**_records(engine, "t1", "e1"), **_verifiers()}
    tracked = [name for name, r in records.items() if gc.is_tracked(r)]
    assert tracked == []
