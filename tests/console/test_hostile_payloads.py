"""Hostile events in the console: everything a sender or receiver controls is shown as text.

Event types, provider ids, headers and bodies come from outside, and so do a
receiver's status and answer. The test sends them full of markup, opens every
page that shows them, and asserts in the browser that no alert ran and that
no element arrived from the payload (only the console's own script is on the
page). The DOM check is what fails when escaping breaks: the CSP alone would
still stop the alert.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import stripe
from selenium.webdriver.remote.webdriver import WebDriver
from tests.console.conftest import Console, router_config
from tests.support.delivery_servers import Reply, ThreadedReceiver
from tests.support.router import STRIPE_SECRET, RouterProcess

MARKUP = "<script>alert('{0}')</script><img src=x onerror=alert('{0}')><b id=injected-{0}>x</b>"
HOOK = """
window.__alerts = [];
window.alert = function (m) { window.__alerts.push(String(m)); };
window.confirm = function () { return true; };
"""


@pytest.fixture
def hostile_receiver() -> Iterator[ThreadedReceiver]:
    reply = Reply(status=500, body=MARKUP.format("receiver").encode(),
                  headers=[("content-type", "text/html")])  # fmt: skip
    with ThreadedReceiver(lambda _req: reply) as server:
        yield server


@pytest.fixture
def router(tmp_path: Path, hostile_receiver: ThreadedReceiver) -> Iterator[RouterProcess]:
    proc = RouterProcess(tmp_path)
    cfg = router_config(tmp_path, proc.port, hostile_receiver.port)
    cfg["endpoints"][0]["retry_schedule"] = []  # dead after one attempt: every page shows it
    proc.config = cfg
    with proc:
        yield proc


def post_hostile_event(router: RouterProcess) -> str:
    payload = {
        "id": "evt_<svg/onload=alert('pid')>",
        "object": "event",
        "type": "invoice.<script>alert('type')</script>",
        "data": {"object": {"note": "</pre>" + MARKUP.format("body")}},
    }
    body = orjson.dumps(payload)
    signature = stripe.WebhookSignature.generate_signature_header(
        body.decode(), STRIPE_SECRET, timestamp=int(time.time())
    )
    headers = {
        "Stripe-Signature": signature,
        "Content-Type": "application/json",
        "X-Note": MARKUP.format("header"),
    }
    status, answer = router.post("acme-stripe", body, headers)
    assert status == 200, answer
    return str(answer["id"])


def injected(driver: WebDriver) -> list[str]:
    """What of the payloads became DOM or ran: alerts, foreign scripts, images, bold tags."""
    found: list[str] = driver.execute_script(
        """
        const out = [...window.__alerts];
        for (const s of document.scripts) {
          if (!s.src.endsWith('/static/console.js')) out.push('script: ' + s.outerHTML);
        }
        for (const e of document.querySelectorAll('img, svg:not(.charts svg), [onerror], [onload]'))
          { if (!e.closest('.spark')) out.push('element: ' + e.outerHTML); }
        for (const e of document.querySelectorAll('[id^=injected-]')) out.push('bold: ' + e.id);
        return out;
        """
    )
    return found


def test_markup_in_events_and_answers_is_shown_as_text(
    driver: WebDriver, router: RouterProcess
) -> None:
    event_id = post_hostile_event(router)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
    console = Console(driver, router)
    console.sign_in()
    console.open(f"/events/{event_id}")
    console.wait_text("failed", "#event-status", reload=True)
    # The markup is there, as text, where the operator expects it.
    assert "<script>alert('type')</script>" in console.text("#event-type")
    assert "onerror=alert('header')" in console.text("#event-headers")
    assert "onerror=alert('body')" in console.text("#event-body")
    timeline = console.text("#delivery-acme-invoices")
    assert "HTTP 500" in timeline and "onerror=alert('receiver')" in timeline
    pages = [f"/events/{event_id}", "/events", "/dead", "/", "/endpoints", "/audit"]
    for path in pages:
        console.open(path)
        assert injected(driver) == [], path
    console.open("/events", q="evt_<svg/onload=alert('pid')>")  # lookup by the provider's id
    assert console.driver.current_url.endswith(event_id)
    assert injected(driver) == []
    assert not _alert_open(driver)


def _alert_open(driver: WebDriver) -> bool:
    try:
        driver.switch_to.alert  # noqa: B018 (raises when there is none)
    except Exception:
        return False
    return True
