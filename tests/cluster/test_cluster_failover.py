"""The database primary dies mid-flood; its synchronous standby is promoted.

Two routers reach the database through a libpq multi-host DSN. While no
primary is reachable, ingest answers 503 with Retry-After (never a 2xx it
cannot keep); after ``pg_ctl promote`` they find the new primary, and every
event acknowledged before or after is delivered.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.cluster.harness import Flood, cluster, cluster_config, tenant_names, wait_for
from tests.cluster.sink import AttemptSink
from tests.support.postgres_servers import Replicated


def test_primary_killed_standby_promoted_nothing_acknowledged_lost(
    own_replicated: Replicated, tmp_path: Path
) -> None:
    own_replicated.wait_streaming()
    tenants = tenant_names(8)
    names = ["router-1", "router-2"]

    def config(name: str) -> dict[str, object]:
        return cluster_config(tmp_path, name, sink, tenants, dsn=own_replicated.dsn)

    with AttemptSink() as sink, cluster(tmp_path, sink, names, config) as routers:
        with Flood(list(routers.values()), tenants, total=100_000, threads=4, pace=0.01) as flood:
            wait_for(lambda: len(flood.acked) > 200, 15, "ingest under way")
            own_replicated.primary.kill9()
            killed_at = time.monotonic()
            wait_for(lambda: flood.statuses[503] > 0, 10, "a 503 while no primary")
            time.sleep(1.0)
            own_replicated.standby.promote()
            promoted_at = time.monotonic()
            acked_before = len(flood.acked)
            wait_for(lambda: len(flood.acked) > acked_before + 200, 30, "ingest after promote")
            flood.stop()
        assert flood.unavailable_without_retry_after == 0
        assert set(flood.statuses) <= {200, 503}, flood.statuses
        gap = [t for t in flood.acked_at if t > killed_at]
        resumed = min(gap) - promoted_at
        wanted = set(flood.acked.values())
        wait_for(lambda: wanted <= sink.delivered(), 40, "every acknowledged event delivered")
        print(
            f"{len(wanted)} acknowledged, {flood.statuses[503]} answered 503; "
            f"first 2xx {resumed:.2f} s after the promote, "
            f"{promoted_at - killed_at:.2f} s after the kill"
        )
