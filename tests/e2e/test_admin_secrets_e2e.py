"""Secrets through the admin API of a real router (issue 33 items 10 and 17).

A document read with GET and sent back with PUT carried the masked secret,
which was stored: real signatures then failed. Now the mask is refused with
422 and the real secret keeps working. A URL with credentials in an error
answer is redacted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.conftest import stripe_event
from tests.support.router import RouterProcess, base_config


@pytest.fixture
def asyncio_router(tmp_path: Path) -> Iterator[RouterProcess]:
    with RouterProcess(tmp_path, base_config(tmp_path / "data", 0)) as router:
        yield router


def test_a_source_read_back_with_its_mask_is_refused_and_the_secret_kept(
    asyncio_router: RouterProcess,
) -> None:
    router = asyncio_router
    _, source = router.admin("GET", "/sources/acme-stripe")
    assert source["secrets"][0].startswith("…")
    status, body = router.admin("PUT", "/sources/acme-stripe", source)
    assert status == 422, body
    assert body["issues"][0]["path"] == "secrets[0]"
    assert "masked value" in body["issues"][0]["message"]
    status, body = router.admin("PATCH", "/sources/acme-stripe", {"secrets": source["secrets"]})
    assert status == 422, body
    # The stored secret is untouched: a real Stripe signature still verifies.
    status, ack = router.post("acme-stripe", *stripe_event("evt_" + uuid.uuid4().hex))
    assert status == 200, ack


def test_an_endpoint_read_back_with_masked_secret_and_headers_is_refused(
    asyncio_router: RouterProcess,
) -> None:
    router = asyncio_router
    status, _ = router.admin(
        "PATCH", "/endpoints/acme-invoices", {"headers": {"Authorization": "Bearer 0123456789ab"}}
    )
    assert status == 200
    _, endpoint = router.admin("GET", "/endpoints/acme-invoices")
    status, body = router.admin("PUT", "/endpoints/acme-invoices", endpoint)
    assert status == 422, body
    assert {i["path"] for i in body["issues"]} == {"secret", "headers.Authorization"}


def test_short_secrets_are_refused_through_the_admin_api(asyncio_router: RouterProcess) -> None:
    doc = {"id": "gh", "tenant": "acme", "provider": "github", "secrets": ["x"]}
    status, body = asyncio_router.admin("POST", "/sources", doc)
    assert status == 422, body
    assert "at least 16 characters" in body["issues"][0]["message"]


def test_error_answers_do_not_echo_url_credentials(asyncio_router: RouterProcess) -> None:
    doc = {"id": "e", "tenant": "acme", "url": "ftp://alice:pass@host/",
           "secret": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"}  # fmt: skip
    status, body = asyncio_router.admin("POST", "/endpoints", doc)
    assert status == 422, body
    assert "pass" not in str(body)
    assert "ftp://***@host/" in body["issues"][0]["message"]
