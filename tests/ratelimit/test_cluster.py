"""Redis Cluster placement: a tenant's keys share one slot; tenants spread over slots and nodes."""

from __future__ import annotations

import asyncio

from tests.support.redis_servers import RedisClusterProcess

from hookrouter.ratelimit import Limit, decide
from hookrouter.ratelimit.keys import bucket_keys

from .conftest import build


def test_each_tenants_keys_hash_to_one_slot(cluster: RedisClusterProcess) -> None:
    client = cluster.nodes[0].client()
    try:
        slots = set()
        for i in range(64):
            tenant = f"tenant-{i}"
            names = [
                *bucket_keys(tenant, "ingest").as_list(),
                bucket_keys(tenant, "src:stripe").bucket,
                bucket_keys(tenant, "ep:ep_1", prefix="prod:").bucket,
            ]
            tenant_slots = {client.execute_command("CLUSTER KEYSLOT", n) for n in names}
            assert len(tenant_slots) == 1, (tenant, names)
            slots |= tenant_slots
        # 64 tenants over 16384 slots: a collision or two at most, never one hot slot.
        assert len(slots) >= 60
    finally:
        client.close()


async def test_tenants_spread_over_all_nodes_and_keys_live_there(
    cluster: RedisClusterProcess,
) -> None:
    cluster.flushall()
    limiter = build(None, tuple(cluster.startup_nodes), "script")
    tenants = [f"tenant-{i}" for i in range(30)]
    try:
        await asyncio.gather(*(decide(limiter, t, "ingest", Limit(10, 1)) for t in tenants))
        per_node = []
        for node in cluster.nodes:
            client = node.client()
            per_node.append({k.decode() for k in client.keys("*")})
            client.close()
        # Every bucket exists exactly once, on the node that owns its slot.
        expected = {bucket_keys(t, "ingest").bucket for t in tenants}
        assert set().union(*per_node) == expected
        assert sum(len(keys) for keys in per_node) == len(expected)
        assert all(per_node), "some node holds no tenant"
    finally:
        await limiter.close()
