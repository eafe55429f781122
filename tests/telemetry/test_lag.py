"""The per-tenant delivery lag series: oldest due delivery, tenants with due work only."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Reply, ThreadedReceiver
from tests.support.router import ENDPOINT_SECRET, RouterProcess, base_config

from hookrouter.flow.credits import CreditQueue, new_ref
from hookrouter.ids import new_event_id
from hookrouter.telemetry.lag import lag_seconds, oldest_due


def test_oldest_due_reads_queued_and_in_flight_work_only() -> None:
    old, mid, new = (new_event_id(ms) for ms in (1_000_000, 2_000_000, 3_000_000))
    busy = CreditQueue("busy", 10)
    busy.offer(new_ref(new, "ep"))
    busy.offer(new_ref(mid, "ep2"))
    idle = CreditQueue("idle", 10)
    queues = {"busy": busy, "idle": idle}
    assert oldest_due(queues, []) == {"busy": mid}
    assert oldest_due(queues, [("busy", old), ("other", new)]) == {"busy": old, "other": new}
    lags = lag_seconds({"busy": old}, 1_000.0 + 30)
    assert lags == {"busy": 30.0}


def _lag_series(metrics: str) -> dict[str, float]:
    found = re.findall(
        r'^hookrouter_delivery_lag_seconds\{tenant="([^"]+)"\} (\S+)$', metrics, re.M
    )
    return {tenant: float(value) for tenant, value in found}


def test_a_stuck_tenant_shows_its_lag_and_an_idle_one_has_no_series(tmp_path: Path) -> None:
    with ThreadedReceiver(lambda _r: Reply(hang=True)) as hung:
        config = base_config(tmp_path / "data", 0)
        config["delivery"] = {"allow_private_networks": True, "timeout_seconds": 30}
        config["server"]["shutdown_grace_seconds"] = 0.5  # the hung attempt stays pending
        config["tenants"] = [{"id": "acme", "max_in_flight": 1}, {"id": "globex"}]
        config["endpoints"][0] = {
            "id": "acme-invoices", "tenant": "acme", "url": f"http://127.0.0.1:{hung.port}/",
            "secret": ENDPOINT_SECRET,
        }  # fmt: skip
        with RouterProcess(tmp_path, config) as router:
            for n in range(3):
                body, headers = stripe_event(f"evt_lag_{n}")
                assert router.post("acme-stripe", body, headers)[0] == 200
            time.sleep(1.5)
            status, _, data = router.request("GET", "/metrics")
            assert status == 200
            lags = _lag_series(data.decode())
            assert set(lags) == {"acme"}, lags  # globex has nothing due: no series
            assert 1.4 <= lags["acme"] < 30
