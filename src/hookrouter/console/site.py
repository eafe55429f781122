"""One browser application below a prefix: the operator console or the tenant portal.

Both are the same machine with different doors. A ``Site`` holds a routing
table of page handlers, its own sessions (a cookie scoped to its path), the
sign-in check (the admin token for the console, a tenant's key or minted link
for the portal) and the rendering. Handlers read and change everything
through the admin API as the session's principal (``gateway``), which is why
the portal's pages are the console's pages: a tenant's session gets exactly
what that tenant's key would, and another tenant's id answers 404.

Every POST must carry the session's CSRF token; a missing or wrong one is
refused before the handler runs.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from jinja2 import Environment

from hookrouter.admin.operations import Principal
from hookrouter.admin.paging import MAX_PAGE
from hookrouter.admin.throttle import AuthThrottle, TooManyFailures
from hookrouter.clock import Clock
from hookrouter.console import web
from hookrouter.console.gateway import AdminGateway, ApiError
from hookrouter.console.sessions import Session, Sessions
from hookrouter.console.static import StaticFile, serve
from hookrouter.core.http1 import Request, Response
from hookrouter.errors import HookrouterError

log = logging.getLogger(__name__)

Handler = Callable[["Page"], Awaitable[Response]]
# Checks a presented credential: the principal and audit name it stands for, or None.
SignIn = Callable[[str], "tuple[Principal, str] | None"]


@dataclass(frozen=True, slots=True)
class NavItem:
    path: str  # below the site's prefix
    label: str


class ListPage(NamedTuple):
    """One page of an admin list as a console page shows it."""

    items: list[dict[str, Any]]
    after: str | None  # the cursor this page starts after (None: the first page)
    next_after: str | None  # the last id here when more follow
    more: str  # the link to the next page; "" on the last


@dataclass(slots=True)
class Page:
    """One request to a page handler."""

    site: Site
    request: Request
    params: dict[str, str]
    session: Session | None
    peer: str | None = None  # the client's address (the sign-in throttle's key)
    form: dict[str, list[str]] = field(default_factory=dict)

    @property
    def principal(self) -> Principal:
        assert self.session is not None
        return self.session.principal

    def field(self, name: str, default: str = "") -> str:
        values = self.form.get(name)
        return values[-1].strip() if values else default

    def fields(self, name: str) -> list[str]:
        return [v.strip() for v in self.form.get(name, []) if v.strip()]

    async def api(self, method: str, path: str, **kw: Any) -> Any:
        assert self.session is not None
        return await self.site.gateway.call(
            self.session.principal, self.session.who, method, path, **kw
        )

    async def api_or(self, default: Any, method: str, path: str, **kw: Any) -> Any:
        """The answer, or ``default`` where the API answers 404: an unknown id, or a
        part the router runs without (no delivery engine: no breakers, no replays)."""
        try:
            return await self.api(method, path, **kw)
        except ApiError as exc:
            if exc.status != 404:
                raise
            return default

    async def api_page(self, plural: str, items: str = "data", **query: Any) -> ListPage:
        """The page of ``/{plural}`` after this request's ``?after=``, the API's largest:
        a platform has 100,000 tenants, so a list page links to the next.

        ``items``: the answer's list; ``query``: fixed parameters of the list.
        """
        after = web.query(self.request).get("after")
        asked = {**query, "limit": MAX_PAGE, "after": after}
        listed = await self.api("GET", f"/{plural}", query=asked)
        cursor = listed["next_after"]
        more = web.with_query(f"{self.site.prefix}/{plural}", {"after": cursor}) if cursor else ""
        return ListPage(listed[items], after, cursor, more)

    def flash(self, message: str) -> None:
        if self.session is not None:
            self.session.flash.append(message)

    def render(self, template: str, status: int = 200, **values: Any) -> Response:
        return self.site.render(self, template, status, **values)

    def redirect(self, path: str) -> Response:
        return web.redirect(self.site.prefix + path, self.site.policy(self.session))


@dataclass(frozen=True, slots=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    public: bool


class Site:
    def __init__(
        self,
        *,
        prefix: str,
        title: str,
        templates: Environment,
        static: dict[str, StaticFile],
        gateway: AdminGateway,
        sessions: Sessions,
        sign_in: SignIn,
        clock: Clock,
        nav: list[NavItem],
        credential_label: str,
        max_auth_failures: int,
        frame_ancestors: Callable[[Session | None], list[str]] = lambda _: [],
    ) -> None:
        self.prefix = prefix  # the ops app sends every path below it here
        self.title = title
        self.templates = templates
        self.static = static
        self.gateway = gateway
        self.sessions = sessions
        self.sign_in = sign_in
        self.nav = nav
        self.credential_label = credential_label  # what the sign-in form asks for
        self.frame_ancestors = frame_ancestors
        self.cookie_name = "hr_" + prefix.strip("/")
        self.throttle = AuthThrottle(clock, max_failures=max_auth_failures)
        self._routes: list[_Route] = []
        self.route("GET", "/login", self._login_form, public=True)
        self.route("POST", "/login", self._login, public=True)
        self.route("POST", "/logout", self._logout)

    def route(self, method: str, path: str, handler: Handler, *, public: bool = False) -> None:
        """``path`` below the prefix, with ``{name}`` for one path segment."""
        regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path))
        self._routes.append(_Route(method, re.compile(regex), handler, public))

    def policy(self, session: Session | None) -> str:
        return web.csp(self.frame_ancestors(session))

    # -- dispatch ------------------------------------------------------------

    async def dispatch(self, request: Request, peer: str | None = None) -> Response:
        path = request.path[len(self.prefix) :] or "/"
        if path.startswith("/static/") and request.method == "GET":
            return serve(self.static.get(path[len("/static/") :]), request)
        page = Page(self, request, {}, None, peer)
        try:
            page.session = await self.sessions.get(web.cookie(request, self.cookie_name))
            response = await self._route(page, path)
            if page.session is not None:  # its flash messages, its last-seen time
                await self.sessions.save(page.session)
            return response
        except ApiError as exc:
            return self._error(page, exc.status, exc.message)
        except HookrouterError as exc:
            return self._error(page, exc.status, exc.message)
        except Exception:
            log.exception("console page %s %s failed", request.method, request.path)
            return self._error(page, 500, "internal error (see the router's log)")

    async def _route(self, page: Page, path: str) -> Response:
        request = page.request
        allowed = False
        for route in self._routes:
            match = route.pattern.fullmatch(path)
            if match is None:
                continue
            if route.method != request.method:
                allowed = True
                continue
            page.params = match.groupdict()
            if not route.public and page.session is None:
                if request.method == "GET":
                    return web.redirect(self.prefix + "/login", self.policy(None))
                return self._error(page, 401, "your session ended: sign in again")
            if request.method == "POST":
                self._check_post(page)
            return await route.handler(page)
        if allowed:
            return self._error(page, 405, f"{request.method} is not allowed here")
        return self._error(page, 404, f"nothing at {request.path}")

    def _check_post(self, page: Page) -> None:
        if not web.same_origin(page.request):
            raise HookrouterError("cross-origin form refused", status=403, reason="csrf")
        page.form = web.form(page.request)
        if page.session is None:
            return  # the sign-in form: nothing to forge before there is a session
        given = page.field("csrf").encode()
        if not hmac.compare_digest(given, page.session.csrf.encode()):
            raise HookrouterError(
                "the form's CSRF token is missing or stale: reload the page",
                status=403,
                reason="csrf",
            )

    # -- rendering -----------------------------------------------------------

    def render(
        self,
        page: Page,
        template: str,
        status: int = 200,
        response_headers: tuple[tuple[str, str], ...] = (),
        **values: Any,
    ) -> Response:
        session = page.session
        flashes = list(session.flash) if session else []
        if session is not None:
            session.flash.clear()
        body = self.templates.get_template(template).render(
            site=self,
            base=self.prefix,
            session=session,
            csrf=session.csrf if session else "",
            flashes=flashes,
            path=page.request.path,
            **values,
        )
        return web.html(status, body, self.policy(session), response_headers)

    def _error(self, page: Page, status: int, message: str) -> Response:
        return self.render(page, "error.html", status, code=status, message=message)

    # -- sign-in -------------------------------------------------------------

    async def _login_form(self, page: Page) -> Response:
        return page.render("login.html", error="")

    async def _login(self, page: Page) -> Response:
        peer = page.peer
        try:
            self.throttle.check(peer)
        except TooManyFailures as exc:
            return page.render("login.html", 429, error=exc.message)
        found = self.sign_in(page.field("credential"))
        if found is None:
            self.throttle.failed(peer)
            return page.render("login.html", 401, error="That credential is not valid here.")
        return await self.open_session(page, *found)

    async def open_session(self, page: Page, principal: Principal, who: str) -> Response:
        """A new session for ``principal`` (any old one of this browser ends), then home."""
        set_cookie = await self.start_session(page, principal, who)
        return web.redirect(
            self.prefix + "/", self.policy(page.session), (("set-cookie", set_cookie),)
        )

    async def start_session(self, page: Page, principal: Principal, who: str) -> str:
        """Make ``page``'s session a new one for ``principal``; returns its Set-Cookie value."""
        await self.sessions.drop(web.cookie(page.request, self.cookie_name))
        page.session = await self.sessions.create(principal, who)
        return web.session_cookie(
            self.cookie_name,
            page.session.id,
            self.prefix,
            secure=web.behind_tls(page.request),
            max_age=int(self.sessions.idle_seconds),
            framed=bool(self.frame_ancestors(page.session)),
        )

    async def _logout(self, page: Page) -> Response:
        assert page.session is not None
        await self.sessions.drop(page.session.id)
        page.session = None  # gone: nothing of it is saved after this request
        expired = web.session_cookie(
            self.cookie_name, "", self.prefix, secure=web.behind_tls(page.request), max_age=0
        )
        return web.redirect(self.prefix + "/login", self.policy(None), (("set-cookie", expired),))


__all__ = ["Handler", "ListPage", "NavItem", "Page", "SignIn", "Site"]
