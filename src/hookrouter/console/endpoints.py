"""Endpoints (health, switches, secret rotation, test event) and dead letters (bulk replay).

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
from hookrouter.console import web
from hookrouter.console.gateway import ApiError, segment
from hookrouter.console.site import Page, Site
from hookrouter.core.http1 import Response

TEST_EVENT_TYPE = "hookrouter.test"
KEEP_PREVIOUS = 2  # secrets kept verifiable after a rotation (the newest first)
MAX_REPLAY_ROUNDS = 100
MAX_TENANT_COUNTS = 200  # tenants counted on the dead-letters page without a tenant filter
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
        endpoints = (await page.api("GET", "/endpoints"))["data"]
        breakers: dict[str, Any] = {}
        if page.principal.tenant is None:
            try:
                listed = (await page.api("GET", "/breakers"))["breakers"]
            except ApiError as exc:
                if exc.status != 404:  # 404: no delivery engine, so no breakers
                    raise
                listed = []
            breakers = {b["endpoint_id"]: b for b in listed}
        values: dict[str, Any] = {"form": {}, "issues": {}, "new_secret": None}
        values.update(extra)
        return page.render(
            "endpoints.html",
            title="Endpoints",
            endpoints=sorted(endpoints, key=lambda e: (e["tenant"], e["id"])),
            breakers=breakers,
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


class DeadLetters:
    def register(self, site: Site) -> None:
        site.route("GET", "/dead", self.list)
        site.route("POST", "/dead/replay", self.replay)

    async def list(self, page: Page, **extra: Any) -> Response:
        filters = web.query(page.request)
        tenant = page.principal.tenant or filters.get("tenant")
        if tenant is None:
            return await self._by_tenant(page, filters)
        result = await page.api(
            "GET",
            "/events",
            query={
                "tenant": filters.get("tenant"),
                "status": "failed",
                "limit": 50,
                "before": filters.get("before"),
            },
        )
        endpoint = filters.get("endpoint", "")
        rows = []
        for listed in result["data"]:
            # The list carries no deliveries: one primary-key read per shown event.
            event = await page.api("GET", f"/events/{segment(listed['id'])}")
            for delivery in event["deliveries"]:
                if delivery["state"] in ("dead", "disabled") and endpoint in (
                    "",
                    delivery["endpoint"],
                ):
                    rows.append((event, delivery))
        cursor = result["next_before"]
        return page.render(
            "dead.html",
            title="Dead letters",
            rows=rows,
            filters=filters,
            counts=None,
            older=web.with_query(page.site.prefix + "/dead", {**filters, "before": cursor})
            if cursor
            else "",
        )

    async def _by_tenant(self, page: Page, filters: dict[str, str]) -> Response:
        """No tenant chosen: each tenant's dead count (the store finds failed events fast
        only within one tenant; across all it would read the whole events table)."""
        tenants = sorted(t["id"] for t in (await page.api("GET", "/tenants"))["data"])
        counts = []
        for tenant in tenants[:MAX_TENANT_COUNTS]:
            body = {"tenant": tenant, "states": ["dead"]}
            found = await page.api("POST", "/replay", query={"dry_run": True}, body=body)
            counts.append((tenant, int(found["matched"])))
        return page.render(
            "dead.html", title="Dead letters", rows=[], filters=filters, older="", counts=counts
        )

    async def replay(self, page: Page) -> Response:
        selection: dict[str, Any] = {"states": ["dead"]}
        for name in ("tenant", "endpoint"):
            if page.field(name):
                selection[name] = page.field(name)
        hours = page.field("hours")
        if hours:
            if not hours.isdigit():
                raise web.BadForm("hours must be a whole number")
            selection["since"] = int(time.time()) - int(hours) * 3600
        if page.field("dry_run") == "true":
            result = await page.api("POST", "/replay", query={"dry_run": True}, body=selection)
            page.flash(f"{result['matched']} dead delivery(ies) match; nothing replayed yet.")
            return page.redirect(web.with_query("/dead", _form_filters(page)))
        total = 0
        for _ in range(MAX_REPLAY_ROUNDS):
            done = (await page.api("POST", "/replay", body=selection))["replayed"]
            total += done
            if done < 1000:
                break
        page.flash(f"Replayed {total} dead delivery(ies); they are pending again.")
        return page.redirect(web.with_query("/dead", _form_filters(page)))


def _form_filters(page: Page) -> dict[str, str]:
    return {name: page.field(name) for name in ("tenant", "endpoint", "hours")}


__all__ = ["DeadLetters", "Endpoints", "issues_by_field", "new_secret"]
