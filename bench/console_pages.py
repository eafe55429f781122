"""Time the console's pages on a large store.

``python -m bench.console_pages --path DIR`` starts a router on the store in
DIR (fill one with ``python -m bench.store_fill --path DIR --events N``:
the events of the week before now in hour partitions, as a week of ingest
leaves them; ``--span 0`` stamps them all now, in one file),
signs in to the console and requests each page ``--requests`` times over
one keep-alive connection on loopback, after a warm-up. Printed per page:
median and p99 of the time from sending the request to the last byte of the
answer, which on loopback is the server's time plus a few tens of
microseconds.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from bench.api import STRIPE_SECRET
from bench.stats import percentile

TOKEN = "bench-console-token"
Headers = dict[str, str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(path: Path, port: int) -> str:
    # Retention past the fill's week: the oldest filled hour would otherwise
    # be unlinked while the pages are timed.
    return f"""
[server]
listen = "127.0.0.1:{port}"
[store]
path = "{path}"
[store.retention]
delivered = "30d"
[admin]
token = "{TOKEN}"
[[tenants]]
id = "bench"
[[sources]]
id = "bench-stripe"
tenant = "bench"
provider = "stripe"
secrets = ["{STRIPE_SECRET}"]
"""


class Browser:
    """One keep-alive connection with the console's session cookie."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.cookie = ""

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: Headers | None = None
    ) -> tuple[int, Headers, bytes]:
        all_headers = {"cookie": self.cookie, **(headers or {})}
        self.conn.request(method, path, body, all_headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def sign_in(self) -> None:
        form = urlencode({"credential": TOKEN}).encode()
        status, headers, _ = self.request(
            "POST", "/console/login", form, {"content-type": "application/x-www-form-urlencoded"}
        )
        assert status == 303, status
        self.cookie = headers["set-cookie"].split(";")[0]

    def admin(self, path: str) -> Any:
        status, _, data = self.request("GET", "/admin/v1" + path,
                                       headers={"authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert status == 200, (status, data[:200])
        return orjson.loads(data)


def time_page(browser: Browser, path: str, requests: int) -> dict[str, float]:
    for _ in range(3):
        status, _, _ = browser.request("GET", path)
        assert status in (200, 303), (path, status)
    took = []
    for _ in range(requests):
        start = time.perf_counter()
        browser.request("GET", path)
        took.append((time.perf_counter() - start) * 1000)
    return {
        "median_ms": round(statistics.median(took), 2),
        "p99_ms": round(percentile(took, 99), 2),
    }


def pages(browser: Browser) -> list[tuple[str, str]]:
    newest = browser.admin("/events?limit=1")["data"][0]
    deep = browser.admin("/events?limit=1000")["data"][-1]
    return [
        ("overview", "/console/"),
        ("overview fragment (polled)", "/console/fragments/overview"),
        ("events, newest 50", "/console/events"),
        ("events, tenant + status", "/console/events?tenant=bench&status=pending"),
        ("events, 1000 back (cursor)", f"/console/events?before={deep['id']}"),
        ("events, type glob no match (1000 read)", "/console/events?type=nomatch.*"),
        ("lookup by provider id", f"/console/events?q={newest['provider_event_id']}"),
        ("event page", f"/console/events/{newest['id']}"),
        ("dead letters, per-tenant counts", "/console/dead"),
        ("dead letters of one tenant", "/console/dead?tenant=bench"),
        ("endpoints", "/console/endpoints"),
        ("sources", "/console/sources"),
    ]


def run(path: Path, requests: int) -> list[dict[str, Any]]:
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "router.toml"
        config.write_text(_config(path, port))
        log = (Path(tmp) / "router.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "hookrouter", "serve", "--config", str(config)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            _wait_healthy(port, proc)
            browser = Browser(port)
            browser.sign_in()
            results = []
            for name, page in pages(browser):
                measured = time_page(browser, page, requests)
                results.append({"page": name, **measured})
                print(f"{name:42s} median {measured['median_ms']:8.2f} ms  "
                      f"p99 {measured['p99_ms']:8.2f} ms", flush=True)  # fmt: skip
            return results
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


def _wait_healthy(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("router exited")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("router did not become healthy")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.console_pages", description=__doc__)
    ap.add_argument("--path", required=True, type=Path, help="a filled store directory")
    ap.add_argument("--requests", type=int, default=50)
    args = ap.parse_args(argv)
    results = run(args.path.resolve(), args.requests)
    print("BENCH-JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
