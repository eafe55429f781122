"""``[admin] listen``, ``/metrics`` auth and the admin login throttle, on a real router.

Issue 33 item 11: the admin API and ``/metrics`` (whose labels name every
tenant, source and endpoint) lived on the public ingest listener with no
auth on ``/metrics`` and no limit on failed logins.
"""

from __future__ import annotations

import http.client
from pathlib import Path

import orjson
from tests.support.router import ADMIN_TOKEN, RouterProcess, base_config, free_port

METRICS_TOKEN = "e2e-metrics-token"


def get(
    port: int, path: str, token: str | None = None, source: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_admin_and_metrics_move_to_their_own_listener(tmp_path: Path) -> None:
    admin_port = free_port()
    config = base_config(tmp_path / "data", 0)
    config["admin"] = {**config["admin"], "listen": f"127.0.0.1:{admin_port}",
                       "metrics_token": METRICS_TOKEN}  # fmt: skip
    with RouterProcess(tmp_path, config) as proc:
        public = proc.port
        for path in ("/admin/v1/tenants", "/admin/v1/openapi.json", "/admin/v1", "/metrics"):
            status, _, body = get(public, path, ADMIN_TOKEN)
            assert status == 404, (path, body)
            assert orjson.loads(body)["error"] == "not_found"
        assert get(public, "/metrics", METRICS_TOKEN)[0] == 404
        assert get(public, "/healthz")[0] == 200
        status, _, body = get(admin_port, "/admin/v1/tenants", ADMIN_TOKEN)
        assert status == 200 and {t["id"] for t in orjson.loads(body)["data"]} >= {"acme"}
        assert get(admin_port, "/admin/v1/openapi.json")[0] == 200
        assert get(admin_port, "/healthz")[0] == 200
        assert get(admin_port, "/readyz")[0] == 200
        status, headers, _ = get(admin_port, "/metrics")
        assert (status, headers["www-authenticate"]) == (401, "Bearer")
        assert get(admin_port, "/metrics", "wrong-token-123")[0] == 401
        status, _, body = get(admin_port, "/metrics", METRICS_TOKEN)
        assert status == 200 and b"hookrouter_" in body
        # Ingest still answers on the public listener.
        assert get(admin_port, "/in/acme-stripe")[0] == 404
        assert proc.request("GET", "/in/acme-stripe")[0] == 405
        assert proc.stop() == 0


def test_without_admin_listen_both_stay_on_the_ingest_listener(tmp_path: Path) -> None:
    with RouterProcess(tmp_path, base_config(tmp_path / "data", 0)) as proc:
        assert get(proc.port, "/metrics")[0] == 200  # no metrics_token: open, as before
        assert get(proc.port, "/admin/v1/tenants", ADMIN_TOKEN)[0] == 200


def test_failed_logins_are_throttled_per_client(tmp_path: Path) -> None:
    with RouterProcess(tmp_path, base_config(tmp_path / "data", 0)) as proc:
        port = proc.port
        for attempt in range(10):
            status, _, _ = get(port, "/admin/v1/tenants", f"guess-{attempt}", "127.0.0.3")
            assert status == 401
        status, headers, body = get(port, "/admin/v1/tenants", "guess-11", "127.0.0.3")
        assert status == 429, body
        assert orjson.loads(body)["error"] == "too_many_auth_failures"
        assert 1 <= int(headers["retry-after"]) <= 60
        # Even the right token waits: a guess that hit would not be told apart.
        assert get(port, "/admin/v1/tenants", ADMIN_TOKEN, "127.0.0.3")[0] == 429
        # Another client is not affected, nor are public and ingest paths.
        assert get(port, "/admin/v1/tenants", ADMIN_TOKEN, "127.0.0.4")[0] == 200
        assert get(port, "/admin/v1/openapi.json", None, "127.0.0.3")[0] == 200
        assert get(port, "/healthz", None, "127.0.0.3")[0] == 200
