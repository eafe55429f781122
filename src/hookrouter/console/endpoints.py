"""Endpoints: health, switches, secret rotation, test event, creation.

All changes are admin API calls as the session's principal, so a tenant's
portal acts on its own endpoints only. Rotation is the one place the page
needs a stored secret in clear (to keep it as the previous one, so the
receiver can verify during its switch-over): it reads it in process after
the API has confirmed the session may see that endpoint, and the new secret
is shown in the answer to that POST only, never stored in the session.
"""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Collection
from typing import Any

from hookrouter.admin.entities import EntityService
from hookrouter.admin.paging import MAX_PAGE
from hookrouter.console.gateway import ApiError, segment
from hookrouter.console.site import Page, Site
from hookrouter.core.http1 import Response

TEST_EVENT_TYPE = "hookrouter.test"
KEEP_PREVIOUS = 2  # secrets kept verifiable after a rotation (the newest first)
MAX_REPLAY_ROUNDS = 100
_ENDPOINT_FIELDS = (
    "id",
    "tenant",
    "url",
    "event_types",
)  # one bulk replay click: at most this many batches of the API's limit


def new_secret() -> str:
    """A Standard Webhooks style signing secret: ``whsec_`` and 24 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


class Endpoints:
    def __init__(self, entities: EntityService) -> None:
        self._entities = entities

    def register(self, site: Site) -> None:
        site.route("GET", "/endpoints", self.list)
        site.route("POST", "/endpoints", self.create)
        site.route("POST", "/endpoints/{id}/enabled", self.set_enabled)
        site.route("POST", "/endpoints/{id}/reset", self.reset)
        site.route("POST", "/endpoints/{id}/rotate", self.rotate)
        site.route("POST", "/endpoints/{id}/test", self.test)
        site.route("POST", "/endpoints/{id}/delete", self.delete)

    async def list(self, page: Page, **extra: Any) -> Response:
        listed = await page.api_page("endpoints")
        breakers: dict[str, Any] = {}
        if page.principal.tenant is None:
            # The ids on this page (until None: unbounded), at most as many as it shows.
            shown = {"after": listed.after, "until": listed.next_after, "limit": MAX_PAGE}
            held = await page.api_or({"breakers": []}, "GET", "/breakers", query=shown)
            breakers = {b["endpoint_id"]: b for b in held["breakers"]}
        values: dict[str, Any] = {"form": {}, "issues": {}, "new_secret": None}
        values.update(extra)
        return page.render(
            "endpoints.html",
            title="Endpoints",
            endpoints=sorted(listed.items, key=lambda e: (e["tenant"], e["id"])),
            breakers=breakers,
            more=listed.more,
            **values,
        )

    async def create(self, page: Page) -> Response:
        secret = new_secret()  # generated here, shown once below
        doc: dict[str, Any] = {
            "id": page.field("id"),
            "tenant": page.principal.tenant or page.field("tenant"),
            "url": page.field("url"),
            "secret": secret,
        }
        types = [t.strip() for t in page.field("event_types").split(",") if t.strip()]
        if types:
            doc["event_types"] = types
        try:
            saved = await page.api("POST", "/endpoints", body=doc)
        except ApiError as exc:
            if exc.status not in (400, 409, 422):
                raise
            issues = issues_by_field(exc, _ENDPOINT_FIELDS)
            return await self.list(page, form=doc, issues=issues, status=422)
        page.flash(f"Endpoint {saved['id']} created.")
        return await self.list(page, new_secret=(saved["id"], secret))

    async def set_enabled(self, page: Page) -> Response:
        endpoint = page.params["id"]
        enabled = page.field("enabled") == "true"
        await page.api("PATCH", f"/endpoints/{segment(endpoint)}", body={"enabled": enabled})
        page.flash(f"Endpoint {endpoint} {'enabled' if enabled else 'disabled'}.")
        return page.redirect("/endpoints")

    async def reset(self, page: Page) -> Response:
        endpoint = page.params["id"]
        await page.api("POST", f"/breakers/{segment(endpoint)}/reset")
        page.flash(f"Breaker of {endpoint} closed; parked deliveries resume.")
        return page.redirect("/endpoints")

    async def rotate(self, page: Page) -> Response:
        endpoint = page.params["id"]
        await page.api("GET", f"/endpoints/{segment(endpoint)}")  # 404 unless it is ours
        stored = self._entities.get("endpoint", endpoint).doc
        old = stored.get("secret")
        kept = [old] if isinstance(old, str) and old and not old.startswith("env:") else []
        kept += [s for s in stored.get("previous_secrets", []) if not s.startswith("env:")]
        secret = new_secret()
        await page.api(
            "PATCH",
            f"/endpoints/{segment(endpoint)}",
            body={"secret": secret, "previous_secrets": kept[:KEEP_PREVIOUS] or None},
        )
        return await self.list(page, new_secret=(endpoint, secret))

    async def test(self, page: Page) -> Response:
        endpoint = page.params["id"]
        found = await page.api("GET", f"/endpoints/{segment(endpoint)}")
        payload = {"test": True, "endpoint": endpoint, "sent_at": int(time.time())}
        body = {"type": TEST_EVENT_TYPE, "payload": payload, "tenant": found["tenant"]}
        published = await page.api("POST", "/events", body=body)
        page.flash(
            f"Test event {published['id']} published to tenant {found['tenant']} "
            f"(delivered to its endpoints whose filters take {TEST_EVENT_TYPE})."
        )
        return page.redirect(f"/events/{segment(published['id'])}")

    async def delete(self, page: Page) -> Response:
        endpoint = page.params["id"]
        await page.api("DELETE", f"/endpoints/{segment(endpoint)}")
        page.flash(f"Endpoint {endpoint} deleted.")
        return page.redirect("/endpoints")


def issues_by_field(exc: ApiError, fields: Collection[str]) -> dict[str, list[str]]:
    """The API's 422 issues keyed by the form field they name (``event_types[0]`` ->
    event_types); an issue about a field the form does not have goes under "" with its path.
    """
    issues: dict[str, list[str]] = {}
    for issue in exc.issues or [{"path": "", "message": exc.message}]:
        path, message = issue.get("path", ""), issue.get("message", "")
        name = path.split(".")[0].split("[")[0]
        if name not in fields:
            name, message = "", f"{path}: {message}" if path else message
        issues.setdefault(name, []).append(message)
    return issues


__all__ = ["Endpoints", "issues_by_field", "new_secret"]
