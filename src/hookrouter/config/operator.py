"""``[[operator_hooks]]`` and ``[operator]``: where the router posts its own events.

Each hook is an URL with a Standard Webhooks secret and the event types it
wants (``events``, globs; absent: all). ``[operator]`` sets when
``tenant.backlog_high`` fires (a tenant's undelivered deliveries above
``backlog_high`` for ``backlog_window``) and how often dead-lettered
deliveries are summarised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
)


@dataclass(frozen=True, slots=True)
class OperatorHook:
    url: str
    secret: str
    events: tuple[str, ...] | None = None  # None: every operator event


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    hooks: tuple[OperatorHook, ...] = ()
    backlog_high: int = 10_000
    backlog_window_seconds: float = 300.0
    dead_letter_summary_seconds: float = 60.0


def parse_operator(
    hooks_raw: Any, section: TableReader | None, issues: list[ConfigIssue]
) -> OperatorSettings:
    d = OperatorSettings()
    hooks: list[OperatorHook] = []
    if hooks_raw is not None:
        if not isinstance(hooks_raw, list):
            issues.append(ConfigIssue("operator_hooks", "must be an array of tables"))
        else:
            for index, table in enumerate(hooks_raw):
                r = TableReader(table, f"operator_hooks[{index}]", issues)
                url = r.string("url", required=True)
                if url and not url.startswith(("http://", "https://")):
                    r.problem("url", "must be an http:// or https:// URL")
                secret = r.secret("secret", required=True)
                events = r.string_list("events")
                r.finish()
                hooks.append(OperatorHook(url, secret, tuple(events) if events else None))
    backlog_high, window, summary = d.backlog_high, d.backlog_window_seconds, None
    if section is not None:
        backlog_high = section.integer("backlog_high", d.backlog_high, minimum=1)
        window = _duration(section, "backlog_window", d.backlog_window_seconds)
        summary = _duration(section, "dead_letter_summary", d.dead_letter_summary_seconds)
        section.finish()
    return OperatorSettings(
        hooks=tuple(hooks),
        backlog_high=backlog_high,
        backlog_window_seconds=window,
        dead_letter_summary_seconds=summary or d.dead_letter_summary_seconds,
    )


def _duration(r: TableReader, key: str, default: float) -> float:
    text = r.string(key, "")
    if not text:
        return default
    try:
        return parse_duration(text)
    except ValueError as exc:
        r.problem(key, str(exc))
        return default
