"""The operator's overview page and the audit log page.

The overview's live part is one fragment the page's script fetches every few
seconds; everything in it comes from memory (the sampler's ring buffer, the
delivery engine's queue and breaker stats) except the dead-letter counts,
which use the replay dry run's indexed count per tenant.
"""

from __future__ import annotations

import time
from typing import Any

from hookrouter.console import sampler as counters
from hookrouter.console.audit import AuditLog
from hookrouter.console.charts import sparkline
from hookrouter.console.deadletters import dead_counts
from hookrouter.console.gateway import ApiError
from hookrouter.console.sampler import Sampler
from hookrouter.console.site import Page, Site
from hookrouter.core.http1 import Response
from hookrouter.delivery.metrics import LATENCY

# The dead-letter table counts at most this many tenants per refresh (the
# first ones by id); the dead-letters page filters by any tenant.
MAX_DEAD_COUNTS = 50
OVERVIEW_TENANTS = 100  # tenants shown: as many of the busiest, and of the first by id
OVERVIEW_BREAKERS = 100  # open breakers listed (the first by id); the breakers page has all
# A tenant whose queue has not been created yet (nothing routed to it).
_IDLE = {"queued": 0, "in_flight": 0, "spilled": 0, "spilling": False, "credits_used": 0,
         "capacity": 0}  # fmt: skip


class Overview:
    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def register(self, site: Site) -> None:
        site.route("GET", "/", self.page)
        site.route("GET", "/fragments/overview", self.fragment)

    async def page(self, page: Page) -> Response:
        return page.render("overview.html", **await self._values(page))

    async def fragment(self, page: Page) -> Response:
        return page.render("overview_live.html", **await self._values(page))

    async def _values(self, page: Page) -> dict[str, Any]:
        series = self.sampler.series
        charts = {
            "received": sparkline(series(counters.received)),
            "refused": sparkline(series(counters.refused)),
            "delivered": sparkline(series(counters.delivered)),
            "failed": sparkline(series(counters.failed)),
        }
        _, refusals = counters.ingest_totals()
        stats = await page.api_or({}, "GET", "/delivery", query={"limit": OVERVIEW_TENANTS})
        tripped = {"tripped": True, "limit": OVERVIEW_BREAKERS}
        breakers = await page.api_or({}, "GET", "/breakers", query=tripped)
        # The tenants with the most work, and the first ones by id: not all 100,000.
        listed = await page.api("GET", "/tenants", query={"limit": OVERVIEW_TENANTS})
        queues = stats.get("tenants", {})
        ids = sorted({t["id"] for t in listed["data"]} | set(queues))
        tenants = [queues.get(t) or {**_IDLE, "tenant_id": t} for t in ids]
        return {
            "title": "Overview",
            "charts": charts,
            "refusals": sorted(refusals.items(), key=lambda item: -item[1]),
            "tenants": tenants,
            "open_breakers": [b for b in breakers.get("breakers", []) if b["state"] != "closed"],
            "more_breakers": breakers.get("next_after") is not None,  # the breakers page has all
            "dead": await self._dead_counts(page, ids),
            "latency": latency_bounds(ids),
            "now": time.time(),
            "interval": self.sampler.interval,
        }

    async def _dead_counts(self, page: Page, tenants: list[str]) -> list[tuple[str, int]] | None:
        try:
            counts = await dead_counts(page, tenants[:MAX_DEAD_COUNTS])
        except ApiError as exc:
            if exc.status != 404:  # 404: no delivery engine, so no replay route
                raise
            return []
        return None if counts is None else [(t, n) for t, n in counts if n]


def latency_bounds(
    tenants: list[str], quantiles: tuple[float, ...] = (0.5, 0.99)
) -> dict[str, list[str]]:
    """Per tenant shown, the histogram bucket bound each quantile of ack-to-delivered time is under.

    The delivery engine keeps that histogram per tenant (``hookrouter_delivery_latency_seconds``);
    a bucket bound is all it can tell, so the page says "≤ 25 ms", not "21 ms". The
    shown tenants' cells are read directly: not a scrape of every tenant's series.
    """
    bounds = [*LATENCY.bounds, float("inf")]
    out = {}
    for tenant in tenants:
        cell = LATENCY.peek(tenant)
        if cell is None:
            continue
        cumulative = cell.cumulative()
        total = cumulative[-1]
        if total > 0:
            under = [(bound, float(n)) for bound, n in zip(bounds, cumulative, strict=True)]
            out[tenant] = [_under(under, q * total) for q in quantiles]
    return out


def _under(cumulative: list[tuple[float, float]], rank: float) -> str:
    for bound, count in cumulative:
        if count >= rank:
            if bound == float("inf"):
                return "> 1 h"
            return f"≤ {bound * 1000:.0f} ms" if bound < 1 else f"≤ {bound:g} s"
    return "—"


class AuditPage:
    def __init__(self, audit: AuditLog) -> None:
        self.audit = audit

    def register(self, site: Site) -> None:
        site.route("GET", "/audit", self.page)

    async def page(self, page: Page) -> Response:
        return page.render("audit.html", title="Audit log", entries=self.audit.newest())


__all__ = ["AuditPage", "Overview"]
