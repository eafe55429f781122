"""Stored entity documents back into config values, quickly for the common shapes.

At start a router reads every tenant, source and endpoint back from the store
and checks each again, since a rule may have been added after it was written.
The full parsers (``entities.parse_*``) read a document key by key and collect
every problem with its path; with 100,000 tenants they were most of start-up.
Here msgspec checks a plain document's keys, types and bounds in C, and the
rules no type states (names, secret strength, the URL, provider secrets) run
as the parsers run them. Every other document -- an ``env:`` reference, a rate
limit, a retry schedule, headers, provider options, any problem at all --
goes to the full parser, so what is refused, and how, is the parser's alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from hookrouter.config.entities import (
    _URL_CHARS,
    EndpointConfig,
    SourceConfig,
    TenantConfig,
    _check_url,
    _secret_strength,
)
from hookrouter.config.reader import ENV_PREFIX, TableReader
from hookrouter.config.stored_shapes import StoredEndpoint, StoredSource, StoredTenant
from hookrouter.errors import ConfigIssue
from hookrouter.ids import is_valid_name
from hookrouter.verify.registry import PROVIDERS, secret_issue

# Origins (scheme://host:port) whose URLs passed the URL rules, so that the
# rules depending on the origin alone run once per receiver host, not once
# per endpoint; bounded, as a platform's endpoints point at many hosts.
_GOOD_ORIGINS: set[str] = set()
GOOD_ORIGINS_LIMIT = 10_000


def parse_stored(kind: str, doc: Any) -> TenantConfig | SourceConfig | EndpointConfig | None:
    """``doc`` as ``entities.parse_entity_doc`` reads it when its shape is a common one
    and nothing is wrong with it; None otherwise (the full parser decides)."""
    try:
        if kind == "tenant":
            return _tenant(msgspec.convert(doc, StoredTenant), doc)
        if kind == "source":
            return _source(msgspec.convert(doc, StoredSource), doc)
        if kind == "endpoint":
            return _endpoint(msgspec.convert(doc, StoredEndpoint), doc)
    except msgspec.ValidationError:
        return None
    return None


def _tenant(t: StoredTenant, doc: Mapping[str, Any]) -> TenantConfig | None:
    if not is_valid_name(t.id):
        return None
    return TenantConfig(
        id=t.id,
        queue_capacity=t.queue_capacity,
        max_in_flight=t.max_in_flight,
        max_backlog=t.max_backlog,
        doc=dict(doc),
    )


def _source(s: StoredSource, doc: Mapping[str, Any]) -> SourceConfig | None:
    if not (is_valid_name(s.id) and is_valid_name(s.tenant) and s.provider in PROVIDERS):
        return None
    secrets = tuple(s.secrets)
    if any(secret.startswith(ENV_PREFIX) for secret in secrets):
        return None
    # What validate_source_options checks of a document with no options, the
    # stored shape having checked the types: at least one secret, each usable.
    if not secrets or any(secret_issue(s.provider, secret) is not None for secret in secrets):
        return None
    if any(_secret_strength(s.provider, secret) is not None for secret in secrets):
        return None
    return SourceConfig(
        id=s.id,
        tenant=s.tenant,
        provider=s.provider,
        secrets=secrets,
        tolerance_seconds=s.tolerance_seconds,
        doc=dict(doc),
    )


def _endpoint(e: StoredEndpoint, doc: Mapping[str, Any]) -> EndpointConfig | None:
    if not (is_valid_name(e.id) and is_valid_name(e.tenant) and e.url and e.secret):
        return None
    secrets = (e.secret, *e.previous_secrets)
    if any(secret.startswith(ENV_PREFIX) for secret in secrets):
        return None
    # The checks _signing_secret makes, without a reader to collect what a
    # document sent to the full parser would be told anyway.
    if any(not secret or _secret_strength("standard", secret) is not None for secret in secrets):
        return None
    if not _known_good_origin(e.url):
        issues: list[ConfigIssue] = []
        _check_url(TableReader(doc, "", issues), e.url, None)
        if issues:
            return None
        _remember_origin(e.url)
    return EndpointConfig(
        id=e.id,
        tenant=e.tenant,
        url=e.url,
        secret=e.secret,
        event_types=tuple(e.event_types) if e.event_types is not None else None,
        max_in_flight=e.max_in_flight or None,
        enabled=e.enabled,
        previous_secrets=tuple(e.previous_secrets),
        doc=dict(doc),
    )


def _origin(url: str) -> str | None:
    """``scheme://netloc`` of a URL made of visible ASCII only (else None)."""
    if not _URL_CHARS.match(url):
        return None
    scheme_end = url.find("://")
    if scheme_end <= 0:
        return None
    start = scheme_end + 3
    end = len(url)
    for stop in "/?#":
        at = url.find(stop, start)
        if at != -1 and at < end:
            end = at
    return url[:end]


def _known_good_origin(url: str) -> bool:
    """Whether ``url``'s origin passed the URL rules before (they hold for the origin
    alone once the whole URL is visible ASCII, which ``_origin`` requires)."""
    origin = _origin(url)
    return origin is not None and origin in _GOOD_ORIGINS


def _remember_origin(url: str) -> None:
    origin = _origin(url)
    if origin is not None and len(_GOOD_ORIGINS) < GOOD_ORIGINS_LIMIT:
        _GOOD_ORIGINS.add(origin)
