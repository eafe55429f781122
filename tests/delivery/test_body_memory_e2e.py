"""Queued deliveries do not pin their bodies without bound (issue 33 item 13).

One tenant posts many 1 MB events to a slow endpoint. The old router kept
every queued event's body in memory (``queue_capacity`` x the body size);
now at most ``[delivery] body_cache_tenant_bytes`` of them are kept and the
rest are read back from the store when their turn comes.

It also caught the ingest side keeping every connection's last body until
the cyclic GC ran (``core/http1.py``): RSS grew by about the size of every
body received. Big events that no endpoint takes first bring the store's
page caches and the allocator to their steady size; the growth measured is
what the delivery side adds.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import psutil
from tests.delivery.test_delivery_e2e import config_for
from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Reply, ThreadedReceiver
from tests.support.router import RouterProcess
from tests.support.waiting import poll_until

EVENTS = 120
WARM_UP = 60
BODY_BYTES = 1 << 20
# Allowed RSS growth: the default per-tenant body cache (16 MiB), two attempts
# in flight, ingest and commit buffers, and the allocator's slack. The old
# router grew by over 100 MiB here.
RSS_GROWTH_BOUND = 48 << 20


def _sample_peak(pid: int, stop: threading.Event, peak: list[int]) -> None:
    proc = psutil.Process(pid)
    while not stop.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss)
        time.sleep(0.02)


def _big_event(n: int, event_type: str) -> tuple[bytes, dict[str, str]]:
    pad = os.urandom(BODY_BYTES // 2).hex()
    return stripe_event(f"evt_big_{event_type}_{n}", event_type, extra={"pad": pad})


def test_a_slow_endpoint_and_big_events_keep_the_router_small(tmp_path: Path) -> None:
    with ThreadedReceiver(lambda req: Reply(status=200, delay=0.1)) as sink:
        cfg = config_for(tmp_path, sink.port, max_in_flight=2)
        cfg["server"]["max_body_bytes"] = 2 * BODY_BYTES  # type: ignore[index]
        with RouterProcess(tmp_path, cfg) as router:
            assert router.proc is not None
            small, small_headers = stripe_event("evt_warm")
            router.post("acme-stripe", small, small_headers)
            poll_until(lambda: len(sink.webhook_ids()) >= 1, 10, "the warm-up delivery")
            for n in range(WARM_UP):  # routed nowhere (the endpoint takes invoice.*)
                assert router.post("acme-stripe", *_big_event(n, "customer.updated"))[0] == 200
            before = psutil.Process(router.proc.pid).memory_info().rss
            peak = [before]
            stop = threading.Event()
            sampler = threading.Thread(target=_sample_peak, args=(router.proc.pid, stop, peak))
            sampler.start()
            sent: dict[str, str] = {}
            try:
                for n in range(EVENTS):
                    body, headers = _big_event(n, "invoice.paid")
                    status, doc = router.post("acme-stripe", body, headers)
                    assert status == 200, doc
                    sent[doc["id"]] = hashlib.sha256(body).hexdigest()
                poll_until(lambda: len(sink.webhook_ids()) > EVENTS, 120, "every delivery")
            finally:
                stop.set()
                sampler.join()
            grown = peak[0] - before
    received = {
        r.headers["webhook-id"]: hashlib.sha256(r.body).hexdigest()
        for r in sink.receiver.requests
        if r.headers.get("webhook-id") in sent
    }
    assert received == sent  # every event delivered, byte-identical
    assert grown < RSS_GROWTH_BOUND, f"router RSS grew by {grown >> 20} MiB"
