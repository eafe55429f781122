"""The tenant portal: a minted link opens one tenant's view, and nothing of another's."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

import orjson
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from tests.console.conftest import Console
from tests.console.test_operator_flow import hookrouter_send
from tests.support.delivery_servers import Received, Reply, ThreadedReceiver
from tests.support.router import RouterProcess


def mint_link(router: RouterProcess, tenant: str) -> str:
    status, body = router.admin("POST", f"/tenants/{tenant}/portal-links")
    assert status == 201, body
    assert body["tenant"] == tenant and body["expires_in"] > 0
    return str(body["url"])


def test_a_minted_link_opens_the_tenants_portal_and_nothing_of_another_tenant(
    driver: WebDriver, router: RouterProcess, tmp_path: Path
) -> None:
    acme_source, globex_source = router.config["sources"]
    acme_event = hookrouter_send(router, tmp_path, acme_source, "invoice.paid")
    globex_event = hookrouter_send(router, tmp_path, globex_source, "invoice.paid")
    portal = Console(driver, router, "/portal")
    driver.delete_all_cookies()

    link = mint_link(router, "acme")
    driver.get(link)
    portal.wait(lambda d: d.current_url.endswith("/portal/events"))
    portal.wait_text(acme_event, "#events")
    assert globex_event not in portal.text("#events")
    portal.screenshot("portal")

    # Another tenant's ids answer exactly as missing ones do.
    for path, query in (
        (f"/events/{globex_event}", {}),
        (f"/events/{globex_event}/raw", {}),
        ("/events", {"tenant": "globex"}),
        ("/events", {"q": globex_event}),
    ):
        portal.open(path, **query)
        page = portal.text("main")
        assert "globex-std" not in page, (path, page)  # none of the event's data
        assert not driver.find_elements(By.LINK_TEXT, globex_event), path
        if path != "/events" or "tenant" in query:
            assert "404" in portal.text("h1"), (path, page)
    portal.open("/endpoints")
    endpoints = portal.text("#endpoints")
    assert "acme-invoices" in endpoints and "globex-all" not in endpoints
    # Changes to another tenant's endpoint, forged with this session's own CSRF token.
    csrf = driver.find_element(By.NAME, "csrf").get_attribute("value")
    cookie = "; ".join(f"{c['name']}={c['value']}" for c in driver.get_cookies())
    headers = {"cookie": cookie, "content-type": "application/x-www-form-urlencoded"}
    form = urlencode({"csrf": csrf}).encode()
    for action in ("rotate", "delete", "test", "reset"):
        status, _, _ = router.request(
            "POST", f"/portal/endpoints/globex-all/{action}", form, headers
        )
        assert status == 404, action
    assert router.admin("GET", "/endpoints/globex-all")[0] == 200  # still there
    # The portal session is no console session.
    portal.driver.get(f"{portal.base}/console/")
    assert driver.current_url.endswith("/console/login")

    # A link works once.
    driver.delete_all_cookies()
    driver.get(link)
    assert re.search(r"used or expired", portal.text("main"))


def test_a_tenant_key_signs_in_to_the_portal_only(driver: WebDriver, router: RouterProcess) -> None:
    status, minted = router.admin("POST", "/tenants/globex/keys", {"name": "portal"})
    assert status == 201, minted
    portal = Console(driver, router, "/portal")
    portal.sign_in(minted["key"])
    portal.open("/endpoints")
    assert "globex-all" in portal.text("#endpoints")
    assert "acme-invoices" not in portal.text("#endpoints")
    # Edit its endpoint's document: the masked secret sent back keeps the stored one.
    portal.open("/endpoints/globex-all")
    area = driver.find_element(By.NAME, "document")
    doc = orjson.loads(area.get_attribute("value") or "")
    assert doc["secret"].startswith("…")
    doc["event_types"] = ["user.*"]
    area.clear()
    area.send_keys(orjson.dumps(doc).decode())
    portal.submit("#edit-entity")
    portal.wait_text("globex-all saved", ".flash")
    status, stored = router.admin("GET", "/endpoints/globex-all")
    assert status == 200 and stored["event_types"] == ["user.*"]
    assert stored["secret"] == doc["secret"]  # still the same secret's last four
    portal.open("/endpoints/acme-invoices")
    assert "404" in portal.text("h1")
    # Create one: it is the tenant's whatever the form says, its secret shown once.
    portal.open("/endpoints")
    portal.fill({"id": "globex-new", "url": "http://127.0.0.1:9/new"})
    portal.submit("#new-endpoint")
    portal.wait_text("whsec_", "#secret-value")
    assert router.admin("GET", "/endpoints/globex-new")[1]["tenant"] == "globex"
    console = Console(driver, router)
    console.sign_in(minted["key"], refused=True)  # a tenant key is no admin token


def test_a_tenants_portal_origins_may_frame_its_portal_and_no_one_else(
    router: RouterProcess,
) -> None:
    origin = "https://app.acme.example"
    status, body = router.admin("PATCH", "/tenants/acme", {"portal_origins": [origin]})
    assert status == 200, body
    # Only origins: anything else would be spliced into the CSP header.
    status, body = router.admin(
        "PATCH", "/tenants/globex", {"portal_origins": ["https://x.example; script-src *"]}
    )
    assert status == 422 and body["issues"][0]["path"] == "portal_origins[0]", body
    tls = {"x-forwarded-proto": "https"}
    for tenant, ancestors, same_site in (
        ("acme", f"frame-ancestors {origin}", "SameSite=None"),
        ("globex", "frame-ancestors 'none'", "SameSite=Strict"),
    ):
        link = mint_link(router, tenant)
        status, headers, _ = router.request("GET", link.split(str(router.port), 1)[1], None, tls)
        assert status == 200
        assert headers["content-security-policy"].endswith(ancestors), tenant
        assert same_site in headers["set-cookie"] and "Secure" in headers["set-cookie"]
        cookie = headers["set-cookie"].split(";")[0]
        status, headers, _ = router.request("GET", "/portal/events", None, {"cookie": cookie})
        assert status == 200 and headers["content-security-policy"].endswith(ancestors)
    status, headers, _ = router.request("GET", "/console/login")
    assert headers["content-security-policy"].endswith("frame-ancestors 'none'")


def _embedding_page(link: str) -> bytes:
    """What a SaaS dashboard serves: its own page with the portal link in a frame."""
    return (
        "<!doctype html><html><head><title>SaaS dashboard</title></head><body>"
        f'<h1>Dashboard</h1><iframe id="portal" src="{link}" width="900" height="600">'
        "</iframe></body></html>"
    ).encode()


def _framed_text(driver: WebDriver) -> str:
    """The text of the document in the dashboard's frame (as far as it loaded)."""
    driver.switch_to.frame(driver.find_element(By.ID, "portal"))
    try:
        return str(driver.find_element(By.TAG_NAME, "body").text)
    finally:
        driver.switch_to.default_content()


def test_a_second_origin_frames_the_portal_only_when_the_tenant_lists_it(
    driver: WebDriver, router: RouterProcess, tmp_path: Path
) -> None:
    """A real cross-origin frame: a page on another port of 127.0.0.1 embeds the portal."""
    acme_source = router.config["sources"][0]
    acme_event = hookrouter_send(router, tmp_path, acme_source, "invoice.paid")
    served: dict[str, bytes] = {}

    def dashboard(received: Received) -> Reply:
        return Reply(200, served["page"], [("content-type", "text/html; charset=utf-8")])

    with ThreadedReceiver(dashboard) as saas:
        origin = f"http://127.0.0.1:{saas.port}"
        status, body = router.admin("PATCH", "/tenants/acme", {"portal_origins": [origin]})
        assert status == 200, body
        portal = Console(driver, router, "/portal")
        for tenant, allowed in (("acme", True), ("globex", False)):
            driver.delete_all_cookies()
            driver.get_log("browser")  # start this round's console log empty
            served["page"] = _embedding_page(mint_link(router, tenant))
            driver.get(f"{origin}/dashboard")
            portal.wait_text("Dashboard", "h1")
            if allowed:  # the link's page, then the portal's events, inside the frame
                portal.wait(lambda d: acme_event in _framed_text(d))
                portal.screenshot("portal-framed")
                continue
            refused = portal.wait(
                lambda d: [e for e in d.get_log("browser") if "frame-ancestors" in e["message"]]
            )
            assert "'none'" in refused[0]["message"], refused
            assert "Signed in" not in _framed_text(driver)
            assert "Events" not in _framed_text(driver)
