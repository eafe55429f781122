"""Fixtures for the console's browser tests: a real router, a real receiver, real Chromium.

The browser is Debian's ``chromium`` driven by its ``chromium-driver`` through
selenium (``.ci/run`` installs both); the tests skip with a clear reason
where they are missing. The tests take the screenshots docs/console.md
shows; ``HOOKROUTER_SCREENSHOTS=1 pytest tests/console`` writes them to
docs/img/console-*.png, a plain run beside each test's files.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from tests.support.delivery_servers import Handler, ThreadedReceiver
from tests.support.router import ADMIN_TOKEN, RouterProcess, base_config

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"


def _browser_missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists() and shutil.which(Path(path).name) is None:
            return f"{path} is not installed (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="session")
def browser_session() -> Iterator[WebDriver]:
    missing = _browser_missing()
    if missing:
        pytest.skip(missing)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def driver(browser_session: WebDriver) -> Iterator[WebDriver]:
    """The shared browser, left on a blank page after each test.

    A console page left open keeps polling its router's port after the router
    stops; a later test's receiver bound to the same port would count those
    requests as its own.
    """
    yield browser_session
    browser_session.get("about:blank")


class Console:
    """A browser session on one router's console (or portal)."""

    def __init__(self, driver: WebDriver, router: RouterProcess, prefix: str = "/console") -> None:
        self.driver = driver
        self.router = router
        self.scratch = router.workdir / "screenshots"
        self.prefix = prefix
        self.base = f"http://127.0.0.1:{router.port}"

    def open(self, path: str, **query: str) -> None:
        url = f"{self.base}{self.prefix}{path}"
        self.driver.get(url + ("?" + urlencode(query) if query else ""))

    def sign_in(self, credential: str = ADMIN_TOKEN, *, refused: bool = False) -> None:
        self.driver.delete_all_cookies()
        self.open("/login")
        self.driver.find_element(By.ID, "credential").send_keys(credential)
        self.driver.find_element(By.ID, "sign-in").click()
        if refused:
            self.wait(lambda d: d.find_elements(By.ID, "login-error"))
        else:
            self.wait(lambda d: "/login" not in d.current_url)

    def wait(self, condition: Any, timeout: float = 15.0) -> Any:
        ignored = (StaleElementReferenceException, NoSuchElementException)
        wait = WebDriverWait(self.driver, timeout, poll_frequency=0.1, ignored_exceptions=ignored)
        return wait.until(condition)

    def element(self, css: str) -> Any:
        """The first element matching ``css``, waited for: a form post may still be loading."""
        return self.wait(lambda d: d.find_element(By.CSS_SELECTOR, css))

    def text(self, css: str = "main") -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def wait_text(self, needle: str, css: str = "main", *, reload: bool = False) -> None:
        def shown(d: WebDriver) -> bool:
            try:
                if needle in self.text(css):
                    return True
            except WebDriverException as exc:
                # Chromium's way of saying the element went stale: a page was loading.
                if "does not belong to the document" not in str(exc.msg):
                    raise
                return False
            if reload:
                d.refresh()
            return False

        try:
            self.wait(shown)
        except TimeoutException:
            page = self.driver.find_element(By.TAG_NAME, "body").text
            raise AssertionError(f"{needle!r} never shown in {css}; the page: {page}") from None

    def submit(self, form_css: str) -> None:
        """Submit a form by its button (accepting a confirm() the script asks)."""
        form = self.driver.find_element(By.CSS_SELECTOR, form_css)
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        alert = _alert(self.driver)
        if alert is not None:
            alert.accept()

    def fill(self, values: dict[str, str]) -> None:
        for name, value in values.items():
            element = self.driver.find_element(By.NAME, name)
            if element.tag_name == "select":
                element.find_element(By.CSS_SELECTOR, f"option[value='{value}']").click()
            else:
                element.clear()
                element.send_keys(value)

    def screenshot(self, name: str) -> None:
        """Into docs/img with HOOKROUTER_SCREENSHOTS=1 (refreshing the docs' pictures),
        else beside the test's files: a plain test run leaves the work tree clean."""
        folder = IMAGES if os.environ.get("HOOKROUTER_SCREENSHOTS") == "1" else self.scratch
        folder.mkdir(parents=True, exist_ok=True)
        assert self.driver.save_screenshot(str(folder / f"console-{name}.png"))


def _alert(driver: WebDriver) -> Any:
    try:
        return driver.switch_to.alert
    except Exception:  # NoAlertPresentException: no confirm on this form
        return None


@pytest.fixture
def receiver() -> Iterator[ThreadedReceiver]:
    with ThreadedReceiver() as server:
        yield server


def router_config(tmp_path: Path, port: int, receiver_port: int) -> dict[str, Any]:
    cfg = base_config(tmp_path / "data", port)
    for endpoint in cfg["endpoints"]:
        endpoint["url"] = f"http://127.0.0.1:{receiver_port}/hooks/{endpoint['id']}"
    return cfg


@pytest.fixture
def router(tmp_path: Path, receiver: ThreadedReceiver) -> Iterator[RouterProcess]:
    proc = RouterProcess(tmp_path)
    proc.config = router_config(tmp_path, proc.port, receiver.port)
    with proc:
        yield proc


@pytest.fixture
def console(driver: WebDriver, router: RouterProcess) -> Console:
    return Console(driver, router)


def http_session(router: RouterProcess, credential: str = ADMIN_TOKEN,
                 prefix: str = "/console") -> str:  # fmt: skip
    """Sign in over plain HTTP; returns the Cookie header value."""
    conn = http.client.HTTPConnection("127.0.0.1", router.port, timeout=10)
    try:
        body = urlencode({"credential": credential})
        conn.request("POST", prefix + "/login", body,
                     {"content-type": "application/x-www-form-urlencoded"})  # fmt: skip
        response = conn.getresponse()
        response.read()
        cookie = response.getheader("set-cookie") or ""
    finally:
        conn.close()
    match = re.match(r"([^=;]+=[^;]+)", cookie)
    assert response.status == 303 and match, (response.status, cookie)
    return match.group(1)


__all__ = ["Console", "Handler", "http_session"]
