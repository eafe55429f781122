"""Building verifiers from config, and the config checks."""

from __future__ import annotations

import pytest
from tests.support.verify_signers import EVENT_BODY, NOW, OPTIONS, SECRETS, SIGNERS

from hookrouter.errors import ConfigError
from hookrouter.verify import PROVIDERS, build_verifier, validate_source_options


def test_provider_names():
    assert frozenset({"stripe", "github", "shopify", "slack", "standard", "hmac"}) == PROVIDERS


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_every_provider_builds_and_verifies_its_own_scheme(provider):
    options = OPTIONS.get(provider, {})
    assert validate_source_options(provider, SECRETS[provider], options) == []
    verifier = build_verifier(provider, SECRETS[provider], 300, options)
    assert verifier.provider == provider
    headers = SIGNERS[provider](SECRETS[provider][1], EVENT_BODY, NOW)
    assert verifier.verify(headers, EVENT_BODY, NOW).event_type is not None


@pytest.mark.parametrize(
    ("provider", "secrets", "options", "expected"),
    [
        ("strip", ["s"], {}, [("provider", "unknown provider")]),
        ("github", [], {}, [("secrets", "at least one")]),
        ("github", "one-secret", {}, [("secrets", "list")]),
        ("github", ["ok", ""], {}, [("secrets[1]", "empty")]),
        ("github", ["ok", " padded "], {}, [("secrets[1]", "whitespace")]),
        ("github", ["ok", 7], {}, [("secrets[1]", "string")]),
        ("stripe", ["sk_live_123"], {}, [("secrets[0]", "API key")]),
        ("standard", ["whsec_ok+ok/ok", "whsec_*bad*"], {}, [("secrets[1]", "base64")]),
        ("standard", ["whsec_"], {}, [("secrets[0]", "no key bytes")]),
        ("stripe", ["whsec_x"], {"tolerance": 5}, [("stripe.tolerance", "unknown option")]),
        ("github", ["s"], {"append_action": "yes"}, [("github.append_action", "true or false")]),
        ("hmac", ["s"], {}, [("hmac.header", "required")]),
        (
            "hmac",
            ["s"],
            {"header": "X-S", "algorithm": "md5"},
            [("hmac.algorithm", "unknown algorithm")],
        ),
        (
            "hmac",
            ["s"],
            {"header": "X-S", "encoding": "b32"},
            [("hmac.encoding", "unknown encoding")],
        ),
        ("hmac", ["s"], {"header": "X S"}, [("hmac.header", "header name")]),
        (
            "hmac",
            ["s"],
            {"header": "X-S", "id_field": "data..id"},
            [("hmac.id_field", "dotted path")],
        ),
        ("hmac", ["s"], {"header": "X-S", "prefix": 5}, [("hmac.prefix", "string")]),
        ("hmac", ["s"], {"header": "X-S", "colour": "red"}, [("hmac.colour", "unknown option")]),
    ],
)
def test_validation_finds_each_problem_by_path(provider, secrets, options, expected):
    issues = validate_source_options(provider, secrets, options)
    assert [path for path, _ in issues] == [path for path, _ in expected]
    for (_, message), (_, fragment) in zip(issues, expected, strict=True):
        assert fragment in message


def test_validation_reports_every_issue_at_once():
    issues = validate_source_options("hmac", ["", "ok"], {"algorithm": "md5"})
    assert {path for path, _ in issues} == {"secrets[0]", "hmac.algorithm", "hmac.header"}


def test_build_raises_config_error_with_all_issues():
    with pytest.raises(ConfigError) as info:
        build_verifier("hmac", [""], -1, {"algorithm": "md5"})
    paths = {issue.path for issue in info.value.issues}
    assert paths == {"secrets[0]", "hmac.algorithm", "hmac.header", "tolerance_seconds"}
    assert info.value.reason == "invalid_config"


def test_secrets_never_appear_in_reprs():
    for provider in PROVIDERS:
        verifier = build_verifier(provider, SECRETS[provider], 300, OPTIONS.get(provider, {}))
        for secret in SECRETS[provider]:
            assert secret not in repr(verifier)
