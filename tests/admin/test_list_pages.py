"""Entity lists a page at a time (issue 38: an admin read must not cost the whole catalog).

With 100,000 tenants, a list answered every entity (all of it built on the
event loop) and sorted them all first, even for a tenant key that sees one
endpoint. Lists are now pages by id with a cursor; a tenant's own list reads
the catalog's per-tenant index.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.admin.conftest import TENANTS
from tests.support.router import ADMIN_TOKEN, ENDPOINT_SECRET, RouterProcess, base_config

from hookrouter.admin.entities import EntityService
from hookrouter.admin.paging import SortedIds, page_of
from hookrouter.client import Client

# -- the ordered ids -------------------------------------------------------------


def walk(ids: SortedIds, limit: int) -> list[str]:
    seen: list[str] = []
    after: str | None = None
    while True:
        chunk, after = ids.page(after, limit)
        seen.extend(chunk)
        if after is None:
            return seen


def test_pages_cover_every_id_once_in_order() -> None:
    ids = SortedIds(f"t{i:03d}" for i in (5, 1, 9, 3, 7, 2))
    ids.add("t004")
    ids.add("t004")  # already there: once
    ids.discard("t009")
    ids.discard("t999")  # not there: nothing
    assert walk(ids, 2) == ["t001", "t002", "t003", "t004", "t005", "t007"]
    assert walk(ids, 6) == walk(ids, 100) == walk(ids, 1)
    assert ids.page(None, 6) == (walk(ids, 6), None)  # exactly one page: no cursor


def test_a_cursor_deleted_since_still_marks_its_place() -> None:
    ids = SortedIds(["a", "b", "c", "d"])
    first, cursor = ids.page(None, 2)
    assert (first, cursor) == (["a", "b"], "b")
    ids.discard("b")
    ids.add("bb")
    assert ids.page(cursor, 2) == (["bb", "c"], "c")


def test_a_few_unordered_ids_page_the_same_way() -> None:
    assert page_of({"e3", "e1", "e2"}, None, 2) == (["e1", "e2"], "e2")
    assert page_of({"e3", "e1", "e2"}, "e2", 2) == (["e3"], None)


# -- the entity service ----------------------------------------------------------


async def test_the_service_pages_through_changes_and_by_tenant(service: EntityService) -> None:
    items, cursor = service.page("tenant", None, 10)
    assert [t.id for t in items] == sorted(f"t{i}" for i in range(TENANTS))[:10]
    await service.delete("endpoint", "e0")
    await service.put("tenant", {"id": "t00"})  # sorts right after t0
    everything: list[str] = []
    after: str | None = None
    while True:
        page, after = service.page("tenant", after, 7)
        everything.extend(t.id for t in page)
        if after is None:
            break
    assert everything == sorted([f"t{i}" for i in range(TENANTS)] + ["t00"])
    endpoints, _ = service.page("endpoint", None, 1000)
    assert "e0" not in {e.id for e in endpoints} and len(endpoints) == TENANTS - 1
    own, cursor = service.page("endpoint", None, 10, tenant="t7")
    assert ([e.id for e in own], cursor) == (["e7"], None)
    assert service.page("tenant", None, 10, tenant="t7")[0][0].id == "t7"
    assert service.page("tenant", None, 10, tenant="nobody") == ([], None)


# -- on a real router --------------------------------------------------------------

NUMBERED = [f"p{i:03d}" for i in range(150)]


def numbered(ids: list[str]) -> list[str]:
    """The tenants the fixture made (other tests add their own)."""
    return [i for i in ids if len(i) == 4 and i.startswith("p") and i[1:].isdigit()]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    tmp = tmp_path_factory.mktemp("pages")
    with RouterProcess(tmp, base_config(tmp / "data", 0)) as proc:
        for i in range(150):
            assert proc.admin("PUT", f"/tenants/p{i:03d}", {})[0] == 201
        yield proc


def test_a_list_answers_one_page_and_the_cursor_walks_the_rest(router: RouterProcess) -> None:
    status, first = router.admin("GET", "/tenants?limit=50")
    assert status == 200 and len(first["data"]) == 50
    seen = [t["id"] for t in first["data"]]
    cursor = first["next_after"]
    while cursor is not None:
        status, page = router.admin("GET", f"/tenants?limit=50&after={cursor}")
        assert status == 200 and len(page["data"]) <= 50
        seen.extend(t["id"] for t in page["data"])
        cursor = page["next_after"]
    assert numbered(seen) == NUMBERED and len(seen) == len(set(seen))
    # The default page is bounded too: a platform's 100,000 tenants are not one answer.
    assert len(router.admin("GET", "/tenants")[1]["data"]) == 100


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=many"])
def test_a_bad_page_size_is_a_clear_400(router: RouterProcess, query: str) -> None:
    status, answer = router.admin("GET", f"/tenants?{query}")
    assert status == 400 and "limit" in answer["message"], answer


def test_a_tenant_key_lists_its_own_and_not_another_tenants(router: RouterProcess) -> None:
    assert router.admin("PUT", "/tenants/pages-own", {})[0] == 201
    endpoint = {
        "tenant": "pages-own",
        "url": "https://hooks.example.com/in",
        "secret": ENDPOINT_SECRET,
    }
    assert router.admin("PUT", "/endpoints/pages-own-ep", endpoint)[0] == 201
    status, created = router.admin("POST", "/tenants/pages-own/keys", {"name": "pages"})
    assert status == 201
    key = created["key"]
    status, own = router.admin("GET", "/endpoints", token=key)
    assert (status, [e["id"] for e in own["data"]]) == (200, ["pages-own-ep"])
    assert router.admin("GET", "/endpoints?tenant=pages-own", token=key)[0] == 200
    assert router.admin("GET", "/endpoints?tenant=p001", token=key)[0] == 404
    status, mine = router.admin("GET", "/endpoints?tenant=pages-own")  # the admin, filtered
    assert [e["id"] for e in mine["data"]] == ["pages-own-ep"]


def test_the_client_follows_the_pages(router: RouterProcess) -> None:
    with Client(f"http://127.0.0.1:{router.port}", ADMIN_TOKEN) as api:
        tenants = [t.id for t in api.list_tenants(limit=40)]
    assert numbered(tenants) == NUMBERED
