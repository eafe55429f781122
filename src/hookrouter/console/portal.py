"""The tenant portal's doors: sign-in links minted through the admin API.

``POST /admin/v1/tenants/{id}/portal-links`` (admin token) answers a URL
that opens a session on that tenant's portal, once, within a few minutes:
a SaaS mints one on its server for the signed-in customer and loads it in
its own page (in an iframe when the tenant allows that origin). The link
page sets the session cookie and moves on with a meta refresh rather than a
redirect, so the next request starts from the portal's own page and the
SameSite=Strict cookie goes with it.
"""

from __future__ import annotations

from hookrouter.admin import schemas
from hookrouter.admin.api import AdminApi
from hookrouter.admin.operations import Call, Operation, Principal
from hookrouter.console import web
from hookrouter.console.sessions import Links
from hookrouter.console.site import Page, Site
from hookrouter.core.http1 import Response

LINK_PATH = "/link/{token}"


def install(api: AdminApi, links: Links, portal_prefix: str = "/portal") -> None:
    """Add the portal-link route to ``api``."""

    async def mint(call: Call) -> Response:
        tenant = call.params["id"]
        api.require_owned(call.principal, "tenant", tenant)
        link = await links.mint(tenant)
        scheme = "https" if web.behind_tls(call.request) else "http"
        host = call.request.headers.get("host", "127.0.0.1")
        url = f"{scheme}://{host}{portal_prefix}/link/{link.token}"
        return call.respond(schemas.PortalLink(url, tenant, int(links.ttl_seconds)))

    api.route(
        Operation(
            "POST",
            "/tenants/{id}/portal-links",
            "Mint a single-use sign-in link to a tenant's portal",
            "portal",
            ok=201,
            response=schemas.PortalLink,
            description=(
                "The URL opens a session on /portal scoped to this tenant; it works once, "
                "within expires_in seconds."
            ),
        ),
        mint,
    )


class LinkDoor:
    def __init__(self, links: Links) -> None:
        self._links = links

    def register(self, site: Site) -> None:
        site.route("GET", LINK_PATH, self.redeem, public=True)

    async def redeem(self, page: Page) -> Response:
        tenant = await self._links.redeem(page.params["token"])
        if tenant is None:
            return page.render(
                "error.html",
                403,
                code=403,
                message="This sign-in link is unknown, used or expired: ask for a new one.",
            )
        who = f"portal ({tenant}, link)"
        cookie = await page.site.start_session(page, Principal(tenant=tenant), who)
        return page.site.render(page, "link.html", response_headers=(("set-cookie", cookie),))


__all__ = ["LINK_PATH", "LinkDoor", "install"]
