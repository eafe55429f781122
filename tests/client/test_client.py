"""``hookrouter.client``: generated from the OpenAPI document, and working against a router.

The first tests are the drift check: the committed ``_api.py`` is what the
generator makes of the document the routes declare, so every operation has
a method in both clients and no method outlives its operation.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from tests.admin.test_openapi import document
from tests.support.router import ADMIN_TOKEN, ENDPOINT_SECRET, RouterProcess, base_config

from hookrouter.admin import schemas
from hookrouter.client import ApiError, AsyncClient, Client, ConnectError
from hookrouter.client import generate as gen
from hookrouter.client.base import AsyncBase, SyncBase

API_FILE = Path(gen.__file__).with_name("_api.py")
RUFF = str(Path(sys.executable).with_name("ruff"))


def methods(cls: type) -> set[str]:
    base = SyncBase if issubclass(cls, SyncBase) else AsyncBase
    return {n for n in vars(cls) if not n.startswith("_")} - set(vars(base))


def test_the_client_is_generated_from_the_current_document() -> None:
    expected = gen.formatted(gen.generate(document()), RUFF)
    assert API_FILE.read_text() == expected, (
        "regenerate: curl -s http://<router>/admin/v1/openapi.json | "
        "python -m hookrouter.client.generate > src/hookrouter/client/_api.py"
    )


def test_every_operation_has_a_method_in_both_clients_and_vice_versa() -> None:
    doc = document()
    operations = {op["operationId"] for item in doc["paths"].values() for op in item.values()}
    assert set(gen.NAMES) == operations
    assert methods(Client) == methods(AsyncClient) == set(gen.NAMES.values())
    for name in gen.NAMES.values():
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
        assert not inspect.iscoroutinefunction(getattr(Client, name)), name


def test_a_new_operation_without_a_name_fails_generation() -> None:
    doc = document()
    doc["paths"]["/admin/v1/new"] = {"get": {**doc["paths"]["/admin/v1/tenants"]["get"],
                                             "operationId": "getNew"}}  # fmt: skip
    with pytest.raises(gen.UnnamedOperation, match="getNew"):
        gen.generate(doc)


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    tmp = tmp_path_factory.mktemp("client")
    with RouterProcess(tmp, base_config(tmp / "data", 0)) as proc:
        yield proc


def url(router: RouterProcess) -> str:
    return f"http://127.0.0.1:{router.port}"


def test_sync_client_first_integration(router: RouterProcess) -> None:
    with Client(url(router), ADMIN_TOKEN) as api:
        assert api.openapi()["openapi"] == "3.1.0"
        tenant = api.put_tenant("shop", {"queue_capacity": 50})
        assert tenant == schemas.Tenant(id="shop", queue_capacity=50)
        key = api.create_key("shop", {"name": "backend"})
        assert key.key.startswith("hrk_") and key.tenant == "shop"
    with Client(url(router), key.key) as shop:
        created = shop.create_endpoint(
            {
                "id": "shop-orders",
                "tenant": "shop",
                "url": "http://127.0.0.1:9/o",
                "secret": ENDPOINT_SECRET,
                "event_types": ["order.*"],
            }
        )
        assert isinstance(created, schemas.Endpoint) and created.secret.startswith("…")
        assert [e.id for e in shop.list_endpoints()] == ["shop-orders"]
        published = shop.publish({"type": "order.paid", "payload": {"n": 1}}, idempotency_key="k1")
        again = shop.publish({"type": "order.paid", "payload": {"n": 1}}, idempotency_key="k1")
        assert again.id == published.id
        event = shop.get_event(published.id, with_body=True)
        assert event.source == "api:shop" and event.deliveries[0].endpoint == "shop-orders"
        assert shop.list_events(limit=5).data[0].id == published.id
        batch = shop.publish_batch({"events": [{"type": "order.new", "payload": {}}] * 3})
        assert [item.status for item in batch.data] == [202] * 3
        with pytest.raises(ApiError) as refused:
            shop.get_tenant("acme")  # an admin-only operation: not there for a key
        assert (refused.value.status, refused.value.error) == (404, "not_found")
        with pytest.raises(ApiError) as invalid:
            shop.update_endpoint("shop-orders", {"url": "ftp://x"})
        assert invalid.value.status == 422 and invalid.value.issues[0].path == "url"
        shop.delete_endpoint("shop-orders")
        assert shop.list_endpoints() == []


def test_async_client(router: RouterProcess) -> None:
    async def main() -> None:
        async with AsyncClient(url(router), ADMIN_TOKEN) as api:
            tenants, sources = await asyncio.gather(api.list_tenants(), api.list_sources())
            assert {"acme", "globex"} <= {t.id for t in tenants}
            assert {s.id for s in sources} >= {"acme-stripe"}
            published = await api.publish({"tenant": "acme", "type": "invoice.x", "payload": {}})
            assert (await api.get_event(published.id)).tenant == "acme"
            result = await api.replay({"tenant": "acme"}, dry_run=True)
            assert result.matched == 0
            with pytest.raises(ApiError) as missing:
                await api.get_source("nope")
            assert missing.value.status == 404

    asyncio.run(main())


def test_no_router_is_a_connect_error() -> None:
    with Client("http://127.0.0.1:9", "x" * 16) as api, pytest.raises(ConnectError):
        api.list_tenants()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``hookrouter`` command line, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "hookrouter", *args], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_cli_commands_use_the_client(router: RouterProcess) -> None:
    env_args = ["--url", url(router), "--token", ADMIN_TOKEN]

    created = run(
        "tenants", "create", "cli-t", "--doc", '{"max_in_flight": 4}', *env_args, "--json"
    )
    assert created.returncode == 0, created.stderr
    assert '"max_in_flight": 4' in created.stdout
    listed = run("tenants", "list", "--config", str(router.config_path))
    assert "id=cli-t" in listed.stdout, listed.stderr
    key = run("keys", "create", "cli-t", "--name", "ci", *env_args, "--json")
    assert key.returncode == 0 and '"key": "hrk_' in key.stdout, key.stderr
    keys = run("keys", "list", "cli-t", *env_args)
    assert "name=ci" in keys.stdout and "key=" not in keys.stdout, keys.stdout
    missing = run("endpoints", "get", "nope", *env_args)
    assert missing.returncode == 1 and "404 not_found" in missing.stderr
    deleted = run("tenants", "delete", "cli-t", *env_args)
    assert (deleted.returncode, deleted.stdout.strip()) == (0, "ok"), deleted.stderr


def test_cli_endpoint_filter_and_filter_test(router: RouterProcess) -> None:
    env_args = ["--url", url(router), "--token", ADMIN_TOKEN]

    doc = orjson.dumps({"tenant": "acme", "url": "http://127.0.0.1:9/f", "secret": ENDPOINT_SECRET})
    created = run("endpoints", "create", "cli-f", "--doc", doc.decode(),
                  "--filter", '{"amount": {"$gt": 10}}', *env_args, "--json")  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert orjson.loads(created.stdout)["filter"] == {"amount": {"$gt": 10}}
    tried = run("endpoints", "filter-test", "cli-f", "--payload", '{"amount": 3}', *env_args)
    assert tried.stdout.strip() == "matched=false  reason=amount: 3 does not satisfy $gt 10"
    tried = run("endpoints", "filter-test", "cli-f", "--payload", "{}", "--header", "X-A=b",
                "--filter", '{"$headers": {"x-a": "b"}}', *env_args, "--json")  # fmt: skip
    assert orjson.loads(tried.stdout) == {"matched": True, "reason": None}, tried.stderr
    bad = run("endpoints", "create", "cli-f", "--doc", doc.decode(),
              "--filter", '{"amount": {"$like": "1%"}}', *env_args)  # fmt: skip
    assert bad.returncode == 1
    assert "filter.amount.$like: unknown operator $like" in bad.stderr
    assert run("endpoints", "delete", "cli-f", *env_args).returncode == 0
