"""The console lists a page of entities at a time (issue 38: a platform has 100,000).

The endpoints page used to ask the admin API for every endpoint and render
them all. It now shows the first page (the API's largest) and links to the
next, which carries on by id.
"""

from __future__ import annotations

from selenium.webdriver.common.by import By
from tests.console.conftest import Console
from tests.support.router import ENDPOINT_SECRET

from hookrouter.admin.paging import MAX_PAGE

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
