"""A router cut off from the database by the network (link down, not a kill) is fenced out.

router-a runs in a network namespace of its own, joined to the host by a veth
pair (``netns``); PostgreSQL and the sink listen on the host end's address
for it, everything else stays on 127.0.0.1. Mid-flood the link goes down for
two leases: router-a's sockets stay open, its packets go nowhere. The same
guarantees as the pause test must hold.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.cluster.harness import (
    LEASE,
    Flood,
    cluster,
    cluster_config,
    holders,
    owner_of,
    sql,
    tenant_names,
    wait_balanced,
    wait_delivered,
    wait_for,
)
from tests.cluster.netns import Netns, netns, unavailable
from tests.cluster.sink import Answer, AttemptSink, attempted_after_success, overlaps
from tests.support.postgres_servers import PostgresServer, postgres_server
from tests.support.router import RouterProcess

TAKEOVER_BOUND = LEASE + LEASE / 3 + 1.0
CUT = "router-a"


@pytest.fixture
def space() -> Iterator[Netns]:
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    try:
        with netns(f"{os.getpid() % 100_000}") as made:
            yield made
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot make a network namespace here: {exc.stderr.strip()}")


@pytest.fixture
def server(space: Netns) -> Iterator[PostgresServer]:
    """PostgreSQL on 127.0.0.1 and on the host end of the veth pair, for this test alone."""
    settings = {"listen_addresses": f"'127.0.0.1,{space.host_ip}'"}
    with postgres_server(settings) as pg:
        with (pg.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {space.ns_ip}/32 trust\n")
        pg.reload()
        yield pg


NAMES = [CUT, "router-b"]


@contextmanager
def cut_cluster(
    tmp_path: Path,
    space: Netns,
    server: PostgresServer,
    tenants: list[str],
    answer: Answer,
    tenant_options: dict[str, dict[str, Any]] | None = None,
) -> Iterator[tuple[AttemptSink, dict[str, RouterProcess]]]:
    """router-a in the namespace, router-b on the host, both on ``server``; leases spread."""

    def config(node: str) -> dict[str, Any]:
        host = space.host_ip if node == CUT else "127.0.0.1"
        dsn = server.dsn.replace("127.0.0.1", host)
        return cluster_config(tmp_path, node, sink, tenants, dsn=dsn, tenant_options=tenant_options)

    def make(node: str, workdir: Path, cfg: dict[str, Any]) -> RouterProcess:
        if node == CUT:
            return RouterProcess(workdir, cfg, host=space.ns_ip, prefix=space.prefix())
        return RouterProcess(workdir, cfg)

    with (
        AttemptSink(answer, host=space.host_ip) as sink,
        cluster(tmp_path, sink, NAMES, config, make) as routers,
    ):
        wait_balanced(tmp_path, NAMES, server.dsn)
        yield sink, routers


def test_a_router_cut_off_from_the_database_is_fenced_out(
    tmp_path: Path, space: Netns, server: PostgresServer
) -> None:
    tenants = tenant_names(16)
    failing_a = threading.Event()
    failing_a.set()

    def answer(node: str, _path: str) -> tuple[int, float]:
        # router-a's attempts fail slowly: written late, their outcomes would
        # reopen deliveries router-b has delivered meanwhile.
        if node == CUT and failing_a.is_set():
            return 503, 0.2
        return 200, 0.01

    dsn = server.dsn
    with cut_cluster(tmp_path, space, server, tenants, answer) as (sink, routers):
        a = routers[CUT]
        # Ingest through b only: a learns of its tenants' events by notification.
        with Flood([routers["router-b"]], tenants, total=1500, threads=2, pace=0.004) as flood:
            wait_for(lambda: any(x.node == CUT for x in sink.snapshot()), 10, "a delivering")
            time.sleep(0.5)
            space.cut()
            cut_at = time.monotonic()
            took = wait_for(
                lambda: set(holders(tmp_path, dsn)) == {"router-b"}, 3 * LEASE, "b holding all"
            )
            assert took <= TAKEOVER_BOUND, took
            time.sleep(max(0.0, 2 * LEASE - (time.monotonic() - cut_at)))
            space.mend()
            wait_for(lambda: "outcomes refused" in a.log(), 40, "a's stale outcomes refused")
            failing_a.clear()
            wait_for(flood.done, 30, "the flood posted")
            wait_balanced(tmp_path, NAMES, dsn)
        wanted = set(flood.acked.values())
        assert len(wanted) == 1500, flood.refused
        wait_delivered(tmp_path, sink, wanted, 30, dsn)
        time.sleep(1.5)  # a reopened delivery's retry (1 s) would show up by now
        attempts = sink.snapshot()
        assert not overlaps(attempts), overlaps(attempts)[:3]
        again = attempted_after_success(attempts)
        assert not again, f"{len(again)} deliveries attempted after a 200, e.g. {again[:3]}"
        assert any(x.node == CUT and x.began < cut_at for x in attempts)
        print(f"takeover {took:.2f} s after the cut; {len(wanted)} acknowledged, all delivered")


def test_a_cut_off_router_with_work_in_memory_sends_nothing_after_its_lease(
    tmp_path: Path, space: Netns, server: PostgresServer
) -> None:
    """router-a ingested its own tenants' events (bodies in memory, queued behind caps).

    Cut just after a renewal, it may go on starting attempts for most of a
    second from memory, but none may reach the endpoint after its lease:
    attempts in flight time out, and new ones need connections whose SYNs the
    cut link drops. Once the link is back, nothing of a's arrives late, and b
    has delivered everything.
    """
    tenants = tenant_names(8)

    capped = {t: {"max_in_flight": 2} for t in tenants}  # a's work waits in its queue

    def answer(node: str, _path: str) -> tuple[int, float]:
        # a's answers would be lost in the cut anyway; failures keep its
        # attempts from counting as deliveries the sink saw succeed.
        return (503, 0.4) if node == CUT else (200, 0.01)

    dsn = server.dsn
    with cut_cluster(tmp_path, space, server, tenants, answer, capped) as (sink, routers):
        a = routers[CUT]
        owned = [t for t in tenants if owner_of(tmp_path, t, dsn) == CUT]
        # a's own tenants' events, ingested by a: their bodies stay in its memory.
        with Flood([a], owned, total=40 * len(owned), threads=4) as flood:
            wait_for(flood.done, 30, "a's events posted")
        wanted = set(flood.acked.values())

        def renewed() -> str:
            return sql(
                tmp_path, f"SELECT max(expires_at) FROM partitions WHERE owner = '{CUT}'", dsn
            )

        before = renewed()
        wait_for(lambda: renewed() != before, 5, "a renewing", step=0.02)
        space.cut()  # just after a renewal: a may start attempts for most of a second more
        cut_at = time.monotonic()
        wait_for(lambda: set(holders(tmp_path, dsn)) == {"router-b"}, 3 * LEASE, "b holding all")
        time.sleep(max(0.0, 2 * LEASE - (time.monotonic() - cut_at)))
        space.mend()
        wait_delivered(tmp_path, sink, wanted, 30, dsn)
        time.sleep(8.0)  # the kernel's next retransmissions of a's requests fall in here
        attempts = sink.snapshot()
        late = [x for x in attempts if x.began > cut_at + LEASE and x.node != "router-b"]
        again = attempted_after_success(attempts)
        assert not again, f"{len(again)} deliveries attempted after a 200, e.g. {again[:3]}"
        assert not late, f"{len(late)} requests from a arrived after its lease, e.g. {late[:3]}"
        assert not overlaps(attempts), overlaps(attempts)[:3]
        print(f"{len(wanted)} acknowledged by a, all delivered once the link was back")
