"""Signing in to the console: sessions, cookies, CSRF and the security headers."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from selenium.webdriver.common.by import By
from tests.console.conftest import Console, http_session
from tests.support.router import ADMIN_TOKEN, RouterProcess

CSP = re.compile(r"default-src 'self'; script-src 'self';.*frame-ancestors 'none'")


def test_sign_in_shows_the_overview_and_the_tenants(console: Console) -> None:
    console.open("/")
    assert "/console/login" in console.driver.current_url  # no session: the sign-in form
    console.sign_in()
    console.wait_text("acme", "#tenant-queues")
    assert "globex" in console.text("#tenant-queues")
    assert console.driver.find_elements(By.CSS_SELECTOR, ".charts svg polyline")


def test_a_wrong_token_is_refused_and_nothing_is_stored_in_the_browser(console: Console) -> None:
    console.sign_in("not-the-token", refused=True)
    assert "not valid" in console.text("#login-error")
    console.sign_in()
    cookies = console.driver.get_cookies()
    assert [c["name"] for c in cookies] == ["hr_console"]
    session = cookies[0]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert ADMIN_TOKEN not in session["value"]
    storage = console.driver.execute_script(
        "return JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie"
    )
    assert ADMIN_TOKEN not in storage and "hr_console" not in storage  # HttpOnly: unseen


def test_every_page_carries_the_policy_and_session_cookie_flags(router: RouterProcess) -> None:
    cookie = http_session(router)
    for path in ("/", "/login", "/audit", "/fragments/overview", "/no-such-page"):
        status, headers, _ = router.request("GET", "/console" + path, headers={"cookie": cookie})
        assert status in (200, 404), (path, status)
        assert CSP.search(headers.get("content-security-policy", "")), path
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["cache-control"] == "no-store"
    # Behind a TLS proxy the cookie is Secure as well.
    status, headers, _ = router.request(
        "POST",
        "/console/login",
        urlencode({"credential": ADMIN_TOKEN}).encode(),
        {"content-type": "application/x-www-form-urlencoded", "x-forwarded-proto": "https"},
    )
    assert status == 303
    flags = headers["set-cookie"].split("; ")
    assert {"HttpOnly", "SameSite=Strict", "Secure", "Path=/console"} <= set(flags)


def test_a_post_without_the_csrf_token_changes_nothing(router: RouterProcess) -> None:
    cookie = http_session(router)
    form = {"content-type": "application/x-www-form-urlencoded", "cookie": cookie}
    status, _, body = router.request("POST", "/console/logout", b"csrf=forged", form)
    assert status == 403 and b"CSRF" in body
    status, _, _ = router.request("GET", "/console/", headers={"cookie": cookie})
    assert status == 200  # still signed in: the forged sign-out did nothing


def test_login_is_throttled_per_client(router: RouterProcess) -> None:
    form = {"content-type": "application/x-www-form-urlencoded"}
    statuses = [
        router.request("POST", "/console/login", b"credential=guess", form)[0] for _ in range(12)
    ]
    assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
    # Even the right token waits out the window now.
    right = urlencode({"credential": ADMIN_TOKEN}).encode()
    assert router.request("POST", "/console/login", right, form)[0] == 429


def test_static_files_are_cached_and_compressed(router: RouterProcess) -> None:
    status, headers, body = router.request(
        "GET", "/console/static/console.js", headers={"accept-encoding": "gzip"}
    )
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["content-type"].startswith("text/javascript")
    etag = headers["etag"]
    status, _, body = router.request(
        "GET", "/console/static/console.js", headers={"if-none-match": etag}
    )
    assert status == 304 and body == b""
    assert router.request("GET", "/console/static/../app.py")[0] == 404
