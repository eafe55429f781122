"""Documents the admin API receives, on a real router: no ``env:``, no private literal hosts.

Issue 33 item 9: an endpoint created with ``headers = {"X-Leak": "env:PATH"}``
sent the router's environment to its receiver, and the 422 for an unset
variable told which variables exist. Item 16 (config time): an endpoint URL
whose host is a private IP literal is refused when it is created, not at
its first delivery.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.router import ENDPOINT_SECRET, RouterProcess, base_config

REFUSED = "env: references belong in the operator's config file"


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    tmp = tmp_path_factory.mktemp("env")
    config = base_config(tmp / "data", 0)
    # A file-declared endpoint with a reference the operator wrote.
    config["endpoints"][0]["headers"] = {"Authorization": "env:E2E_HOOK_TOKEN", "X-Team": "b"}
    mp = pytest.MonkeyPatch()
    mp.setenv("E2E_HOOK_TOKEN", "Bearer from-the-operator")
    try:
        with RouterProcess(tmp, config) as proc:
            yield proc
    finally:
        mp.undo()


def endpoint(**extra: object) -> dict[str, object]:
    return {"id": "leaky", "tenant": "acme", "url": "http://127.0.0.1:9/x",
            "secret": ENDPOINT_SECRET, **extra}  # fmt: skip


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        (endpoint(headers={"X-Leak": "env:PATH"}), "headers.X-Leak"),
        # An unset variable answers the very same: nothing tells which ones exist.
        (endpoint(headers={"X-Leak": "env:SURELY_NOT_SET_1234"}), "headers.X-Leak"),
        (endpoint(secret="env:PATH"), "secret"),
        (endpoint(previous_secrets=["env:HOME"]), "previous_secrets[0]"),
    ],
)
def test_env_references_in_received_documents_are_refused(
    router: RouterProcess, doc: dict[str, object], path: str
) -> None:
    status, answer = router.admin("POST", "/endpoints", doc)
    assert status == 422, answer
    assert [i["path"] for i in answer["issues"]] == [path]
    assert answer["issues"][0]["message"].startswith(REFUSED)
    assert router.admin("GET", "/endpoints/leaky")[0] == 404


def test_a_source_secret_cannot_name_the_environment(router: RouterProcess) -> None:
    doc = {"id": "src-env", "tenant": "acme", "provider": "stripe", "secrets": ["env:PATH"]}
    status, answer = router.admin("POST", "/sources", doc)
    assert (status, answer["issues"][0]["path"]) == (422, "secrets[0]"), answer
    assert REFUSED in answer["issues"][0]["message"]


def test_the_operators_own_references_survive_get_then_put(router: RouterProcess) -> None:
    status, doc = router.admin("GET", "/endpoints/acme-invoices")
    assert status == 200
    assert doc["headers"]["Authorization"] == "env:E2E_HOOK_TOKEN"
    assert router.admin("PATCH", "/endpoints/acme-invoices", {"max_in_flight": 3})[0] == 200
    doc["secret"] = ENDPOINT_SECRET  # GET showed it masked
    assert router.admin("PUT", "/endpoints/acme-invoices", {**doc, "headers": {
        "Authorization": "env:E2E_HOOK_TOKEN", "X-Team": "billing"}})[0] == 200  # fmt: skip
    # ... but not copied to another place, where a receiver would read it.
    moved = {**doc, "headers": {"Authorization": "x", "X-Copy": "env:E2E_HOOK_TOKEN"}}
    status, answer = router.admin("PUT", "/endpoints/acme-invoices", moved)
    assert (status, answer["issues"][0]["path"]) == (422, "headers.X-Copy"), answer


def test_private_literal_hosts_are_refused_unless_allowed(tmp_path: Path) -> None:
    config = base_config(tmp_path / "data", 0)
    config["delivery"] = {"allow_private_networks": False}
    for item in config["endpoints"]:
        item["url"] = "http://localhost:9/never"  # a name: checked when delivering
    with RouterProcess(tmp_path, config) as proc:
        doc = endpoint(id="private", url="http://10.0.0.1/")
        status, answer = proc.admin("POST", "/endpoints", doc)
        assert status == 422, answer
        assert answer["issues"][0]["path"] == "url"
        assert "SSRF guard" in answer["issues"][0]["message"]
        assert proc.admin("PATCH", "/endpoints/acme-invoices", {"url": "http://[::1]/"})[0] == 422
        assert proc.admin("POST", "/endpoints", {**doc, "url": "http://example.test/"})[0] == 201
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    with RouterProcess(allowed, base_config(allowed / "data", 0)) as proc:
        assert proc.admin("POST", "/endpoints", endpoint(url="http://10.0.0.1/"))[0] == 201
