"""Secrets at validation: credentials never echoed, minimum lengths, masks refused.

Issue 33 items 17 (URLs with credentials in messages) and 10 (one-character
secrets accepted; a masked value sent back by a client stored as the secret).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from hookrouter.config import parse_config
from hookrouter.config.entities import (
    MIN_HMAC_SECRET_CHARS,
    MIN_STANDARD_KEY_BYTES,
    is_masked,
    mask_secret,
    parse_entity_doc,
)
from hookrouter.errors import ConfigError, redact_url

ENDPOINT_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"


def standard_secret(size: int) -> str:
    return "whsec_" + base64.b64encode(bytes(range(size))).decode()


def issues(kind: str, doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_entity_doc(kind, doc)
    return [str(issue) for issue in err.value.issues]


def source(provider: str, *secrets: str) -> dict[str, Any]:
    doc = {"id": "s", "tenant": "acme", "provider": provider, "secrets": list(secrets)}
    if provider == "hmac":
        doc["hmac"] = {"header": "X-Signature"}
    return doc


def endpoint(**fields: Any) -> dict[str, Any]:
    return {"id": "e", "tenant": "acme", "url": "https://hooks.example.com/h",
            "secret": ENDPOINT_SECRET, **fields}  # fmt: skip


@pytest.mark.parametrize(
    "url",
    [
        "ftp://alice:pass@host/",
        "ftp://alice:pass@host/?token=tok3n",
        "http://alice:pass@hooks.example.com/h",
        "https://alice:pass@hooks.example.com:notaport/h",
        "gopher://alice:pass@[::1/",
    ],
)
def test_config_errors_do_not_echo_url_credentials(url: str) -> None:
    found = issues("endpoint", endpoint(url=url))
    assert found
    assert all(issue.startswith("url: ") for issue in found)
    assert not any("alice:pass" in issue or "tok3n" in issue for issue in found), found


def test_the_config_file_error_for_a_credentialed_ftp_url_is_redacted() -> None:
    doc = {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"path": "./data"},
        "admin": {"token": "admin-token-123"},
        "tenants": [{"id": "acme"}],
        "endpoints": [{**endpoint(url="ftp://alice:pass@host/")}],
    }
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert "pass" not in str(err.value)
    assert "ftp://***@host/" in str(err.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ftp://alice:pass@host/", "ftp://***@host/"),
        ("redis://:hunter2@cache:6379/0", "redis://***@cache:6379/0"),
        ("http://a:p@ss@host/x", "http://***@host/x"),
        ("got 'https://bob@h/p?q=1'", "got 'https://***@h/p?q=1'"),
        (
            "https://h/cb?access_token=abc&page=2&API_KEY=k#sig=s",
            "https://h/cb?access_token=***&page=2&API_KEY=***#sig=***",
        ),
        ("https://h/p?x-amz-signature=abc", "https://h/p?x-amz-signature=***"),
        ("https://h/p@x?q=1", "https://h/p@x?q=1"),
        ("no url here: user@example.com", "no url here: user@example.com"),
    ],
)
def test_redact_url(text: str, expected: str) -> None:
    assert redact_url(text) == expected


@pytest.mark.parametrize("provider", ["github", "shopify", "slack", "hmac"])
def test_hmac_providers_need_sixteen_characters(provider: str) -> None:
    short = "s" * (MIN_HMAC_SECRET_CHARS - 1)
    found = issues("source", source(provider, "x" * MIN_HMAC_SECRET_CHARS, short))
    assert found == [
        f"secrets[1]: is too short: use at least {MIN_HMAC_SECRET_CHARS} characters "
        "(copy the secret the provider generated)"
    ]
    assert parse_entity_doc("source", source(provider, "x" * MIN_HMAC_SECRET_CHARS))


def test_a_one_character_secret_is_refused() -> None:
    assert issues("source", source("github", "x"))[0].startswith("secrets[0]: is too short")


def test_stripe_secrets_are_whsec_and_sixteen_characters() -> None:
    assert parse_entity_doc("source", source("stripe", "whsec_" + "a" * 16))
    [short] = issues("source", source("stripe", "whsec_" + "a" * 15))
    assert "at least 16 characters after whsec_" in short
    [bare] = issues("source", source("stripe", "a" * 40))
    assert "start with whsec_" in bare


def test_standard_webhooks_keys_are_at_least_24_bytes() -> None:
    assert parse_entity_doc("source", source("standard", standard_secret(MIN_STANDARD_KEY_BYTES)))
    [short] = issues("source", source("standard", standard_secret(MIN_STANDARD_KEY_BYTES - 1)))
    assert f"is {MIN_STANDARD_KEY_BYTES - 1} bytes" in short


def test_outbound_endpoint_secrets_are_at_least_24_bytes() -> None:
    assert parse_entity_doc("endpoint", endpoint(secret=standard_secret(24)))
    found = issues(
        "endpoint",
        endpoint(secret=standard_secret(16), previous_secrets=[standard_secret(8)]),
    )
    assert [i.split(":")[0] for i in found] == ["secret", "previous_secrets[0]"]
    assert all("24 to 64 random bytes" in i for i in found)


def test_secret_problems_never_echo_the_secret() -> None:
    secret = "whsec_" + "Q" * 10
    [issue] = issues("source", source("stripe", secret))
    assert secret not in issue


@pytest.mark.parametrize(
    "secret",
    ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "short", "", "abcdefgh", "env:STRIPE_SECRET"],
)
def test_is_masked_recognises_every_mask(secret: str) -> None:
    assert is_masked(mask_secret(secret)) is not secret.startswith("env:")
    assert not is_masked(secret)


def test_mask_keeps_the_last_four_characters_of_long_secrets() -> None:
    assert mask_secret("whsec_e2e_stripe_secret") == "…cret"
    assert mask_secret("12345678") == "…"


def test_a_masked_value_sent_back_is_refused_not_stored() -> None:
    real = "whsec_e2e_stripe_secret_0123"
    [issue] = issues("source", source("stripe", mask_secret(real)))
    assert "masked value" in issue
    found = issues(
        "endpoint",
        endpoint(
            secret=mask_secret(ENDPOINT_SECRET),
            previous_secrets=[mask_secret(ENDPOINT_SECRET)],
            headers={"Authorization": mask_secret("Bearer abcdefghijkl")},
        ),
    )
    assert [i.split(":")[0] for i in found] == [
        "secret",
        "previous_secrets[0]",
        "headers.Authorization",
    ]
    assert all("masked value" in i for i in found)


def test_a_redis_url_with_a_password_is_not_echoed() -> None:
    doc = {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"path": "./data"},
        "admin": {"token": "admin-token-123"},
        "redis": {"url": "http://:hunter2@cache:6379/0"},
        "tenants": [{"id": "acme"}],
    }
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    found = [str(issue) for issue in err.value.issues]
    assert any(issue.startswith("redis.url: expected a redis:// URL") for issue in found), found
    assert not any("hunter2" in issue for issue in found), found
