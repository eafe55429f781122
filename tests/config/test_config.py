"""Config loading: the contract shape, defaults, and key-path error messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hookrouter.config import load_config, parse_config
from hookrouter.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def minimal(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"path": "./data"},
        "admin": {"token": "admin-token-123"},
        "tenants": [{"id": "acme"}],
        "sources": [
            {
                "id": "s1",
                "tenant": "acme",
                "provider": "stripe",
                "secrets": ["whsec_0123456789abcdef"],
            }
        ],
        "endpoints": [
            {
                "id": "e1",
                "tenant": "acme",
                "url": "https://example.com/h",
                "secret": STANDARD_SECRET,
            }
        ],
    }
    doc.update(overrides)
    return doc


def issues_of(doc: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    return [str(i) for i in info.value.issues]


def test_quickstart_example_is_valid() -> None:
    config = load_config(ROOT / "examples" / "quickstart.toml")
    assert config.server.engine == "asyncio"
    assert config.server.port == 8080
    assert config.store.path == ROOT / "examples" / "hookrouter-data"
    assert config.redis is None
    assert {s.provider for s in config.sources} == {"stripe", "standard"}
    assert config.tenants[0].rate_limit is not None


def test_defaults_apply_to_omitted_keys() -> None:
    config = parse_config(minimal(), base_dir=Path("/srv"))
    tenant = config.tenants[0]
    assert (tenant.queue_capacity, tenant.max_in_flight) == (1000, 16)
    assert config.sources[0].tolerance_seconds == 300
    assert config.store.path == Path("/srv/data")
    assert config.delivery.allow_private_networks is False
    assert config.server.max_body_bytes == 1048576


def test_unknown_provider_is_reported_with_its_key_path() -> None:
    doc = minimal()
    doc["sources"] = [
        {"id": "a", "tenant": "acme", "provider": "stripe", "secrets": ["whsec_0123456789abcdef"]},
        {"id": "b", "tenant": "acme", "provider": "stripe", "secrets": ["whsec_0123456789abcdef"]},
        {"id": "c", "tenant": "acme", "provider": "strip", "secrets": ["whsec_0123456789abcdef"]},
    ]
    assert any(
        i.startswith("sources[2].provider: unknown provider 'strip'") for i in issues_of(doc)
    )


def test_every_problem_is_reported_at_once() -> None:
    doc = minimal(server={"listen": "nope", "engine": "fast", "max_body_bytes": -1})
    doc["tenants"] = [{"id": "acme", "queue_capacity": "many"}]
    doc["endpoints"] = [{"id": "e1", "tenant": "ghost", "url": "ftp://x", "secret": "s"}]
    issues = issues_of(doc)
    paths = {i.split(":")[0] for i in issues}
    assert {
        "server.listen",
        "server.engine",
        "server.max_body_bytes",
        "tenants[0].queue_capacity",
        "endpoints[0].url",
    } <= paths


def test_empty_strings_are_refused_where_a_value_is_required() -> None:
    """Each passed `check-config` once, then failed at start-up or at every delivery."""
    doc = minimal(server={"listen": "127.0.0.1:0", "engine": ""})
    doc["sources"] = [
        {"id": "s1", "tenant": "acme", "provider": "", "secrets": ["whsec_0123456789abcdef"]}
    ]
    doc["endpoints"] = [{"id": "e1", "tenant": "", "url": "", "secret": ""}]
    issues = issues_of(doc)
    assert (
        "server.engine: unknown value '' (expected one of 'asyncio', 'epoll', 'io_uring', 'auto')"
        in issues
    )
    for path in (
        "sources[0].provider",
        "endpoints[0].tenant",
        "endpoints[0].url",
        "endpoints[0].secret",
    ):
        assert f"{path}: must not be empty" in issues
    assert parse_config(minimal()).sources[0].provider == "stripe"  # the same, filled in: valid


def test_unknown_keys_are_reported_as_likely_typos() -> None:
    assert "server.listn: unknown key" in issues_of(minimal(server={"listn": "x"}))


def test_references_to_unknown_tenants_are_errors() -> None:
    doc = minimal()
    doc["sources"] = [
        {
            "id": "s",
            "tenant": "ghost",
            "provider": "github",
            "secrets": ["github-secret-0123456789"],
        }
    ]
    assert "sources[0].tenant: unknown tenant 'ghost'" in issues_of(doc)


def test_duplicate_ids_are_errors() -> None:
    doc = minimal(tenants=[{"id": "acme"}, {"id": "acme"}])
    assert "tenants[1].id: duplicate id 'acme'" in issues_of(doc)


def test_secrets_can_come_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_STRIPE", "whsec_from_env_0123456789")
    doc = minimal()
    doc["sources"] = [
        {"id": "s1", "tenant": "acme", "provider": "stripe", "secrets": ["env:ACME_STRIPE"]}
    ]
    config = parse_config(doc)
    assert config.sources[0].secrets == ("whsec_from_env_0123456789",)
    assert config.sources[0].doc["secrets"] == ["env:ACME_STRIPE"]  # stored as a reference


def test_missing_environment_secret_is_reported() -> None:
    doc = minimal()
    doc["sources"] = [
        {"id": "s1", "tenant": "acme", "provider": "stripe", "secrets": ["env:NOT_SET_X"]}
    ]
    assert "sources[0].secrets[0]: environment variable NOT_SET_X is not set" in issues_of(doc)


def test_invalid_rate_limit_and_retry_schedule_are_reported() -> None:
    doc = minimal()
    doc["tenants"] = [{"id": "acme", "rate_limit": {"capacity": 0, "refill_per_second": 5}}]
    doc["endpoints"] = [
        {
            "id": "e1",
            "tenant": "acme",
            "url": "https://example.com/h",
            "secret": STANDARD_SECRET,
            "retry_schedule": ["1s", "soon"],
        }
    ]
    issues = issues_of(doc)
    assert any(i.startswith("tenants[0].rate_limit") for i in issues)
    assert any(i.startswith("endpoints[0].retry_schedule[1]") for i in issues)


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[server\nlisten = 1")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(path)


def test_check_config_cli_prints_key_paths_and_fails(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[server]\nengine = "warp"\n')
    result = subprocess.run(
        [sys.executable, "-m", "hookrouter", "check-config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "server.engine: unknown value 'warp'" in result.stderr


def test_check_config_cli_accepts_quickstart() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookrouter",
            "check-config",
            str(ROOT / "examples/quickstart.toml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ok (1 tenants, 2 sources, 1 endpoints" in result.stdout


def test_retention_defaults_and_forever() -> None:
    default = parse_config(minimal()).store.retention
    assert (default.delivered_seconds, default.failed_seconds) == (7 * 86400, 30 * 86400)
    assert default.interval_seconds == 60
    doc = minimal(
        store={
            "path": "./data",
            "retention": {"delivered": "forever", "failed": "90d", "interval": "10s"},
        }
    )
    policy = parse_config(doc).store.retention
    assert (policy.delivered_seconds, policy.failed_seconds) == (None, 90 * 86400)
    assert policy.interval_seconds == 10


def test_invalid_retention_is_reported_with_key_paths() -> None:
    doc = minimal(
        store={
            "path": "./data",
            "retention": {"delivered": "a week", "failed": "99999d", "interval": 5, "keep": 1},
        }
    )
    issues = issues_of(doc)
    assert any(
        i.startswith("store.retention.delivered: invalid duration 'a week'") and "forever" in i
        for i in issues
    )
    assert any(
        i.startswith("store.retention.failed: duration '99999d' is longer than 3650 days")
        for i in issues
    )
    assert "store.retention.interval: must be a string, not a number" in issues
    assert "store.retention.keep: unknown key" in issues


def test_retention_shorter_than_a_senders_retry_window_is_a_warning() -> None:
    doc = minimal(store={"path": "./data", "retention": {"delivered": "1d"}})
    doc["sources"] = [
        {"id": "s1", "tenant": "acme", "provider": "stripe", "secrets": ["whsec_0123456789abcdef"]},
        {
            "id": "gh",
            "tenant": "acme",
            "provider": "github",
            "secrets": ["github-secret-0123456789"],
        },
    ]
    warnings = [str(w) for w in parse_config(doc).warnings]
    assert warnings == [
        "store.retention.delivered: keeps delivered events 1 day but source 's1' (stripe) may "
        "redeliver for up to 3 days: a redelivery after its event is deleted is accepted again "
        "as a new event"
    ]
    doc["store"] = {"path": "./data", "retention": {"delivered": "3d"}}
    assert parse_config(doc).warnings == ()


def _endpoint(**extra: object) -> dict[str, object]:
    return {"id": "e1", "tenant": "acme", "url": "https://example.com/h",
            "secret": STANDARD_SECRET, **extra}  # fmt: skip


def test_endpoint_secrets_are_checked_when_loaded() -> None:
    doc = minimal(endpoints=[_endpoint(secret="not-base64!!", previous_secrets=["whsec_", "x"])])
    issues = issues_of(doc)
    assert any(i.startswith("endpoints[0].secret: secret is not valid base64") for i in issues)
    assert any(
        i.startswith("endpoints[0].previous_secrets[0]: secret decodes to no") for i in issues
    )
    assert any(
        i.startswith("endpoints[0].previous_secrets[1]: secret is not valid") for i in issues
    )


def test_endpoint_headers_and_rotation_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_TOKEN", "Bearer t0ken")
    old = "whsec_" + "b2xkLXNlY3JldC1vbGQtc2VjcmV0LW9sZA=="
    endpoint = _endpoint(
        previous_secrets=[old],
        headers={"X-Team": "billing", "Authorization": "env:HOOK_TOKEN"},
    )
    parsed = parse_config(minimal(endpoints=[endpoint])).endpoints[0]
    assert parsed.previous_secrets == (old,)
    assert parsed.headers == (("X-Team", "billing"), ("Authorization", "Bearer t0ken"))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://example.com/hooks/caf\u00e9", "must be ASCII without spaces"),
        ("https://example.com/my hooks", "must be ASCII without spaces"),
        ("https://b\u00fccher.example/h", "xn-- form"),
        ("https://example.com/h\x00", "must be ASCII without spaces"),
        ("https://user:pw@example.com/h", "must not carry credentials"),
        ("https://token@example.com/h", "must not carry credentials"),
    ],
)
def test_endpoint_urls_that_cannot_go_on_the_wire_are_refused(url: str, says: str) -> None:
    issues = issues_of(minimal(endpoints=[_endpoint(url=url)]))
    (issue,) = [i for i in issues if i.startswith("endpoints[0].url")]
    assert says in issue


def test_a_percent_encoded_url_with_a_query_is_accepted() -> None:
    url = "https://xn--bcher-kva.example:8443/hooks/caf%C3%A9?team=a%20b&x=1"
    (endpoint,) = parse_config(minimal(endpoints=[_endpoint(url=url)])).endpoints
    assert endpoint.url == url


LATIN1 = "must be printable Latin-1 text (no control characters, emoji or other Unicode)"


def test_endpoint_headers_that_would_break_framing_or_signatures_are_refused() -> None:
    headers = {
        "Webhook-Signature": "v1,forged",
        "Content-Length": "1",
        "Content-Type": "text/plain",
        "Bad Name": "x",
        "X-Split": "a\r\nX-Injected: 1",
        "X-Number": 5,
        "X-Emoji": "caf\u00e9 \u2615",
        "X-Bell": "ding\x07",
        "X-Accented": "caf\u00e9\tok",  # Latin-1 and a tab are fine
    }
    issues = issues_of(minimal(endpoints=[_endpoint(headers=headers)]))
    assert sorted(i for i in issues if i.startswith("endpoints[0].headers")) == [
        "endpoints[0].headers.Bad Name: is not a valid header name",
        "endpoints[0].headers.Content-Length: is set by hookrouter itself and cannot be overridden",
        "endpoints[0].headers.Content-Type: is set by hookrouter itself and cannot be overridden",
        "endpoints[0].headers.Webhook-Signature: is set by hookrouter itself and cannot be "
        "overridden",
        "endpoints[0].headers.X-Bell: " + LATIN1,
        "endpoints[0].headers.X-Emoji: " + LATIN1,
        "endpoints[0].headers.X-Number: must be a string, not a number",
        "endpoints[0].headers.X-Split: must not contain line breaks or NUL",
    ]
