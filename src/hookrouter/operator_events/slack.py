"""Operator events in Slack's incoming-webhook message format.

Slack takes ``{"text": ..., "blocks": [...]}``: ``text`` is the plain
fallback (notifications, screen readers), the blocks what the channel shows.
The headline names what happened and where; the fields carry the event's
data as-is, so nothing is lost to the formatting.
"""

from __future__ import annotations

from typing import Any, Final

_HEADLINES: Final = {
    "endpoint.breaker_opened": "Circuit breaker opened for endpoint {endpoint} (tenant {tenant})",
    "endpoint.breaker_closed": "Circuit breaker closed for endpoint {endpoint} (tenant {tenant})",
    "endpoint.disabled": "Endpoint {endpoint} (tenant {tenant}) disabled: {reason}",
    "delivery.dead_lettered": "{count} deliveries to endpoint {endpoint} (tenant {tenant}) "
    "dead-lettered",
    "tenant.backlog_high": "Tenant {tenant} has {backlog} undelivered deliveries",
    "tenant.backlog_cleared": "Tenant {tenant}'s backlog is back to {backlog}",
    "store.saturated": "Ingest is refusing events (429/503): the router is saturated",
    "store.recovered": "Ingest accepts events again",
    "ratelimit.redis_unavailable": "Redis is unreachable: rate limits follow on_redis_error",
    "ratelimit.redis_recovered": "Redis is reachable again: rate limiting resumes",
    "source.quiet": "Source {source} (tenant {tenant}) has received nothing for "
    "{quiet_seconds:.0f} s",
    "source.resumed": "Source {source} (tenant {tenant}) receives events again",
}
MAX_FIELDS: Final = 10  # Slack's limit on a section's fields


def headline(event_type: str, data: dict[str, Any]) -> str:
    template = _HEADLINES.get(event_type)
    if template is None:
        return event_type
    try:
        return template.format(**data)
    except (KeyError, ValueError):  # a field missing or of another type: still say what
        return event_type


def slack_message(event_type: str, timestamp: str, data: dict[str, Any]) -> dict[str, Any]:
    """The Slack message for one operator event."""
    line = headline(event_type, data)
    fields = [
        {"type": "mrkdwn", "text": f"*{key}*\n{_plain(value)}"}
        for key, value in list(data.items())[:MAX_FIELDS]
    ]
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{_escape(line)}*"}},
    ]
    if fields:
        blocks.append({"type": "section", "fields": fields})
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"`{event_type}` · {timestamp}"}],
        }
    )
    return {"text": f"[hookrouter] {_escape(line)}", "blocks": blocks}


def _plain(value: Any) -> str:
    return _escape(value if isinstance(value, str) else repr(value))


def _escape(text: str) -> str:
    """Slack's three control characters in mrkdwn (so a name cannot ping @channel)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
