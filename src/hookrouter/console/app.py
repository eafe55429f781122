"""The console and the portal, built once per router and mounted on the admin listener.

``Console.sites`` are two applications for ``ingress.ops.OpsApp``'s mounts:
``/console`` (operators, signed in with the admin or read-only token) and
``/portal`` (one tenant, signed in with its key or a minted link). They
share the templates, static files, the admin API gateway and the audit log;
each has its own sessions and cookie. Sessions and portal links live in
this process, or in the store's ``session_table`` when several routers
share the store (``sessions``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from pathlib import Path

from hookrouter.admin.api import AdminApi
from hookrouter.admin.entities import EntityService
from hookrouter.admin.keys import KeyService
from hookrouter.admin.operations import Principal
from hookrouter.clock import Clock
from hookrouter.config.server import AdminSettings
from hookrouter.console import static
from hookrouter.console.audit import AuditLog
from hookrouter.console.breakers import OpenBreakers
from hookrouter.console.deadletters import DeadLetters
from hookrouter.console.endpoints import Endpoints
from hookrouter.console.entities import EntityPages
from hookrouter.console.events import Events
from hookrouter.console.gateway import AdminGateway, ApiError
from hookrouter.console.overview import AuditPage, Overview
from hookrouter.console.portal import LinkDoor
from hookrouter.console.portal import install as install_portal_links
from hookrouter.console.render import environment
from hookrouter.console.replays import ReplayJobs
from hookrouter.console.sampler import Sampler
from hookrouter.console.sessions import (
    Links,
    PortalLinks,
    Session,
    Sessions,
    SessionStore,
    SharedLinks,
    SharedSessions,
)
from hookrouter.console.site import NavItem, Page, SignIn, Site
from hookrouter.core.http1 import Response
from hookrouter.store.sessions import SessionTable

_ROUTER = Principal(tenant=None)
AUDIT_FILE = "audit.jsonl"

OPERATOR_NAV = [
    NavItem("/", "Overview"),
    NavItem("/events", "Events"),
    NavItem("/endpoints", "Endpoints"),
    NavItem("/dead", "Dead letters"),
    NavItem("/tenants", "Tenants"),
    NavItem("/sources", "Sources"),
    NavItem("/audit", "Audit log"),
]
TENANT_NAV = [
    NavItem("/events", "Events"),
    NavItem("/endpoints", "Endpoints"),
    NavItem("/dead", "Dead letters"),
]


def _no_frames(_session: Session | None) -> list[str]:
    return []


async def _portal_home(page: Page) -> Response:
    return page.redirect("/events")


class Console:
    def __init__(
        self,
        api: AdminApi,
        settings: AdminSettings,
        entities: EntityService,
        keys: KeyService,
        clock: Clock,
        *,
        data_dir: Path | None = None,
        shared: SessionTable | None = None,
    ) -> None:
        self.gateway = AdminGateway(api)
        audit_path = data_dir / AUDIT_FILE if data_dir is not None and data_dir.is_dir() else None
        self.audit = AuditLog(clock, audit_path)
        api.on_change.append(self.audit.record)
        self._counters: Callable[[], Mapping[str, int]] | None = None
        self.sampler = Sampler(clock, self._delivery_counters)
        self._settings = settings
        self._entities = entities
        self._keys = keys
        templates, files = environment(), static.load()

        def sessions(prefix: str) -> Sessions:
            return SessionStore(clock) if shared is None else SharedSessions(shared, prefix, clock)

        def site(prefix: str, title: str, sign_in: SignIn, nav: list[NavItem], label: str) -> Site:
            return Site(
                prefix=prefix,
                title=title,
                templates=templates,
                static=files,
                gateway=self.gateway,
                sessions=sessions(prefix),
                sign_in=sign_in,
                clock=clock,
                nav=nav,
                credential_label=label,
                max_auth_failures=settings.max_auth_failures,
                frame_ancestors=self._portal_origins if prefix == "/portal" else _no_frames,
            )

        self.operator = site(
            "/console", "console", self._operator_sign_in, OPERATOR_NAV, "Admin token"
        )
        self.portal = site("/portal", "portal", self._tenant_sign_in, TENANT_NAV, "Tenant API key")
        Overview(self.sampler).register(self.operator)
        AuditPage(self.audit).register(self.operator)
        OpenBreakers().register(self.operator)
        EntityPages("tenant", entities).register(self.operator)
        EntityPages("source", entities, self.sampler).register(self.operator)
        self.replays = ReplayJobs(clock)
        for pages in (Events(), Endpoints(entities), DeadLetters(self.replays)):
            pages.register(self.operator)
            pages.register(self.portal)
        for site_ in self.sites:  # event-type filters, headers, URL: the endpoint's document
            EntityPages("endpoint", entities).register_edit(site_)
        self.portal.route("GET", "/", _portal_home)
        self.links: Links = PortalLinks(clock) if shared is None else SharedLinks(shared, clock)
        LinkDoor(self.links).register(self.portal)
        install_portal_links(api, self.links)

    @property
    def sites(self) -> tuple[Site, Site]:
        return self.operator, self.portal

    def _operator_sign_in(self, credential: str) -> tuple[Principal, str] | None:
        given = credential.encode()
        token, read_only = self._settings.token.encode(), self._settings.read_only_token.encode()
        if token and hmac.compare_digest(given, token):
            return _ROUTER, "console (admin token)"
        if read_only and hmac.compare_digest(given, read_only):
            return Principal(tenant=None, read_only=True), "console (read-only token)"
        return None

    def _tenant_sign_in(self, credential: str) -> tuple[Principal, str] | None:
        key = self._keys.authenticate(credential)
        if key is None or key.tenant not in self._entities.catalog.tenants:
            return None
        return Principal(tenant=key.tenant), f"portal ({key.tenant}, key {key.prefix})"

    def _portal_origins(self, session: Session | None) -> list[str]:
        """The sites the signed-in tenant lets frame its portal (``portal_origins``)."""
        tenant = session.principal.tenant if session is not None else None
        config = self._entities.catalog.tenants.get(tenant) if tenant else None
        return list(config.portal_origins) if config is not None else []

    def read_delivery_counters(self, counters: Callable[[], Mapping[str, int]]) -> None:
        """Take the sampler's delivery counters from ``counters`` (the engine's own).

        ``GET /delivery`` builds stats for every tenant queue, lane and breaker:
        with tens of thousands of tenants holding work, one reading every 5 s
        cost more router CPU than the traffic it charted (issue 38).
        """
        self._counters = counters

    async def _delivery_counters(self) -> dict[str, int]:
        names = ("delivered", "retried", "dead", "disabled", "parked")
        if self._counters is not None:
            counters = self._counters()
            return {name: int(counters.get(name, 0)) for name in names}
        try:
            stats = await self.gateway.call(_ROUTER, "console sampler", "GET", "/delivery")
        except ApiError:
            return {}  # no delivery engine in this process
        return {name: int(stats.get(name, 0)) for name in names}

    def start(self) -> None:
        self.sampler.start()

    async def stop(self) -> None:
        await self.replays.stop()
        await self.sampler.stop()


__all__ = ["Console"]
