"""Pre-signed request sets: every request verifies with the providers' own SDKs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import stripe
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from bench import signing

STRIPE_SECRET = "whsec_test_bench_secret"
STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
STREAMS = [
    signing.Stream("acme-stripe", "stripe", STRIPE_SECRET),
    signing.Stream("acme-std", "standard", STANDARD_SECRET, "customer.created"),
]


def _all(tmp_path: Path, count: int, **kwargs: object) -> tuple[signing.RequestSet, list[bytes]]:
    rs = signing.generate(tmp_path / "set", STREAMS, count, **kwargs)  # type: ignore[arg-type]
    return rs, list(signing.iter_requests(rs))


def test_every_request_verifies_with_the_provider_sdks(tmp_path: Path) -> None:
    _rs, raws = _all(tmp_path, 200)
    assert len(raws) == 200
    for raw in raws:
        line, headers, body = signing.split_request(raw)
        assert int(headers["content-length"]) == len(body)
        event = json.loads(body)
        if line.startswith("POST /in/acme-stripe "):
            verified = stripe.Webhook.construct_event(
                body.decode(), headers["stripe-signature"], STRIPE_SECRET, tolerance=300
            )
            assert verified["id"] == event["id"]
            assert verified["type"] == "invoice.paid"
        else:
            assert line.startswith("POST /in/acme-std ")
            assert Webhook(STANDARD_SECRET).verify(body, headers)["type"] == "customer.created"
            assert headers["webhook-id"] == event["id"]


def test_ids_are_unique_and_carry_their_index(tmp_path: Path) -> None:
    rs, raws = _all(tmp_path, 500)
    ids = [json.loads(signing.split_request(r)[2])["id"] for r in raws]
    assert len(set(ids)) == 500
    assert [signing.index_of(i) for i in ids] == list(range(500))
    other = signing.generate(tmp_path / "other", STREAMS, 10)
    assert other.run_id != rs.run_id  # a fresh set never repeats another's ids


def test_tampered_body_or_stale_timestamp_is_rejected(tmp_path: Path) -> None:
    stale = int(time.time()) - 3600
    _, raws = _all(tmp_path, 2, timestamp=stale)
    _, headers, body = signing.split_request(raws[0])
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(
            body.decode(), headers["stripe-signature"], STRIPE_SECRET, tolerance=300
        )
    _, fresh = _all(tmp_path / "fresh", 2)
    _, headers, body = signing.split_request(fresh[1])
    with pytest.raises(WebhookVerificationError):
        Webhook(STANDARD_SECRET).verify(body.replace(b"cus_bench", b"cus_evil!"), headers)


def test_the_process_pool_path_signs_the_same_way(tmp_path: Path) -> None:
    big = signing.generate(tmp_path / "big", STREAMS[:1], 45_000, processes=2)
    *_, last = signing.iter_requests(big)
    _, headers, body = signing.split_request(last)
    stripe.WebhookSignature.verify_header(
        body.decode(), headers["stripe-signature"], STRIPE_SECRET, tolerance=300
    )
    assert json.loads(body)["id"] == big.event_id(44_999)


def test_lua_templates_match_the_json_templates(tmp_path: Path) -> None:
    rs, _ = _all(tmp_path, 3)
    lua = rs.lua_file.read_text()
    templates = json.loads((rs.directory / "requests.json").read_text())["templates"]
    assert "count = 3" in lua
    for tmpl in templates:
        first = tmpl[0].replace("\r", "\\r").replace("\n", "\\n").replace('"', '\\"')
        assert first in lua


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        signing.Stream("x", "paypal", "s")
