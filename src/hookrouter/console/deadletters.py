"""Dead letters: which deliveries gave up, and bulk replay with a dry-run count.

Listing is by tenant: the store finds failed events fast within one tenant
(an index on tenant and stored status); without a tenant the page shows
each tenant's count of dead deliveries instead (the replay dry run's count
over the deliveries index), never a scan of the events table. Replay is the
admin API's, as the session's principal, in batches of its limit, run as
a job whose page shows its progress (``replays``).
"""

from __future__ import annotations

import time
from typing import Any

from hookrouter.console import web
from hookrouter.console.gateway import ApiError, segment
from hookrouter.console.replays import Owner, ReplayBatch, ReplayJob, ReplayJobs
from hookrouter.console.site import Page, Site
from hookrouter.core.http1 import Response

MAX_TENANT_COUNTS = 200  # tenants counted on the page without a tenant filter


async def dead_counts(page: Page, tenants: list[str]) -> list[tuple[str, int]] | None:
    """Each tenant's dead deliveries (the replay dry run's indexed count).

    None for a read-only session: the dry run is a POST, which that token may not make.
    """
    if page.principal.read_only:
        return None
    counts = []
    for tenant in tenants:
        body = {"tenant": tenant, "states": ["dead"]}
        found = await page.api("POST", "/replay", query={"dry_run": True}, body=body)
        counts.append((tenant, int(found["matched"])))
    return counts


class DeadLetters:
    def __init__(self, jobs: ReplayJobs) -> None:
        self._jobs = jobs

    def register(self, site: Site) -> None:
        site.route("GET", "/dead", self.list)
        site.route("POST", "/dead/replay", self.replay)
        site.route("GET", "/dead/replay/{id}", self.job)
        site.route("GET", "/fragments/replay/{id}", self.progress)

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
        listed = await page.api("GET", "/tenants", query={"limit": MAX_TENANT_COUNTS})
        counts = await dead_counts(page, [t["id"] for t in listed["data"]])
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
        found = await page.api("POST", "/replay", query={"dry_run": True}, body=selection)
        job = self._jobs.start(_owner(page), selection, int(found["matched"]), _batches(page))
        return page.redirect(f"/dead/replay/{segment(job.id)}")

    async def job(self, page: Page) -> Response:
        job = self._found(page)
        return page.render("replay.html", title="Bulk replay", job=job)

    async def progress(self, page: Page) -> Response:
        return page.render("replay_progress.html", job=self._found(page))

    def _found(self, page: Page) -> ReplayJob:
        job = self._jobs.get(_owner(page), page.params["id"])
        if job is None:
            raise ApiError(404, f"no replay job {page.params['id']!r}")
        return job


def _owner(page: Page) -> Owner:
    return page.site.prefix, page.principal.tenant


def _batches(page: Page) -> ReplayBatch:
    """One replay batch as this session's principal (the job outlives the request)."""
    assert page.session is not None
    principal, who, gateway = page.principal, page.session.who, page.site.gateway

    async def batch(selection: dict[str, Any], size: int) -> int:
        body = {**selection, "limit": size}
        return int((await gateway.call(principal, who, "POST", "/replay", body=body))["replayed"])

    return batch


def _form_filters(page: Page) -> dict[str, str]:
    return {name: page.field(name) for name in ("tenant", "endpoint", "hours")}


__all__ = ["DeadLetters", "dead_counts"]
