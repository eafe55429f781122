"""The body replay guard on a real router (issue 33 item 15).

GitHub and Shopify sign only the body; their delivery id header is not
signed. The old router took the same signed body with a fresh id as a new
event every time; now it answers like a dedup hit, with the first id.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.support.router import RouterProcess, base_config
from tests.support.verify_signers import github_headers, shopify_headers

GITHUB_SECRET = "e2e-github-secret-0123456789"
SHOPIFY_SECRET = "e2e-shopify-secret-0123456789"


def _config(tmp_path: Path) -> dict[str, Any]:
    config = base_config(tmp_path / "data", 0)
    config["sources"] += [
        {"id": "acme-gh", "tenant": "acme", "provider": "github", "secrets": [GITHUB_SECRET]},
        {"id": "acme-shop", "tenant": "acme", "provider": "shopify",
         "secrets": [SHOPIFY_SECRET]},
        {"id": "acme-gh-off", "tenant": "acme", "provider": "github",
         "secrets": [GITHUB_SECRET], "replay_window": "0"},
    ]  # fmt: skip
    return config


@pytest.fixture
def router(tmp_path: Path) -> Any:
    with RouterProcess(tmp_path, _config(tmp_path)) as router:
        yield router


def _signed(provider: str, body: bytes) -> dict[str, str]:
    """Signed ``body`` with a fresh delivery id, as an attacker replaying it would send."""
    if provider == "github":
        headers = github_headers(GITHUB_SECRET, body, 0)
        headers["x-github-delivery"] = str(uuid.uuid4())
    else:
        headers = shopify_headers(SHOPIFY_SECRET, body, 0)
        headers["x-shopify-webhook-id"] = str(uuid.uuid4())
    return {**headers, "content-type": "application/json"}


def _events(router: RouterProcess, source: str) -> list[str]:
    status, doc = router.admin("GET", "/events?tenant=acme&limit=100")
    assert status == 200, doc
    return [e["id"] for e in doc["data"] if e["source"] == source]


@pytest.mark.parametrize(("source", "provider"), [("acme-gh", "github"), ("acme-shop", "shopify")])
def test_a_signed_body_replayed_with_fresh_ids_is_a_duplicate(
    router: RouterProcess, source: str, provider: str
) -> None:
    body = orjson.dumps({"action": "opened", "issue": {"id": uuid.uuid4().hex}})
    status, first = router.post(source, body, _signed(provider, body))
    assert (status, first["duplicate"]) == (200, False), first
    for _ in range(3):
        status, doc = router.post(source, body, _signed(provider, body))
        assert status == 200 and doc == {"id": first["id"], "duplicate": True}, doc
    other = orjson.dumps({"action": "closed", "issue": {"id": uuid.uuid4().hex}})
    status, doc = router.post(source, other, _signed(provider, other))
    assert status == 200 and not doc["duplicate"] and doc["id"] != first["id"]
    assert sorted(_events(router, source)) == sorted([first["id"], doc["id"]])


def test_copies_sent_at_once_share_the_first_id(router: RouterProcess) -> None:
    body = orjson.dumps({"action": "opened", "issue": {"id": uuid.uuid4().hex}})
    answers: list[dict[str, Any]] = []

    def send() -> None:
        answers.append(router.post("acme-gh", body, _signed("github", body))[1])

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(answers) == 8
    assert len({a["id"] for a in answers}) == 1, answers
    assert sum(not a["duplicate"] for a in answers) == 1
    assert len(_events(router, "acme-gh")) == 1


def test_replay_window_zero_turns_the_guard_off(router: RouterProcess) -> None:
    body = orjson.dumps({"action": "opened", "issue": {"id": uuid.uuid4().hex}})
    ids = {router.post("acme-gh-off", body, _signed("github", body))[1]["id"] for _ in range(3)}
    assert len(ids) == 3
