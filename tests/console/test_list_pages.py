"""The console lists a page of entities at a time (issue 38: a platform has 100,000).

The endpoints page used to ask the admin API for every endpoint and render
them all. It now shows the first page (the API's largest) and links to the
next, which carries on by id. The overview lists the first open breakers
and, when more are open, links to the page that has them all.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from tests.console.conftest import Console, router_config
from tests.e2e.conftest import stripe_event
from tests.support.delivery_servers import Reply, ThreadedReceiver
from tests.support.router import ENDPOINT_SECRET, RouterProcess

from hookrouter.admin.paging import MAX_PAGE
from hookrouter.console.overview import OVERVIEW_BREAKERS

TENANTS = 5
PER_TENANT = 205  # under the per-tenant limit; 1,025 in all, past one page
EDIT_LINKS = "#endpoints a[title=edit]"


def test_the_endpoints_page_shows_one_page_and_links_to_the_next(console: Console) -> None:
    router = console.router
    for t in range(TENANTS):
        assert router.admin("PUT", f"/tenants/many{t}", {})[0] == 201
        for e in range(PER_TENANT):
            doc = {
                "tenant": f"many{t}",
                "url": "https://hooks.example.com/in",
                "secret": ENDPOINT_SECRET,
            }
            assert router.admin("PUT", f"/endpoints/many{t}-{e:03d}", doc)[0] == 201
    assert TENANTS * PER_TENANT > MAX_PAGE
    console.sign_in()
    console.open("/endpoints")
    console.wait_text("many0-000", "#endpoints")
    first = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, EDIT_LINKS)]
    assert len(first) == MAX_PAGE
    console.element("#more").click()
    console.wait_text("many4-204", "#endpoints")
    rest = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, EDIT_LINKS)]
    assert not set(first) & set(rest)
    shown = set(first) | set(rest)
    assert {f"many{t}-{e:03d}" for t in range(TENANTS) for e in range(PER_TENANT)} <= shown
    assert not console.driver.find_elements(By.ID, "more")  # the last page


def test_the_tenants_page_shows_one_page_and_links_to_the_next(console: Console) -> None:
    """Tenants (and sources, the same page code) past one page: none out of reach."""
    router = console.router
    count = MAX_PAGE + 5
    for t in range(count):
        assert router.admin("PUT", f"/tenants/paged{t:04d}", {})[0] == 201
    console.sign_in()
    console.open("/tenants")
    console.wait_text("paged0000", "#tenants")
    rows = "#tenants td:first-child a"
    first = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, rows)]
    assert len(first) == MAX_PAGE
    console.element("#more").click()
    console.wait_text(f"paged{count - 1:04d}", "#tenants")
    rest = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, rows)]
    assert not set(first) & set(rest)
    assert {f"paged{t:04d}" for t in range(count)} <= set(first) | set(rest)
    assert not console.driver.find_elements(By.ID, "more")  # the last page


@pytest.fixture
def tripping(tmp_path: Path, receiver: ThreadedReceiver) -> Iterator[RouterProcess]:
    """Every receiver answers 500; one failed attempt opens an endpoint's breaker."""
    proc = RouterProcess(tmp_path)
    cfg = router_config(tmp_path, proc.port, receiver.port)
    cfg["delivery"]["breaker"] = {"min_requests": 1, "failure_ratio": 0.5,
                                  "cooldown_seconds": 3600}  # fmt: skip
    proc.config = cfg
    receiver.receiver.handler = lambda _req: Reply(status=500)
    with proc:
        yield proc


def test_the_overview_says_when_more_breakers_are_open_and_links_to_them_all(
    driver: WebDriver, tripping: RouterProcess, receiver: ThreadedReceiver
) -> None:
    """A receiver host many endpoints share goes down: more open breakers than one list."""
    count = OVERVIEW_BREAKERS + 5
    ids = [f"acme-down{i:03d}" for i in range(count)]
    url = f"http://127.0.0.1:{receiver.port}/hooks/down"
    for endpoint in ids:
        doc = {"tenant": "acme", "url": url, "secret": ENDPOINT_SECRET, "retry_schedule": []}
        assert tripping.admin("PUT", f"/endpoints/{endpoint}", doc)[0] == 201
    status, _ = tripping.post("acme-stripe", *stripe_event(f"evt_{uuid.uuid4().hex}"))
    assert status == 200  # one event, fanned out to every endpoint: each fails once

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, doc = tripping.admin("GET", f"/breakers?tripped=true&limit={MAX_PAGE}")
        opened = {b["endpoint_id"] for b in doc["breakers"]}
        if set(ids) <= opened:
            break
        time.sleep(0.2)
    assert set(ids) <= opened

    console = Console(driver, tripping)
    console.sign_in()
    console.open("/")
    console.wait_text("More are open", "#open-breakers")
    listed = console.driver.find_elements(
        By.CSS_SELECTOR, "#open-breakers li:not(#more-breakers) a"
    )
    assert len(listed) == OVERVIEW_BREAKERS
    console.element("#more-breakers a").click()
    console.wait_text(ids[-1], "#breakers")
    rows = [
        a.text for a in console.driver.find_elements(By.CSS_SELECTOR, "#breakers td:first-child a")
    ]
    assert set(rows) == opened and rows == sorted(rows)
    assert not console.driver.find_elements(By.ID, "more")  # all of them on one page
    console.driver.find_element(By.LINK_TEXT, ids[-1]).click()  # to the endpoint's own page
    console.wait_text("open", "#breaker-history")
