"""``[[operator_hooks]]`` and ``[operator]``: where the router posts its own events.

Each hook is an URL with the event types it wants (``events``, globs; absent:
all) and a ``format``: ``standard`` (Standard Webhooks, signed with the hook's
``secret``) or ``slack`` (Slack's incoming-webhook message; the URL is the
credential, so no secret is needed). A ``hooks.slack.com`` URL is ``slack``
unless ``format`` says otherwise.

``[operator]`` sets when the conditions fire and clear: a tenant's backlog
above ``backlog_high`` for ``backlog_window``; how often dead-lettered
deliveries are summarised; how long a condition must stay away before its
"recovered" event (``recovery``); and when a source that usually receives
events counts as quiet (``source_quiet``, off unless set, after at least
``source_quiet_min_events`` events).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from hookrouter.config.durations import parse_duration
from hookrouter.config.reader import TableReader
from hookrouter.errors import ConfigIssue

OPERATOR_EVENTS = (
    "endpoint.breaker_opened",
    "endpoint.breaker_closed",
    "endpoint.disabled",
    "delivery.dead_lettered",
    "tenant.backlog_high",
    "tenant.backlog_cleared",
    "store.saturated",
    "store.recovered",
    "ratelimit.redis_unavailable",
    "ratelimit.redis_recovered",
    "source.quiet",
    "source.resumed",
)
HOOK_FORMATS: Final = ("standard", "slack")
SLACK_HOST: Final = "hooks.slack.com"


@dataclass(frozen=True, slots=True)
class OperatorHook:
    url: str
    secret: str
    events: tuple[str, ...] | None = None  # None: every operator event
    format: str = "standard"


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    hooks: tuple[OperatorHook, ...] = ()
    backlog_high: int = 10_000
    backlog_window_seconds: float = 300.0
    dead_letter_summary_seconds: float = 60.0
    recovery_seconds: float = 60.0
    source_quiet_seconds: float = 0.0  # 0: source.quiet is off
    source_quiet_min_events: int = 10


def parse_operator(
    hooks_raw: Any, section: TableReader | None, issues: list[ConfigIssue]
) -> OperatorSettings:
    d = OperatorSettings()
    hooks = _hooks(hooks_raw, issues)
    if section is None:
        return OperatorSettings(hooks=hooks)
    settings = OperatorSettings(
        hooks=hooks,
        backlog_high=section.integer("backlog_high", d.backlog_high, minimum=1),
        backlog_window_seconds=_duration(section, "backlog_window", d.backlog_window_seconds),
        dead_letter_summary_seconds=_duration(
            section, "dead_letter_summary", d.dead_letter_summary_seconds
        ),
        recovery_seconds=_duration(section, "recovery", d.recovery_seconds),
        source_quiet_seconds=_duration(section, "source_quiet", d.source_quiet_seconds),
        source_quiet_min_events=section.integer(
            "source_quiet_min_events", d.source_quiet_min_events, minimum=1
        ),
    )
    section.finish()
    return settings


def _hooks(raw: Any, issues: list[ConfigIssue]) -> tuple[OperatorHook, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        issues.append(ConfigIssue("operator_hooks", "must be an array of tables"))
        return ()
    return tuple(
        _hook(TableReader(table, f"operator_hooks[{i}]", issues)) for i, table in enumerate(raw)
    )


def _hook(r: TableReader) -> OperatorHook:
    url = r.string("url", required=True)
    if url and not url.startswith(("http://", "https://")):
        r.problem("url", "must be an http:// or https:// URL")
    fmt = r.string("format", "slack" if urlsplit(url).hostname == SLACK_HOST else "standard")
    if fmt not in HOOK_FORMATS:
        r.problem("format", f"must be one of {', '.join(HOOK_FORMATS)}")
    # Slack authenticates by the URL; a Standard Webhooks receiver needs the secret.
    secret = r.secret("secret", required=fmt != "slack")
    events = r.string_list("events")
    r.finish()
    return OperatorHook(url, secret, tuple(events) if events else None, fmt)


def _duration(r: TableReader, key: str, default: float) -> float:
    text = r.string(key, "")
    if not text:
        return default
    try:
        return parse_duration(text)
    except ValueError as exc:
        r.problem(key, str(exc))
        return default
