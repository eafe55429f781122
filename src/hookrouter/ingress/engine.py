"""Ingress engines by name, and the ``auto`` choice.

An engine owns the listening socket and the byte transport and feeds an
``HttpServer``; it has a handful of methods (``IngressEngine``). ``asyncio``
is portable; ``epoll`` and ``io_uring`` come from the optional C extension
(``hookrouter._native``), imported only here and in the native shell.

``auto`` never picks io_uring: its kernel attack surface is large enough that
Google disabled it on its servers and Docker blocks it by default, so it must
be asked for by name. Asking for an engine that cannot run here raises
``EngineUnavailable`` with the exact reason; ``auto`` falls back and logs why.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Protocol

from hookrouter.errors import EngineUnavailable
from hookrouter.ingress.asyncio_engine import AsyncioEngine
from hookrouter.ingress.server import HttpServer

log = logging.getLogger(__name__)

NATIVE_ENGINES = ("epoll", "io_uring")


class IngressEngine(Protocol):
    name: str

    async def start(self, server: HttpServer, host: str, port: int) -> tuple[str, int]: ...

    async def stop_accepting(self) -> None: ...

    async def stop(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...


def _native_engine(name: str, options: dict[str, Any]) -> IngressEngine:
    try:
        module = importlib.import_module("hookrouter.ingress.native_engine")
    except ImportError as exc:
        raise EngineUnavailable(f"engine {name!r} needs the native extension: {exc}") from exc
    engine: IngressEngine = module.create(name, **options)
    return engine


def _asyncio_engine(options: dict[str, Any]) -> AsyncioEngine:
    return AsyncioEngine(
        backlog=options.get("backlog", 1024),
        max_connections=options.get("max_connections", 10_000),
    )


def create_engine(name: str, **options: Any) -> IngressEngine:
    """The engine configured as ``name``; ``EngineUnavailable`` says why not.

    ``max_connections`` caps open connections on every engine: the native ones
    size their connection table by it (and pause accepting when it is full).
    """
    if "max_connections" in options:
        options.setdefault("max_conns", options["max_connections"])
    if name == "asyncio":
        return _asyncio_engine(options)
    if name in NATIVE_ENGINES:
        return _native_engine(name, options)
    if name == "auto":
        try:
            return _native_engine("epoll", options)
        except EngineUnavailable as exc:
            log.info("engine auto: using asyncio (%s)", exc.message)
            return _asyncio_engine(options)
    raise EngineUnavailable(f"unknown engine {name!r}")
