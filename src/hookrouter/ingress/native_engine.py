"""The epoll and io_uring ingress engines: a Python shell over the C transport.

Theory of operation
-------------------
The C engine (``hookrouter._native``) owns the listener and every socket.
The loop watches one fd; when it is readable, ``_on_readable`` makes ONE
``poll()`` call that returns every event of the turn -- accepted, data, EOF,
closed, drained -- and dispatches each to the connection's ``HttpSession``.
Sessions answer through a ``_Sink`` (the ``ByteSink`` of the session layer),
which only queues in C; one ``flush()`` at the end of the turn pushes all of
it to the kernel. Answers produced later (after a group commit) schedule one
flush for the turn they happen in.

Every ACCEPTED is followed by exactly one CLOSED, which is where the session
learns ``connection_lost``. ``send()`` reports crossing the high-water mark
(the session pauses reading) and a DRAINED event resumes it, like asyncio's
pause_writing/resume_writing.

A sweep once a second lets C expire lingering closes; request and keep-alive
timeouts stay in the shared session layer, so every engine times out alike.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import Any

from hookrouter._native import IMPORT_ERROR
from hookrouter._native import engine as native
from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.errors import EngineUnavailable
from hookrouter.ingress.doctor import explain_engine_failure
from hookrouter.ingress.server import ACCEPT_PAUSES, HttpServer
from hookrouter.ingress.session import HttpSession

log = logging.getLogger(__name__)

# Events handled per poll(); the rest stay queued and are taken next turn,
# so one busy listener cannot hold the loop (asyncio handles ~all ready fds).
MAX_EVENTS_PER_TURN = 512
SWEEP_SECONDS = 1.0  # the session layer sweeps its timeouts at the same rate
# How the loop learns of io_uring completions: watching the ring fd (with
# COOP_TASKRUN) took the fewest syscalls and the least CPU per request of the
# three ways measured (an eventfd costs an extra read per turn, an engine
# thread two wake-ups per batch; figures: docs/performance.md).
DEFAULT_URING_NOTIFY = "ring"


class _Sink:
    """``ByteSink`` for one connection: every call only queues work in C."""

    __slots__ = ("_cid", "_shell")

    def __init__(self, shell: NativeEngine, cid: int) -> None:
        self._shell = shell
        self._cid = cid

    def write(self, data: bytes) -> None:
        shell = self._shell
        if shell.engine.send(self._cid, data if type(data) is bytes else bytes(data)):
            session = shell.sessions.get(self._cid)
            if session is not None:
                session.pause_writing()
        shell.want_flush()

    def close(self) -> None:
        self._shell.engine.close(self._cid)
        self._shell.want_flush()

    def abort(self) -> None:
        self._shell.engine.abort(self._cid)
        self._shell.want_flush()

    def pause_reading(self) -> None:
        self._shell.engine.pause(self._cid)
        self._shell.want_flush()

    def resume_reading(self) -> None:
        self._shell.engine.resume(self._cid)
        self._shell.want_flush()

    def __repr__(self) -> str:
        return f"<_Sink conn={self._cid:#x}>"


class NativeEngine:
    """``IngressEngine`` over the C transport (``epoll`` or ``io_uring``)."""

    def __init__(self, backend: str, *, clock: Clock = SYSTEM_CLOCK, **options: Any) -> None:
        if native is None:
            raise EngineUnavailable(f"engine {backend!r} unavailable: {IMPORT_ERROR}")
        self.name = backend
        self._clock = clock
        if backend == "io_uring":
            options.setdefault("notify", DEFAULT_URING_NOTIFY)
        self._options = options
        self.sessions: dict[int, HttpSession] = {}
        self._engine: Any = None
        self._server: HttpServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_handle: asyncio.Handle | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._turns = 0
        self._pauses_seen = (0, 0)  # C's (accept_pauses, fd_pauses) already counted

    @property
    def engine(self) -> Any:
        return self._engine

    async def start(self, server: HttpServer, host: str, port: int) -> tuple[str, int]:
        """Open the listener and start serving; ``EngineUnavailable`` says why not."""
        assert native is not None
        try:
            self._engine = native.Engine(self.name, host, port, **self._options)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE or self.name == "epoll":
                raise
            raise EngineUnavailable(explain_engine_failure(self.name, exc)) from exc
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._engine.fileno(), self._on_readable)
        self._sweeper = self._loop.call_later(SWEEP_SECONDS, self._sweep)
        sockname = self._engine.sockname()
        return str(sockname[0]), int(sockname[1])

    # -- the loop turn ---------------------------------------------------------
    def _on_readable(self) -> None:
        engine, sessions, server = self._engine, self.sessions, self._server
        assert native is not None and server is not None
        self._turns += 1
        events = engine.poll(MAX_EVENTS_PER_TURN, int(self._clock.monotonic() * 1000))
        for kind, cid, payload in events:
            if kind == native.DATA:
                session = sessions.get(cid)
                if session is not None:
                    session.data_received(payload)
            elif kind == native.ACCEPTED:
                sessions[cid] = server.new_session(_Sink(self, cid))
            elif kind == native.CLOSED:
                session = sessions.pop(cid, None)
                if session is not None:
                    session.connection_lost()
            elif kind == native.EOF:
                session = sessions.get(cid)
                if session is not None:
                    session.eof_received()
            elif kind == native.DRAINED:
                session = sessions.get(cid)
                if session is not None:
                    session.resume_writing()
        self._flush()

    def want_flush(self) -> None:
        """Queue one flush for this turn (answers given outside ``_on_readable``)."""
        if self._flush_handle is None and self._loop is not None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        handle = self._flush_handle
        if handle is not None:
            # Answers given during this turn's poll queued a flush; this one covers them.
            handle.cancel()
            self._flush_handle = None
        engine = self._engine
        if engine is None:
            return
        engine.flush()
        if engine.has_pending() and self._loop is not None:
            # Events produced outside poll (a close after a failed send) or
            # more completions than one turn takes: the fd may not fire again.
            self._loop.call_soon(self._on_readable)

    def _sweep(self) -> None:
        if self._engine is None or self._loop is None:
            return
        # The sweep also resumes an accept paused by EMFILE (no slot of ours may free).
        self._engine.sweep(int(self._clock.monotonic() * 1000))
        self._flush()
        self._count_pauses()
        self._sweeper = self._loop.call_later(SWEEP_SECONDS, self._sweep)

    def _count_pauses(self) -> None:
        stats = self._engine.stats()
        at_cap, out_of_fds = stats["accept_pauses"], stats["fd_pauses"]
        seen_cap, seen_fds = self._pauses_seen
        if at_cap > seen_cap:
            ACCEPT_PAUSES.labels("max_connections").inc(at_cap - seen_cap)
        if out_of_fds > seen_fds:
            ACCEPT_PAUSES.labels("fd_exhausted").inc(out_of_fds - seen_fds)
        self._pauses_seen = (at_cap, out_of_fds)

    # -- stopping --------------------------------------------------------------
    async def stop_accepting(self) -> None:
        if self._engine is not None:
            self._engine.stop_accepting()

    async def stop(self) -> None:
        """Close every connection now and release the kernel resources."""
        engine, self._engine = self._engine, None
        if engine is None:
            return
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._loop is not None:
            # A plain-typed local: compiled, a method call on the Optional
            # attribute checks its result against typeshed's ``bool``, and
            # uvloop's remove_reader returns None (TypeError at every stop).
            loop: asyncio.AbstractEventLoop = self._loop
            loop.remove_reader(engine.fileno())
        for kind, cid, _payload in engine.poll(1 << 30) + engine.shutdown():
            if native is not None and kind == native.CLOSED:
                session = self.sessions.pop(cid, None)
                if session is not None:
                    session.connection_lost()
        for session in self.sessions.values():  # never accepted by Python's view
            session.connection_lost()
        self.sessions.clear()

    def stats(self) -> dict[str, Any]:
        base: dict[str, Any] = {"engine": self.name, "turns": self._turns}
        if self._engine is not None:
            base.update(self._engine.stats())
            base["backend_info"] = self._engine.info()
        return base

    def __repr__(self) -> str:
        return f"<NativeEngine {self.name} sessions={len(self.sessions)} turns={self._turns}>"


def create(name: str, **options: Any) -> NativeEngine:
    """Factory used by ``hookrouter.ingress.engine`` for ``epoll`` and ``io_uring``."""
    if name not in ("epoll", "io_uring"):
        raise EngineUnavailable(f"unknown native engine {name!r}")
    clock = options.pop("clock", SYSTEM_CLOCK)
    allowed = {"backlog", "max_conns", "ring_entries", "buf_count", "buf_size", "notify"}
    return NativeEngine(name, clock=clock, **{k: v for k, v in options.items() if k in allowed})
