"""Everything on the ingress listener that is not ingest: health, metrics, admin.

These requests are rare next to ingest, so they may run as tasks; the ingest
path never pays for them. ``/healthz`` answers while the process runs;
``/readyz`` answers 200 only when the store can serve and the router is not
draining, so a load balancer stops sending before a restart.

With ``[admin] listen`` the admin API and ``/metrics`` move to a listener of
their own (an ``OpsApp`` as that listener's application); the ingest
listener's ``OpsApp`` is then built with ``internal=False`` and answers 404
for them, exactly as for a path that does not exist. ``/metrics`` may require
a bearer token (``[admin] metrics_token``): its labels name every tenant,
source and endpoint.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import orjson

from hookrouter import metrics
from hookrouter.core.http1 import Request, Response
from hookrouter.errors import HookrouterError, NotFound, RequestRejected
from hookrouter.ingress.handler import error_response
from hookrouter.ingress.session import Reply

log = logging.getLogger(__name__)

Readiness = Callable[[], Awaitable[str | None]]  # None = ready, else the reason


class AdminRoutes(Protocol):
    """The admin API as the ops app sees it (``hookrouter.admin.api.AdminApi``).

    A protocol here so that ingress never imports the admin package above it.
    """

    @property
    def prefix(self) -> str:
        """The path below which every request is the admin API's (``/admin/v1``)."""
        ...

    def dispatch(self, request: Request, peer: str | None = None) -> Awaitable[Response]: ...


def json_response(status: int, data: Any) -> Response:
    return Response(status, orjson.dumps(data))


class OpsApp:
    """Routes non-ingest requests; callable as the ingest app's fallback.

    Also an ``Application`` itself (``handle``): the admin listener's.
    ``internal=False``: the admin API and ``/metrics`` live on another
    listener, and this one answers 404 for them.
    """

    def __init__(
        self,
        admin: AdminRoutes,
        readiness: Readiness,
        *,
        internal: bool = True,
        metrics_token: str = "",
        mounts: Sequence[AdminRoutes] = (),
    ) -> None:
        self._admin = admin
        # More applications below their own prefixes, beside the admin API (the console).
        self._mounts = [(m.prefix, m.prefix + "/", m) for m in mounts]
        self._admin_prefix = admin.prefix
        self._below_admin = admin.prefix + "/"
        self._readiness = readiness
        self._internal = internal
        self._metrics_auth = f"Bearer {metrics_token}".encode() if metrics_token else b""
        self._tasks: set[asyncio.Task[Response]] = set()

    def __call__(self, request: Request, reply: Reply) -> None:
        path = request.path
        if path == "/healthz":
            reply(json_response(200, {"status": "ok"}))
        elif path == "/readyz":
            self._spawn(self._ready(), reply)
        elif not self._internal:
            reply(_nothing_at(path))
        elif path == "/metrics":
            reply(self._metrics(request))
        elif path == self._admin_prefix or path.startswith(self._below_admin):
            self._spawn(self._admin.dispatch(request, peer_of(reply)), reply)
        else:
            self._mounted(request, reply)

    def _mounted(self, request: Request, reply: Reply) -> None:
        path = request.path
        for prefix, below, app in self._mounts:
            if path == prefix or path.startswith(below):
                self._spawn(app.dispatch(request, peer_of(reply)), reply)
                return
        reply(_nothing_at(path))

    def handle(self, request: Request, reply: Reply) -> None:
        self(request, reply)

    def _metrics(self, request: Request) -> Response:
        if self._metrics_auth and not hmac.compare_digest(
            request.headers.get("authorization", "").encode(), self._metrics_auth
        ):
            refused = RequestRejected(
                "/metrics needs Authorization: Bearer <[admin] metrics_token>",
                status=401,
                reason="unauthorized",
            )
            return error_response(refused, headers=(("www-authenticate", "Bearer"),))
        return Response(200, metrics.render(), content_type=metrics.CONTENT_TYPE)

    def _spawn(self, work: Awaitable[Response], reply: Reply) -> None:
        task: asyncio.Task[Response] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._finished(t, reply))

    def _finished(self, task: asyncio.Task[Response], reply: Reply) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            reply(error_response(HookrouterError("the router is stopping", status=503)))
            return
        exc = task.exception()
        if exc is not None:
            log.error("admin request failed", exc_info=exc)
            reply(error_response(HookrouterError("internal error")))
            return
        reply(task.result())

    async def _ready(self) -> Response:
        reason = await self._readiness()
        if reason is None:
            return json_response(200, {"status": "ready"})
        return json_response(503, {"status": "not_ready", "reason": reason})

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _nothing_at(path: str) -> Response:
    return error_response(NotFound(f"nothing at {path}; events go to POST /in/{{source}}"))


def peer_of(reply: Reply) -> str | None:
    """The client's IP address, when the engine under ``reply`` can tell.

    The asyncio engine's connections carry their transport; the native
    engines do not pass addresses up (None).
    """
    session = getattr(reply, "session", None)
    transport = getattr(getattr(session, "sink", None), "transport", None)
    if transport is None:
        return None
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else None
