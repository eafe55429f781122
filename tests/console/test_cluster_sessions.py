"""Two routers on one PostgreSQL store: a browser's session and links work on either node."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from tests.console.conftest import http_session
from tests.support.postgres_store import (
    postgres_available,
    schema_for,
    shared_server,
    store_options,
)
from tests.support.router import RouterProcess, base_config

from hookrouter.admin.operations import Principal
from hookrouter.clock import ManualClock
from hookrouter.console.sessions import IDLE_SECONDS, LINK_SECONDS, SharedLinks, SharedSessions
from hookrouter.store.postgres import PostgresStore

pytestmark = pytest.mark.skipif(not postgres_available(), reason="PostgreSQL is not installed")

FORM = {"content-type": "application/x-www-form-urlencoded"}


def _node(tmp_path: Path, name: str) -> RouterProcess:
    workdir = tmp_path / name
    workdir.mkdir()
    cfg = base_config(workdir / "data", 0)
    cfg["store"] = {
        "path": str(workdir / "data"),
        "backend": "postgres",
        "postgres": {"dsn": shared_server().dsn, "schema": schema_for(tmp_path), "pool_size": 4},
    }
    cfg["cluster"] = {"node_id": name}
    return RouterProcess(workdir, cfg)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[RouterProcess, RouterProcess]]:
    with _node(tmp_path, "a") as a, _node(tmp_path, "b") as b:
        yield a, b


def _get(node: RouterProcess, path: str, cookie: str) -> tuple[int, dict[str, str], str]:
    status, headers, body = node.request("GET", path, headers={"cookie": cookie})
    return status, headers, body.decode()


def _post(node: RouterProcess, path: str, cookie: str, form: dict[str, Any]) -> int:
    headers = {**FORM, "cookie": cookie}
    status, _, _ = node.request("POST", path, urlencode(form).encode(), headers)
    return status


def _csrf(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, page[:500]
    return match.group(1)


def test_a_console_session_opened_on_one_node_works_on_the_other(
    nodes: tuple[RouterProcess, RouterProcess],
) -> None:
    a, b = nodes
    cookie = http_session(a)
    status, _, page = _get(b, "/console/tenants", cookie)
    assert status == 200, page[:300]  # not a redirect to the sign-in form
    # A change on B, its flash message shown by A (the load balancer's next pick).
    assert _post(b, "/console/tenants", cookie, {"csrf": _csrf(page), "id": "initech"}) == 303
    status, _, page = _get(a, "/console/tenants", cookie)
    assert status == 200 and "Tenant initech created." in page
    # Signing out on A ends the session on B too.
    assert _post(a, "/console/logout", cookie, {"csrf": _csrf(page)}) == 303
    status, headers, _ = _get(b, "/console/tenants", cookie)
    assert status == 303 and headers["location"].endswith("/console/login")


def test_a_portal_link_minted_on_one_node_opens_on_the_other_once(
    nodes: tuple[RouterProcess, RouterProcess],
) -> None:
    a, b = nodes
    status, minted = a.admin("POST", "/tenants/acme/portal-links")
    assert status == 201, minted
    path = minted["url"].split(str(a.port), 1)[1]
    status, headers, page = b.request("GET", path)
    assert status == 200 and b"Signed in" in page
    cookie = headers["set-cookie"].split(";")[0]
    for node in (a, b):
        status, _, page_text = _get(node, "/portal/events", cookie)
        assert status == 200 and "portal (acme, link)" in page_text
        status, _, _ = _get(node, "/console/", cookie)
        assert status == 303  # a portal session opens no console
    status, _, page = a.request("GET", path)
    assert status == 403 and b"used or expired" in page


async def test_shared_sessions_expire_when_idle_and_keep_their_flash(tmp_path: Path) -> None:
    store = PostgresStore(**store_options(tmp_path))  # type: ignore[arg-type]
    await store.open()
    try:
        clock = ManualClock(1_800_000_000.0)
        table = store.session_table()
        console, portal = (
            SharedSessions(table, "/console", clock),
            SharedSessions(table, "/portal", clock),
        )
        session = await console.create(Principal(tenant=None, read_only=True), "console (ro)")
        assert await portal.get(session.id) is None  # a session opens its own site only
        session.flash.append("saved")
        await console.save(session)
        again = await console.get(session.id)
        assert again is not None and again.flash == ["saved"] and again.principal.read_only
        # Each request refreshes the shared last-seen time (at most once a minute).
        for _ in range(3):
            clock.advance(IDLE_SECONDS - 10)
            seen = await console.get(session.id)
            assert seen is not None
            await console.save(seen)
        clock.advance(IDLE_SECONDS + 1)
        assert await console.get(session.id) is None
        assert await table.get_session(session.id) is None  # and the row is gone
        links = SharedLinks(table, clock)
        late = await links.mint("acme")
        clock.advance(LINK_SECONDS + 1)
        assert await links.redeem(late.token) is None
    finally:
        await store.close()
