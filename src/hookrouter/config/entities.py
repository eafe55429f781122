"""Tenants, sources and endpoints: parsing, validation and cross-references.

Used for the config file's ``[[tenants]]``, ``[[sources]]`` and
``[[endpoints]]`` and for documents sent to the admin API, so both accept the
same shapes and report problems the same way. Each parsed object keeps the
raw document it came from (``doc``), which is what the store persists:
``env:NAME`` secret references stay references on disk.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from hookrouter.config.delivery import RESERVED_HEADERS, DeliverySettings
from hookrouter.config.durations import RetrySchedule, read_retry_schedule, read_window
from hookrouter.config.reader import EnvRefs, TableReader, any_env_ref, issues_from_pairs
from hookrouter.core.addresses import DestinationPolicy, literal_address
from hookrouter.core.filters import Filter, FilterError, parse_filter
from hookrouter.errors import ConfigError, ConfigIssue, redact_url
from hookrouter.ids import is_valid_name
from hookrouter.providers import PROVIDER_RETRIES
from hookrouter.ratelimit.bucket import Limit
from hookrouter.ratelimit.config import parse_limit
from hookrouter.verify.registry import PROVIDERS, validate_source_options
from hookrouter.verify.standard import decode_secret

# Shortest secrets accepted. Standard Webhooks keys are 24 to 64 random bytes
# (the spec's range); Stripe's are whsec_ plus 32 characters and Slack's and
# Shopify's 32 hex digits, so 16 characters (a 128-bit HMAC key when random)
# refuses only typed-in placeholders.
MIN_STANDARD_KEY_BYTES = 24
MIN_HMAC_SECRET_CHARS = 16
STRIPE_SECRET_PREFIX = "whsec_"
# What the admin API shows in place of a secret: "…" and at most its last four characters.
MASK = "…"
# Stripe's, Slack's and the Standard Webhooks spec's recommended tolerance.
DEFAULT_TOLERANCE_SECONDS = 300
# Bounds of the per-tenant and per-endpoint caps (also stated by config/stored.py).
MAX_QUEUE_CAPACITY = 10_000_000
MAX_IN_FLIGHT = 100_000
# RFC 9110 field names are tokens.
_ORIGIN = re.compile(r"https?://[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:[0-9]{1,5})?\Z")
MAX_PORTAL_ORIGINS = 16
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_URL_CHARS = re.compile(r"[\x21-\x7e]+\Z")  # visible ASCII
# RFC 9110 field-value characters: visible ASCII, space, tab and obs-text (0x80-0xFF).
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*\Z")


# Treat every config as immutable: a change is a new object (``dataclasses.replace``),
# and the engine tells changes apart by identity. Not frozen, and each
# __init__ written out: a start-up builds one per stored entity, and a frozen
# dataclass's generated __init__ (interpreted even when compiled, mypyc/mypyc#817)
# sets each field through ``object.__setattr__``.
@dataclass(slots=True)
class TenantConfig:
    id: str
    queue_capacity: int = 1000
    max_in_flight: int = 16
    max_backlog: int = 1_000_000
    rate_limit: Limit | None = None
    # None: the endpoints use [delivery] retry_schedule.
    retry_schedule: RetrySchedule | None = None
    # Sites that may show this tenant's portal in a frame (CSP frame-ancestors).
    portal_origins: tuple[str, ...] = ()
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __init__(  # noqa: PLR0917 (the dataclass's own signature)
        self,
        id: str,
        queue_capacity: int = 1000,
        max_in_flight: int = 16,
        max_backlog: int = 1_000_000,
        rate_limit: Limit | None = None,
        retry_schedule: RetrySchedule | None = None,
        portal_origins: tuple[str, ...] = (),
        doc: Mapping[str, Any] | None = None,
    ) -> None:
        self.id = id
        self.queue_capacity = queue_capacity
        self.max_in_flight = max_in_flight
        self.max_backlog = max_backlog
        self.rate_limit = rate_limit
        self.retry_schedule = retry_schedule
        self.portal_origins = portal_origins
        self.doc = {} if doc is None else doc


@dataclass(slots=True)
class SourceConfig:
    id: str
    tenant: str
    provider: str
    secrets: tuple[str, ...] = field(repr=False)
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS
    options: Mapping[str, Any] = field(default_factory=dict)
    rate_limit: Limit | None = None
    # Seconds a signed body counts as a replay (verify/replay.py); None: the
    # provider's default (on where only the body is signed), 0: off.
    replay_window: float | None = None
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __init__(  # noqa: PLR0917 (the dataclass's own signature)
        self,
        id: str,
        tenant: str,
        provider: str,
        secrets: tuple[str, ...],
        tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
        options: Mapping[str, Any] | None = None,
        rate_limit: Limit | None = None,
        replay_window: float | None = None,
        doc: Mapping[str, Any] | None = None,
    ) -> None:
        self.id = id
        self.tenant = tenant
        self.provider = provider
        self.secrets = secrets
        self.tolerance_seconds = tolerance_seconds
        self.options = {} if options is None else options
        self.rate_limit = rate_limit
        self.replay_window = replay_window
        self.doc = {} if doc is None else doc


@dataclass(slots=True)
class EndpointConfig:
    id: str
    tenant: str
    url: str
    secret: str = field(repr=False)
    event_types: tuple[str, ...] | None = None
    max_in_flight: int | None = None  # None: no cap of its own (the tenant's applies)
    # None: the tenant's schedule, else [delivery] retry_schedule.
    retry_schedule: RetrySchedule | None = None
    rate_limit: Limit | None = None
    enabled: bool = True
    # Secrets being rotated out: each still signs, so receivers can switch at their pace.
    previous_secrets: tuple[str, ...] = field(default=(), repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    # Compiled from the document's ``filter`` (core.filters); None: every routed event.
    filter: Filter | None = None
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __init__(  # noqa: PLR0917 (the dataclass's own signature)
        self,
        id: str,
        tenant: str,
        url: str,
        secret: str,
        event_types: tuple[str, ...] | None = None,
        max_in_flight: int | None = None,
        retry_schedule: RetrySchedule | None = None,
        rate_limit: Limit | None = None,
        enabled: bool = True,
        previous_secrets: tuple[str, ...] = (),
        headers: tuple[tuple[str, str], ...] = (),
        filter: Filter | None = None,
        doc: Mapping[str, Any] | None = None,
    ) -> None:
        self.id = id
        self.tenant = tenant
        self.url = url
        self.secret = secret
        self.event_types = event_types
        self.max_in_flight = max_in_flight
        self.retry_schedule = retry_schedule
        self.rate_limit = rate_limit
        self.enabled = enabled
        self.previous_secrets = previous_secrets
        self.headers = headers
        self.filter = filter
        self.doc = {} if doc is None else doc


# Instances holding the defaults the parsers fall back to (stated once, on the classes).
_TENANT = TenantConfig(id="")
_ENDPOINT = EndpointConfig(id="", tenant="", url="", secret="")


def _name(r: TableReader, key: str) -> str:
    value = r.string(key, required=True)
    if value and not is_valid_name(value):
        r.problem(key, f"{value!r} is not a valid name (letters, digits, '_', '.', '-'; max 64)")
    return value


def _limit(r: TableReader) -> Limit | None:
    value = r.raw("rate_limit")
    if value is None:
        return None
    limit, issues = parse_limit(value, r.key_path("rate_limit"))
    r.issues.extend(issues)
    return limit


def parse_tenant(table: Any, path: str, issues: list[ConfigIssue]) -> TenantConfig | None:
    r = TableReader(table, path, issues)
    before = len(issues)
    tenant = TenantConfig(
        id=_name(r, "id"),
        queue_capacity=r.integer(
            "queue_capacity", _TENANT.queue_capacity, minimum=1, maximum=MAX_QUEUE_CAPACITY
        ),
        max_in_flight=r.integer(
            "max_in_flight", _TENANT.max_in_flight, minimum=1, maximum=MAX_IN_FLIGHT
        ),
        max_backlog=r.integer("max_backlog", _TENANT.max_backlog, minimum=1),
        rate_limit=_limit(r),
        retry_schedule=read_retry_schedule(r),
        portal_origins=_portal_origins(r),
        doc=dict(r.table),
    )
    r.finish()
    return tenant if len(issues) == before else None


def _portal_origins(r: TableReader) -> tuple[str, ...]:
    """Origins only (scheme, host, port): each goes verbatim into a CSP header."""
    origins = r.string_list("portal_origins") or []
    if len(origins) > MAX_PORTAL_ORIGINS:
        r.problem("portal_origins", f"at most {MAX_PORTAL_ORIGINS} origins")
    for index, origin in enumerate(origins):
        if not _ORIGIN.match(origin):
            r.problem(
                f"portal_origins[{index}]",
                f"{origin!r} is not an origin like https://app.example.com[:port]",
            )
    return tuple(origins)


def parse_source(
    table: Any, path: str, issues: list[ConfigIssue], *, env_refs: EnvRefs = any_env_ref
) -> SourceConfig | None:
    r = TableReader(table, path, issues, env_refs=env_refs)
    before = len(issues)
    provider = r.string("provider", required=True)
    secrets = tuple(r.secret_list("secrets", required=True))
    if provider and provider not in PROVIDERS:
        r.problem("provider", f"unknown provider {provider!r}; use one of {sorted(PROVIDERS)}")
    options = r.raw(provider) if provider in PROVIDERS else None
    source = SourceConfig(
        id=_name(r, "id"),
        tenant=_name(r, "tenant"),
        provider=provider,
        secrets=secrets,
        tolerance_seconds=r.integer("tolerance_seconds", DEFAULT_TOLERANCE_SECONDS, minimum=0),
        options=options if isinstance(options, Mapping) else {},
        rate_limit=_limit(r),
        replay_window=read_window(r, "replay_window"),
        doc=dict(r.table),
    )
    if provider and len(issues) == before:
        pairs = validate_source_options(provider, secrets, options if options is not None else {})
        issues.extend(issues_from_pairs(path, pairs))
    if len(issues) == before:
        for index, secret in enumerate(secrets):
            if (problem := _secret_strength(provider, secret)) is not None:
                r.problem(f"secrets[{index}]", problem)
    r.finish()
    return source if len(issues) == before else None


def parse_endpoint(
    table: Any,
    path: str,
    issues: list[ConfigIssue],
    destinations: DestinationPolicy | None = None,
    *,
    env_refs: EnvRefs = any_env_ref,
) -> EndpointConfig | None:
    """One endpoint; with ``destinations``, a URL whose host is a denied IP literal is refused."""
    r = TableReader(table, path, issues, env_refs=env_refs)
    before = len(issues)
    url = r.string("url", required=True)
    if url:
        _check_url(r, url, destinations)
    event_types = r.string_list("event_types")
    endpoint = EndpointConfig(
        id=_name(r, "id"),
        tenant=_name(r, "tenant"),
        url=url,
        secret=_signing_secret(r, "secret", r.secret("secret", required=True)),
        event_types=tuple(event_types) if event_types is not None else None,
        max_in_flight=r.integer("max_in_flight", 0, minimum=0, maximum=MAX_IN_FLIGHT) or None,
        retry_schedule=read_retry_schedule(r),
        rate_limit=_limit(r),
        enabled=r.boolean("enabled", _ENDPOINT.enabled),
        previous_secrets=_previous_secrets(r),
        headers=_headers(r),
        filter=_filter(r),
        doc=dict(r.table),
    )
    r.finish()
    return endpoint if len(issues) == before else None


def _filter(r: TableReader) -> Filter | None:
    """The endpoint's content filter, compiled now; each problem is located inside it."""
    doc = r.raw("filter")
    if doc is None:
        return None
    try:
        return parse_filter(doc)
    except FilterError as exc:
        r.issues.extend(issues_from_pairs(r.key_path("filter"), exc.issues))
        return None


def _signing_secret(r: TableReader, key: str, secret: str) -> str:
    """An outbound Standard Webhooks secret, checked now rather than at the first delivery."""
    if secret:
        problem = _secret_strength("standard", secret)
        if problem is not None:
            r.problem(key, f"{problem} (outbound secrets look like whsec_<base64>)")
    return secret


def _secret_strength(provider: str, secret: str) -> str | None:
    """Why ``secret`` is too weak for ``provider`` (or a mask, not a secret), else None."""
    if is_masked(secret):
        return "is the masked value the admin API shows, not a secret: send the real secret"
    if provider == "standard":
        try:
            size = len(decode_secret(secret))
        except ValueError as exc:
            return str(exc)
        if size < MIN_STANDARD_KEY_BYTES:
            return (
                f"is {size} bytes after base64 decoding; Standard Webhooks keys are "
                f"{MIN_STANDARD_KEY_BYTES} to 64 random bytes"
            )
        return None
    if provider == "stripe" and not secret.startswith(STRIPE_SECRET_PREFIX):
        return "is not a Stripe signing secret: those start with whsec_"
    body = secret.removeprefix(STRIPE_SECRET_PREFIX) if provider == "stripe" else secret
    if len(body) < MIN_HMAC_SECRET_CHARS:
        what = "after whsec_ " if provider == "stripe" else ""
        return (
            f"is too short: use at least {MIN_HMAC_SECRET_CHARS} characters {what}"
            "(copy the secret the provider generated)"
        )
    return None


def mask_secret(secret: str) -> str:
    """How the admin API shows a secret: ``env:`` references as is, else ``…`` + last four.

    Secrets of eight characters or fewer become just ``…``.
    """
    if secret.startswith("env:"):
        return secret
    return MASK + secret[-4:] if len(secret) > 8 else MASK


def is_masked(value: str) -> bool:
    """Whether ``value`` is a mask from :func:`mask_secret` rather than a secret.

    No accepted secret starts with ``…`` (secrets are ASCII), so a document
    sent back as GET returned it can be told apart from a new secret.
    """
    return value.startswith(MASK)


def _previous_secrets(r: TableReader) -> tuple[str, ...]:
    secrets = r.secret_list("previous_secrets")
    return tuple(_signing_secret(r, f"previous_secrets[{i}]", s) for i, s in enumerate(secrets))


def _headers(r: TableReader) -> tuple[tuple[str, str], ...]:
    """``headers``: extra request headers for every delivery (values may be ``env:NAME``)."""
    table = r.sub("headers")
    if table is None:
        return ()
    out = []
    for name in table.table:
        value = table.secret(name)
        if not _HEADER_NAME.match(name):
            table.problem(name, "is not a valid header name")
        elif name.lower() in RESERVED_HEADERS:
            table.problem(name, "is set by hookrouter itself and cannot be overridden")
        elif any(c in value for c in "\r\n\0"):
            table.problem(name, "must not contain line breaks or NUL")
        elif is_masked(value):
            table.problem(name, "is the masked value the admin API shows: send the real value")
        elif not _FIELD_VALUE.match(value):
            # HTTP sends a value as bytes (Latin-1 at most): anything else would
            # fail every attempt to this endpoint as an opaque bad_request.
            table.problem(
                name,
                "must be printable Latin-1 text (no control characters, emoji or other Unicode)",
            )
        else:
            out.append((name, value))
    return tuple(out)


def _check_url(r: TableReader, url: str, destinations: DestinationPolicy | None) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        r.problem("url", redact_url(f"invalid URL: {exc}"))
        return
    if parts.scheme not in ("http", "https") or not parts.hostname:
        r.problem(
            "url", f"must be an http:// or https:// URL with a host, got {redact_url(repr(url))}"
        )
    elif not _URL_CHARS.match(url):
        # The URL goes on the wire as it is written (request line, Host header).
        r.problem(
            "url",
            "must be ASCII without spaces or control characters: percent-encode the path "
            "(a space is %20) and write an international host name in its xn-- form",
        )
    elif parts.username is not None or parts.password is not None:
        # Never sent (and shown unmasked by the admin API): say where credentials go.
        r.problem(
            "url",
            "must not carry credentials (user:password@); set them in the endpoint's headers, "
            'e.g. Authorization = "env:HOOK_AUTH"',
        )
    elif destinations is not None:
        address = literal_address(parts.hostname)
        why = None if address is None else destinations.refusal(parts.hostname, address)
        if why is not None:
            # The delivery guard would refuse every attempt: say so before the first event.
            r.problem(
                "url",
                f"host {parts.hostname} ({address}) is refused by the SSRF guard: {why}. "
                "Set [delivery] allow_private_networks = true or add it to [delivery] allowlist",
            )


def destination_policy(
    settings: DeliverySettings, issues: list[ConfigIssue] | None = None
) -> DestinationPolicy:
    """``[delivery]``'s SSRF policy; bad allowlist entries go to ``issues`` when given."""
    policy, problems = DestinationPolicy.parse(
        settings.allow_private_networks, settings.allowlist, "delivery.allowlist"
    )
    if issues is not None:
        issues.extend(problems)
    return policy


def endpoint_parser(
    settings: DeliverySettings, issues: list[ConfigIssue]
) -> Callable[[Any, str, list[ConfigIssue]], EndpointConfig | None]:
    """``parse_endpoint`` refusing hosts that ``[delivery]`` would refuse to deliver to."""
    policy = destination_policy(settings, issues)

    def parse(table: Any, path: str, found: list[ConfigIssue]) -> EndpointConfig | None:
        return parse_endpoint(table, path, found, policy)

    return parse


def check_references(
    tenants: tuple[TenantConfig, ...],
    sources: tuple[SourceConfig, ...],
    endpoints: tuple[EndpointConfig, ...],
    issues: list[ConfigIssue],
    warnings: list[ConfigIssue],
) -> None:
    """Unique ids per kind, and every source/endpoint names a known tenant."""
    tenant_ids = _unique("tenants", [t.id for t in tenants], issues)
    _unique("sources", [s.id for s in sources], issues)
    _unique("endpoints", [e.id for e in endpoints], issues)
    owners = [("sources", i, s.tenant) for i, s in enumerate(sources)]
    owners += [("endpoints", i, e.tenant) for i, e in enumerate(endpoints)]
    for kind, index, tenant_id in owners:
        if tenant_id not in tenant_ids:
            issues.append(ConfigIssue(f"{kind}[{index}].tenant", f"unknown tenant {tenant_id!r}"))
    _warn_unretried_limits(tenants, sources, warnings)
    routed = {e.tenant for e in endpoints}
    for index, tenant in enumerate(tenants):
        if tenant.id not in routed:
            warnings.append(
                ConfigIssue(f"tenants[{index}]", f"tenant {tenant.id!r} has no endpoints yet")
            )


def _warn_unretried_limits(
    tenants: tuple[TenantConfig, ...],
    sources: tuple[SourceConfig, ...],
    warnings: list[ConfigIssue],
) -> None:
    """A 429 to a sender that never retries loses the event: say so before it happens."""
    limited_tenants = {t.id for t in tenants if t.rate_limit is not None}
    for index, source in enumerate(sources):
        behaviour = PROVIDER_RETRIES.get(source.provider)
        if behaviour is None or behaviour.retries:
            continue
        if source.rate_limit is not None:
            where = "its rate_limit"
        elif source.tenant in limited_tenants:
            where = f"tenant {source.tenant!r}'s rate_limit"
        else:
            continue
        warnings.append(
            ConfigIssue(
                f"sources[{index}]",
                f"{where} answers 429 to a {source.provider} sender, which "
                f"{behaviour.summary}: events refused by the limit are lost",
            )
        )


def _unique(kind: str, ids: list[str], issues: list[ConfigIssue]) -> set[str]:
    seen: set[str] = set()
    for index, item in enumerate(ids):
        if item in seen:
            issues.append(ConfigIssue(f"{kind}[{index}].id", f"duplicate id {item!r}"))
        seen.add(item)
    return seen


def parse_entity_doc(
    kind: str,
    doc: Any,
    *,
    destinations: DestinationPolicy | None = None,
    env_refs: EnvRefs = any_env_ref,
) -> TenantConfig | SourceConfig | EndpointConfig:
    """Validate one admin API document; ``ConfigError`` lists every problem.

    With ``destinations`` (``destination_policy(config.delivery)``), an
    endpoint whose host is a denied IP literal is refused too. ``env_refs``
    says which ``env:NAME`` values may be read from the environment: every
    one in a document the operator wrote (the default: the config file, the
    store's copies of it), only those the stored version already had in one
    the admin API received.
    """
    issues: list[ConfigIssue] = []
    parsed: TenantConfig | SourceConfig | EndpointConfig | None
    if kind == "endpoint":
        parsed = parse_endpoint(doc, "", issues, destinations, env_refs=env_refs)
    elif kind == "source":
        parsed = parse_source(doc, "", issues, env_refs=env_refs)
    else:
        parsed = parse_tenant(doc, "", issues)
    if parsed is None or issues:
        raise ConfigError(issues or [ConfigIssue("", f"invalid {kind}")])
    return parsed
