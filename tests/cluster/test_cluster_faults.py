"""Router faults in a cluster: a paused router is fenced out, a killed one is taken over.

Each test runs real routers on one real PostgreSQL with a short lease
(``harness.LEASE``) and checks what the sink saw.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

from tests.cluster.harness import (
    LEASE,
    PARTITIONS,
    Flood,
    cluster,
    cluster_config,
    holders,
    lease_moves,
    tenant_names,
    wait_balanced,
    wait_delivered,
    wait_for,
)
from tests.cluster.sink import UNKNOWN, AttemptSink, attempted_after_success, overlaps

# A node renews every LEASE / 3; a dead node's partitions are free at most
# LEASE after its last renewal and taken at the next turn of a survivor.
TAKEOVER_BOUND = LEASE + LEASE / 3 + 1.0


def test_a_paused_router_is_fenced_out_and_its_late_outcomes_refused(tmp_path: Path) -> None:
    """SIGSTOP a router for two leases mid-flood, then SIGCONT it.

    Its attempts in flight at the pause were answered 503 (retry in 1 s) while
    it was stopped; the other node took its partitions over and delivered
    everything. When it resumes, those 503 outcomes are stale: written, they
    would reopen deliveries already answered 200 (and the sink would see them
    again). The epoch fence refuses them.
    """
    tenants = tenant_names(16)
    failing_a = threading.Event()
    failing_a.set()

    def answer(node: str, _path: str) -> tuple[int, float]:
        if node == "router-a" and failing_a.is_set():
            return 503, 0.2
        return 200, 0.01

    names = ["router-a", "router-b"]
    with (
        AttemptSink(answer) as sink,
        cluster(
            tmp_path, sink, names, lambda n: cluster_config(tmp_path, n, sink, tenants)
        ) as routers,
    ):
        wait_balanced(tmp_path, names)
        a, b = routers["router-a"], routers["router-b"]
        assert a.proc is not None
        # Ingest through b only: a paused router cannot answer, and a learns
        # of its tenants' events by notification.
        with Flood([b], tenants, total=1500, threads=2, pace=0.004) as flood:
            wait_for(lambda: any(x.node == "router-a" for x in sink.snapshot()), 10, "a delivering")
            time.sleep(0.5)
            os.kill(a.proc.pid, signal.SIGSTOP)
            paused_at = time.monotonic()
            took = wait_for(
                lambda: set(holders(tmp_path)) == {"router-b"}, 3 * LEASE, "b holding all"
            )
            assert took <= TAKEOVER_BOUND
            time.sleep(max(0.0, 2 * LEASE - (time.monotonic() - paused_at)))
            os.kill(a.proc.pid, signal.SIGCONT)
            wait_for(lambda: "outcomes refused" in a.log(), 10, "a's stale outcomes refused")
            failing_a.clear()
            wait_for(flood.done, 30, "the flood posted")
        wanted = set(flood.acked.values())
        assert len(wanted) == 1500, flood.refused
        wait_delivered(tmp_path, sink, wanted, 30)
        time.sleep(1.5)  # a reopened delivery's retry (1 s) would show up by now
        attempts = sink.snapshot()
        assert not overlaps(attempts), overlaps(attempts)[:3]
        again = attempted_after_success(attempts)
        assert not again, f"{len(again)} deliveries attempted after a 200, e.g. {again[:3]}"
        assert any(x.node == "router-a" and x.began < paused_at for x in attempts)


def test_a_killed_router_is_taken_over_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    """kill -9 one of three routers mid-flood over many tenants (one flooding)."""
    tenants = tenant_names(24)

    def answer(_node: str, _path: str) -> tuple[int, float]:
        return 200, 0.02

    names = ["router-1", "router-2", "router-3"]
    with (
        AttemptSink(answer) as sink,
        cluster(
            tmp_path, sink, names, lambda n: cluster_config(tmp_path, n, sink, tenants)
        ) as routers,
    ):
        wait_balanced(tmp_path, names)
        victim = routers["router-3"]
        assert victim.proc is not None
        flood_tenants = [tenants[0]] * 24 + tenants[1:]  # t00 floods
        with Flood(list(routers.values()), flood_tenants, total=3000, threads=4) as flood:
            wait_for(
                lambda: sum(x.node == "router-3" for x in sink.snapshot()) > 50,
                15,
                "router-3 delivering",
            )
            victim.kill()
            killed_at = time.monotonic()
            survivors = {"router-1", "router-2"}

            def taken_over() -> bool:
                found = holders(tmp_path)
                return set(found) == survivors and sum(found.values()) == PARTITIONS

            took = wait_for(taken_over, 3 * LEASE, "the survivors holding every partition")
            wait_for(flood.done, 40, "the flood posted")
        assert took <= TAKEOVER_BOUND, took
        wanted = set(flood.acked.values())
        assert len(wanted) > 2000, flood.refused
        wait_delivered(tmp_path, sink, wanted, 40)
        attempts = sink.snapshot()
        assert not overlaps(attempts)
        successes = Counter(x.event_id for x in attempts if x.succeeded)
        duplicated = {e for e, n in successes.items() if n > 1}
        # Duplicates only for attempts router-3 had in flight when it died (or,
        # on a starved machine, for a survivor's lease lost to a late renewal).
        in_flight_at_kill = {
            x.event_id for x in attempts if x.node in ("router-3", UNKNOWN) and x.began <= killed_at
        }
        survivors_lost = lease_moves({n: r for n, r in routers.items() if n != "router-3"})
        assert duplicated <= in_flight_at_kill or survivors_lost, sorted(
            duplicated - in_flight_at_kill
        )
        print(
            f"takeover {took:.2f} s (bound {TAKEOVER_BOUND:.2f}); "
            f"{len(wanted)} acknowledged, {len(duplicated)} delivered twice"
        )


def test_a_stopped_router_hands_its_partitions_over_without_waiting_for_expiry(
    tmp_path: Path,
) -> None:
    """SIGTERM: it finishes its attempts, releases its leases; the other takes them at once."""
    tenants = tenant_names(12)
    names = ["router-1", "router-2"]
    with (
        AttemptSink() as sink,
        cluster(
            tmp_path, sink, names, lambda n: cluster_config(tmp_path, n, sink, tenants)
        ) as routers,
    ):
        wait_balanced(tmp_path, names)
        with Flood(list(routers.values()), tenants, total=600, threads=2, pace=0.004) as flood:
            time.sleep(1.0)
            routers["router-2"].stop()  # SIGTERM, graceful
            took = wait_for(
                lambda: holders(tmp_path) == {"router-1": PARTITIONS}, 3 * LEASE, "handover"
            )
            wait_for(flood.done, 30, "the flood posted")
        # Released, not left to lapse: taken within one renewal period of the stop.
        assert f"released {PARTITIONS // 2} partition leases" in routers["router-2"].log()
        assert took <= LEASE / 3 + 0.5, took
        wanted = set(flood.acked.values())
        wait_delivered(tmp_path, sink, wanted, 30)
        successes = Counter(x.event_id for x in sink.snapshot() if x.succeeded)
        assert not [e for e, n in successes.items() if n > 1], "a graceful stop duplicates nothing"
