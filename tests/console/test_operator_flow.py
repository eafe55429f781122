"""An operator's day in the console, in a real browser against a real router and receiver."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import tomli_w
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from tests.console.conftest import Console, http_session, router_config
from tests.support.delivery_servers import Reply, ThreadedReceiver
from tests.support.router import RouterProcess

SECRET = "whsec_console_typed_secret"


def hookrouter_send(router: RouterProcess, workdir: Path, source: dict[str, Any],
                    event_type: str) -> str:  # fmt: skip
    """``hookrouter send`` with a config naming ``source`` (the secret the operator typed)."""
    config = {
        "server": {"listen": f"127.0.0.1:{router.port}"},
        "store": {"path": str(workdir / "unused")},
        "tenants": [{"id": source["tenant"]}],
        "sources": [source],
    }
    path = workdir / "send.toml"
    path.write_bytes(tomli_w.dumps(config).encode())
    command = [sys.executable, "-m", "hookrouter", "send", "--config", str(path),
               "--source", source["id"], "--type", event_type]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    match = re.search(r'"id":"(evt_[^"]+)"', done.stdout)
    assert match, done.stdout
    return match.group(1)


def test_create_tenant_source_endpoint_then_see_a_stripe_event_delivered(
    console: Console, receiver: ThreadedReceiver, tmp_path: Path
) -> None:
    console.sign_in()
    console.open("/tenants")
    console.fill({"id": "initech"})
    console.submit("#new-tenant")
    console.wait_text("initech", "#tenants")

    console.open("/sources")
    console.fill({"id": "initech-stripe", "tenant": "initech", "provider": "stripe",
                  "secret": SECRET})  # fmt: skip
    console.submit("#new-source")
    console.wait_text("/in/initech-stripe", "#sources")

    console.open("/endpoints")
    # The API's validation, shown beside the field it names.
    console.fill({"id": "initech-all", "tenant": "initech", "url": "ftp://nowhere"})
    console.submit("#new-endpoint")
    issue = console.element(".issue[data-field=url]")
    assert "http" in issue.text
    url = f"http://127.0.0.1:{receiver.port}/hooks/initech"
    console.fill({"url": url})
    console.submit("#new-endpoint")
    console.wait_text("initech-all", "#endpoints")

    event_id = hookrouter_send(
        console.router,
        tmp_path,
        {"id": "initech-stripe", "tenant": "initech", "provider": "stripe", "secrets": [SECRET]},
        "invoice.paid",
    )
    console.open("/events", tenant="initech")
    console.wait_text(event_id, "#events")
    console.screenshot("events")
    console.driver.find_element(By.LINK_TEXT, event_id).click()
    console.wait_text("delivered", "#event-status", reload=True)
    assert "HTTP 200" in console.text("#delivery-initech-all")
    assert "invoice.paid" in console.text("#event-type")
    headers = console.text("#event-headers")
    assert "stripe-signature" in headers and "masked" in headers and "v1=" not in headers
    assert '"type": "invoice.paid"' in console.text("#event-body")  # pretty-printed JSON
    console.screenshot("event")
    assert [r.path for r in receiver.receiver.requests] == ["/hooks/initech"]

    # The overview: the tenant's delivery time from the engine's histogram.
    console.open("/")
    initech = "#tenant-queues tr:has(a[href$='tenant=initech'])"
    assert "≤" in console.text(initech)

    # The sources page tells a source that receives from one that went quiet.
    console.open("/sources")
    row = "#sources tr:has(a[href$='/sources/initech-stripe']) .last-received"
    console.wait(lambda d: "none since" not in _refreshed(console, row), timeout=20)
    quiet = "#sources tr:has(a[href$='/sources/acme-stripe']) .last-received"
    assert "none since" in console.text(quiet)
    console.screenshot("sources")


def _refreshed(console: Console, css: str) -> str:
    console.driver.refresh()
    return console.text(css)


@pytest.fixture
def failing(tmp_path: Path, receiver: ThreadedReceiver) -> Any:
    """acme-invoices gives up after one attempt; the breaker opens after two failures."""
    proc = RouterProcess(tmp_path)
    cfg = router_config(tmp_path, proc.port, receiver.port)
    cfg["endpoints"][0]["retry_schedule"] = []
    cfg["delivery"]["breaker"] = {"min_requests": 2, "failure_ratio": 0.5,
                                  "cooldown_seconds": 3600}  # fmt: skip
    proc.config = cfg
    receiver.receiver.handler = lambda _req: Reply(status=500, body=b"down for maintenance")
    with proc:
        yield proc


def test_a_failing_endpoint_shows_attempts_opens_its_breaker_and_replay_delivers(
    driver: WebDriver, failing: RouterProcess, receiver: ThreadedReceiver, tmp_path: Path
) -> None:
    console = Console(driver, failing)
    source = failing.config["sources"][0]
    sent = [hookrouter_send(failing, tmp_path, source, "invoice.paid") for _ in range(2)]
    console.sign_in()
    for event_id in reversed(sent):
        console.open(f"/events/{event_id}")
        console.wait_text("failed", "#event-status", reload=True)
    timeline = console.text("#delivery-acme-invoices")
    assert "dead" in timeline and "HTTP 500" in timeline
    console.screenshot("event-failed")

    console.open("/endpoints")
    console.wait_text("open", "#ep-acme-invoices", reload=True)
    console.screenshot("endpoints")
    console.open("/")
    console.wait_text("acme-invoices", "#open-breakers", reload=True)

    receiver.receiver.handler = lambda _req: Reply(status=200)
    console.open("/endpoints")
    console.submit("#ep-acme-invoices .reset-breaker")
    console.wait_text("closed", "#ep-acme-invoices")
    # The endpoint's page: its recent attempts and its breaker's history.
    console.open("/endpoints/acme-invoices")
    assert console.text("#health-ratio").startswith("0.0 % succeeded")
    assert "p99" in console.text("#endpoint-health")
    history = [row.text for row in console.driver.find_elements(
        By.CSS_SELECTOR, "#breaker-history tr")[1:]]  # fmt: skip
    assert [h.split()[-3:] for h in history] == [["open", "closed", "reset"],
                                                 ["closed", "open", "trip"]], history  # fmt: skip
    console.screenshot("endpoint-health")

    console.open("/dead")
    console.wait_text("acme 2", "#dead-tenants")
    console.driver.find_element(By.LINK_TEXT, "acme").click()
    console.wait_text(sent[1], "#dead")
    console.driver.find_element(By.ID, "dry-run").click()
    console.wait_text("2 dead delivery(ies) match", ".flash")
    console.screenshot("dead-letters")
    console.driver.find_element(By.ID, "replay-dead").click()
    # A job with its own page; its progress part is polled until the job ends.
    console.wait(lambda d: "/console/dead/replay/" in d.current_url)
    assert console.driver.find_element(By.ID, "replay-progress").get_attribute("data-poll")
    console.wait_text("2 of 2", "#replay-count")
    console.wait_text("done", "#replay-state")
    console.screenshot("dead-replay")
    job_page = console.driver.current_url
    for event_id in sent:
        console.open(f"/events/{event_id}")
        console.wait_text("delivered", "#event-status", reload=True)
    deadline = time.monotonic() + 10
    while len(receiver.receiver.requests) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(receiver.receiver.requests) == 4  # two failures, then each once more
    # The job is the operator's: a tenant's portal session cannot see it.
    job_path, cookie = job_page.split("/console", 1)[1], _portal_cookie(failing)
    for path in (job_path, job_path.replace("/dead/", "/fragments/")):
        status, _, _ = failing.request("GET", "/portal" + path, headers={"cookie": cookie})
        assert status == 404, path

    # The last hour's charts, once the sampler has a few readings of this traffic.
    console.open("/")
    console.wait(lambda d: _chart_points(console) >= 3, timeout=30)
    console.screenshot("overview")


def _portal_cookie(router: RouterProcess) -> str:
    status, minted = router.admin("POST", "/tenants/acme/keys", {"name": "peek"})
    assert status == 201, minted
    return http_session(router, minted["key"], "/portal")


def _chart_points(console: Console) -> int:
    console.driver.refresh()
    line = console.driver.find_element(By.CSS_SELECTOR, ".charts polyline")
    return len((line.get_attribute("points") or "").split())


def test_the_audit_log_names_console_and_api_changes(console: Console) -> None:
    console.sign_in()
    console.open("/tenants")
    console.fill({"id": "audited"})
    console.submit("#new-tenant")
    console.wait_text("audited", "#tenants")
    status, _ = console.router.admin("DELETE", "/tenants/audited")
    assert status == 204
    console.open("/audit")
    rows = console.text("#audit")
    assert re.search(r"console \(admin token\) POST /admin/v1/tenants 201", rows), rows
    assert re.search(r"admin API DELETE /admin/v1/tenants/audited 204", rows), rows
    console.screenshot("audit")


def test_the_explorer_keeps_to_a_time_window(router: RouterProcess, tmp_path: Path) -> None:
    event_id = hookrouter_send(router, tmp_path, router.config["sources"][0], "invoice.paid")
    cookie = http_session(router)
    now = datetime.datetime.now(datetime.UTC)

    def listed(**window: datetime.datetime) -> bool:
        query = urlencode({k: v.strftime("%Y-%m-%dT%H:%M") for k, v in window.items()})
        status, _, body = router.request("GET", f"/console/events?{query}",
                                         headers={"cookie": cookie})  # fmt: skip
        assert status == 200
        return event_id in body.decode()

    minute = datetime.timedelta(minutes=1)
    assert listed(since=now - minute) and listed(until=now + minute)
    assert listed(since=now - minute, until=now + minute)
    assert not listed(until=now - minute) and not listed(since=now + minute)
