"""The events explorer and an event's page: what arrived, where it went, replay.

The list pages with the admin API's keyset cursor (``before`` = the last
event id shown), newest first, never counting the table. Source and type
(a glob) filter the pages the API returns; to fill one screen the page
reads at most ``MAX_SCAN`` events, then offers "older" from where it
stopped, so a rare type costs bounded work per click, never a table scan.

Everything shown of an event is attacker-controlled (type, headers, body)
and is rendered as text by the autoescaping templates; header values that
carry signatures or secrets are masked, and the body is shown up to
``MAX_BODY_SHOWN`` bytes with a raw download beside it.
"""

from __future__ import annotations

import base64
import datetime
import fnmatch
import re
from typing import Any
from urllib.parse import parse_qsl

import orjson

from hookrouter.admin.paging import MAX_PAGE
from hookrouter.console import web
from hookrouter.console.gateway import segment
from hookrouter.console.site import Page, Site
from hookrouter.core.http1 import Response
from hookrouter.ids import EVENT_PREFIX

PAGE_SIZE = 50
MAX_SCAN = 1000  # events read per screen when source/type filters skip most of them
MAX_BODY_SHOWN = 64 * 1024
MAX_LOOKUP_SOURCES = 200  # sources tried for a provider's event id given without its source
STATUSES = ("pending", "delivered", "failed", "unrouted")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # the alphabet of event ids (``ids``)
_SECRET_HEADER = re.compile(r"signature|secret|token|authorization|cookie|api[-_]?key", re.I)


def mask_headers(headers: dict[str, str]) -> list[tuple[str, str]]:
    """Headers sorted by name, with signature and credential values masked."""
    shown = []
    for name, value in sorted(headers.items()):
        masked = _SECRET_HEADER.search(name) is not None
        shown.append((name, f"••• masked ({len(value)} characters)" if masked else value))
    return shown


def pretty_body(body: bytes, content_type: str) -> tuple[str, str, bool]:
    """(kind, text, truncated): JSON indented, a form one field per line, else text."""
    truncated = len(body) > MAX_BODY_SHOWN
    try:
        return "json", orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode(), False
    except orjson.JSONDecodeError:
        pass
    text = body[:MAX_BODY_SHOWN].decode("utf-8", errors="replace")
    if "x-www-form-urlencoded" in content_type:
        fields = parse_qsl(text, keep_blank_values=True)
        return "form", "\n".join(f"{k} = {v}" for k, v in fields), truncated
    return "text", text, truncated


class Events:
    def register(self, site: Site) -> None:
        site.route("GET", "/events", self.explorer)
        site.route("GET", "/events/{id}", self.detail)
        site.route("GET", "/events/{id}/raw", self.raw)
        site.route("POST", "/events/{id}/replay", self.replay)

    async def explorer(self, page: Page) -> Response:
        filters = web.query(page.request)
        lookup = filters.get("q", "")
        if lookup:
            found = await self._lookup(page, lookup, filters.get("source", ""))
            if found is not None:
                return page.redirect(f"/events/{segment(found)}")
            page.flash(f"No event {lookup!r} found.")
        if filters.get("status") and not (page.principal.tenant or filters.get("tenant")):
            # The store finds events by status within one tenant; across all it would scan.
            page.flash("Choose a tenant to filter by status.")
            filters.pop("status")
        events, cursor = await self._scan(page, filters)
        sources = await page.api("GET", "/sources", query={"limit": MAX_PAGE})  # the first
        return page.render(
            "events.html",
            title="Events",
            events=events,
            filters=filters,
            statuses=STATUSES,
            sources=sorted(s["id"] for s in sources["data"]),
            older=web.with_query(page.site.prefix + "/events", {**filters, "before": cursor})
            if cursor
            else "",
        )

    async def _scan(self, page: Page, filters: dict[str, str]) -> tuple[list[Any], str | None]:
        source, pattern = filters.get("source", ""), filters.get("type", "")
        since, until = _moment(filters.get("since")), _moment(filters.get("until"))
        # Ids begin with their arrival time: "until" is a cursor like any other.
        cursor = filters.get("before") or (first_id_after(until) if until else None)
        shown: list[Any] = []
        scanned = 0
        while len(shown) < PAGE_SIZE and scanned < MAX_SCAN:
            batch = PAGE_SIZE if not (source or pattern) else 200
            result = await page.api(
                "GET",
                "/events",
                query={
                    "tenant": filters.get("tenant"),
                    "status": filters.get("status"),
                    "limit": batch,
                    "before": cursor,
                },
            )
            scanned += len(result["data"])
            for event in result["data"]:
                cursor = event["id"]
                if since is not None and event["received_at"] < since:
                    return shown, None  # newest first: everything further is older still
                if _matches(event, source, pattern):
                    shown.append(event)
                    if len(shown) == PAGE_SIZE:
                        return shown, cursor
            if result["next_before"] is None:
                return shown, None
        return shown, cursor

    async def _lookup(self, page: Page, lookup: str, source: str) -> str | None:
        """The hookrouter id of ``lookup``: itself, or a provider's id in one of the sources."""
        if lookup.startswith("evt_"):
            found = await page.api_or(None, "GET", f"/events/{segment(lookup)}")
            if found is not None:
                return str(found["id"])
        if source:
            candidates = [source]
        else:
            listed = await page.api("GET", "/sources", query={"limit": MAX_LOOKUP_SOURCES})
            candidates = [s["id"] for s in listed["data"]]
        for candidate in candidates:
            path = f"/sources/{segment(candidate)}/events/{segment(lookup)}"
            found = await page.api_or(None, "GET", path)
            if found is not None:
                return str(found["id"])
        return None

    async def detail(self, page: Page) -> Response:
        event_id = page.params["id"]
        event = await page.api("GET", f"/events/{segment(event_id)}", query={"body": True})
        body = base64.b64decode(event.get("body_base64") or "")
        headers = event.get("headers") or {}
        kind, text, truncated = pretty_body(body, headers.get("content-type", ""))
        return page.render(
            "event.html",
            title=f"Event {event['id']}",
            event=event,
            headers=mask_headers(headers),
            body_kind=kind,
            body_text=text,
            body_truncated=truncated,
            body_size=len(body),
        )

    async def raw(self, page: Page) -> Response:
        event_id = page.params["id"]
        event = await page.api("GET", f"/events/{segment(event_id)}", query={"body": True})
        body = base64.b64decode(event.get("body_base64") or "")
        filename = re.sub(r"[^A-Za-z0-9_.-]", "_", event["id"]) + ".body"
        return Response(
            200,
            body,
            "application/octet-stream",  # a download, never rendered by the browser
            (
                *web.page_headers(page.site.policy(page.session)),
                ("content-disposition", f'attachment; filename="{filename}"'),
            ),
        )

    async def replay(self, page: Page) -> Response:
        event_id = page.params["id"]
        body: dict[str, Any] = {"event": event_id, "states": ["dead", "disabled"]}
        endpoint = page.field("endpoint")
        if endpoint:
            body["endpoint"] = endpoint
        result = await page.api("POST", "/replay", body=body)
        target = f"endpoint {endpoint}" if endpoint else "every endpoint"
        page.flash(f"Replayed {result['replayed']} delivery(ies) of {event_id} to {target}.")
        return page.redirect(f"/events/{segment(event_id)}")


def first_id_after(seconds: float) -> str:
    """The smallest event id minted after ``seconds``: a ``before`` cursor for a time."""
    ms = int(seconds * 1000) + 1
    digits = "".join(_CROCKFORD[(ms >> shift) & 31] for shift in range(45, -5, -5))
    return EVENT_PREFIX + digits + "0" * 16


def _moment(text: str | None) -> float | None:
    """A ``datetime-local`` field's value, read as UTC; None when absent or unreadable."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def _matches(event: dict[str, Any], source: str, pattern: str) -> bool:
    if source and event["source"] != source:
        return False
    return not pattern or fnmatch.fnmatchcase(event.get("type") or "", pattern)


__all__ = ["Events", "first_id_after", "mask_headers", "pretty_body"]
