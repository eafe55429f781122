"""Every open breaker, a page at a time: where the overview's short list leads.

The overview shows the first breakers not closed; when a receiver host that
many tenants share goes down, thousands trip at once, and this page lists
them all (by endpoint id, the admin API's largest page at a time, a link to
the next), each linking to its endpoint's health and breaker history.
"""

from __future__ import annotations

from hookrouter.console.gateway import ApiError
from hookrouter.console.site import ListPage, Page, Site
from hookrouter.core.http1 import Response


class OpenBreakers:
    def register(self, site: Site) -> None:
        site.route("GET", "/breakers", self.list)

    async def list(self, page: Page) -> Response:
        try:
            listed = await page.api_page("breakers", "breakers", tripped=True)
        except ApiError as exc:
            if exc.status != 404:  # 404: no delivery engine, so no breakers
                raise
            listed = ListPage([], None, None, "")
        return page.render(
            "breakers.html", title="Open breakers", breakers=listed.items, more=listed.more
        )


__all__ = ["OpenBreakers"]
