"""Coalesce token-bucket calls into round trips, each answered by a deadline.

Theory of operation
-------------------
Every call submitted before the event loop runs the flush callback (queued
with ``call_soon``: the same loop turn) joins the *open batch*, which goes to
Redis as one round trip. Up to ``max_inflight`` batches travel at once; while
they do, new calls gather in the next open batch, so under load batches grow
instead of round trips.

When a batch opens, a timer is armed for ``timeout`` seconds. On expiry
every unanswered future in it resolves to ``"timeout"``: no caller waits
longer, whatever Redis or the network does. The reply may still arrive;
``settle`` sees every call's real outcome exactly once (late or not), so
leases and the denial cache stay true to what Redis did.

Futures resolve to a :class:`~.redis_calls.BucketReply` or to a reason string
(``timeout``, ``unavailable``, ``response``, ``closed``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from hookrouter.clock import Clock
from hookrouter.ratelimit import metrics
from hookrouter.ratelimit.redis_calls import (
    BucketCall,
    BucketCaller,
    BucketReply,
    RedisUnavailable,
)
from hookrouter.ratelimit.slots import Slot

Result = BucketReply | str


class Pending:
    """One call in a batch and the future its waiters await."""

    __slots__ = ("call", "future", "lease", "slot")

    def __init__(self, slot: Slot, call: BucketCall, lease: bool, future: asyncio.Future[Result]):
        self.slot = slot
        self.call = call
        self.lease = lease
        self.future = future


class _Batch:
    __slots__ = ("entries", "sent", "timer")

    def __init__(self) -> None:
        self.entries: list[Pending] = []
        self.sent = False
        self.timer: asyncio.TimerHandle | None = None


Settle = Callable[[Pending, BucketReply | BaseException | str, float], None]
BatchDone = Callable[[BaseException | None], None]


class Batcher:
    """Sends :class:`BucketCall` batches through ``caller``.

    ``settle(entry, outcome, sent_at)`` runs once per call with its reply, the
    error Redis gave for it, or a reason string; ``batch_done(error)`` once per
    round trip with ``None`` or the exception that failed it (before settling).
    """

    def __init__(
        self,
        caller: BucketCaller,
        settle: Settle,
        batch_done: BatchDone,
        *,
        clock: Clock,
        timeout: float,
        max_inflight: int = 4,
    ) -> None:
        self._caller = caller
        self._settle = settle
        self._batch_done = batch_done
        self._clock = clock
        self._timeout = timeout
        self._max_inflight = max_inflight
        self._open: _Batch | None = None
        self._flush_scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.inflight = 0
        self.batches = 0
        self.largest_batch = 0

    def __repr__(self) -> str:
        pending = len(self._open.entries) if self._open else 0
        return f"Batcher(inflight={self.inflight}, pending={pending}, batches={self.batches})"

    def submit(self, slot: Slot, call: BucketCall, lease: bool) -> asyncio.Future[Result]:
        """Queue ``call`` for the next round trip; the future resolves by the deadline."""
        loop = asyncio.get_running_loop()
        batch = self._open
        if batch is None:
            batch = self._open = _Batch()
            batch.timer = loop.call_later(self._timeout, self._expire, batch, "timeout")
        entry = Pending(slot, call, lease, loop.create_future())
        batch.entries.append(entry)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return entry.future

    async def close(self) -> None:
        """Answer the open batch with ``"closed"`` and cancel the round trips in flight."""
        if self._open is not None:
            self._expire(self._open, "closed")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _flush(self) -> None:
        self._flush_scheduled = False
        batch = self._open
        if batch is None or self.inflight >= self._max_inflight:
            return  # a finishing batch flushes again
        self._open = None
        batch.sent = True
        self.inflight += 1
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(batch.entries))
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: _Batch) -> None:
        sent_at = self._clock.monotonic()
        started = time.perf_counter()
        outcomes: list[Any]
        error: BaseException | None = None
        try:
            outcomes = list(await self._caller.run([e.call for e in batch.entries]))
            metrics.REDIS_SECONDS.observe(time.perf_counter() - started)
        except asyncio.CancelledError:
            outcomes = ["closed"] * len(batch.entries)
            raise
        except Exception as exc:  # RedisUnavailable, or a bug: every call gets the policy
            error = exc
            reason = "unavailable" if isinstance(exc, RedisUnavailable) else "error"
            outcomes = [reason] * len(batch.entries)
        finally:
            self.inflight -= 1
            if batch.timer is not None:
                batch.timer.cancel()
            self._batch_done(error)
            for entry, outcome in zip(batch.entries, outcomes, strict=True):
                self._finish(entry, outcome, sent_at)
            if self._open is not None and not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)

    def _finish(
        self, entry: Pending, outcome: BucketReply | BaseException | str, sent_at: float
    ) -> None:
        self._settle(entry, outcome, sent_at)
        if not entry.future.done():
            if isinstance(outcome, BucketReply | str):
                entry.future.set_result(outcome)
            else:
                entry.future.set_result("response")

    def _expire(self, batch: _Batch, reason: str) -> None:
        """The deadline passed: answer what is unanswered with ``reason``."""
        if self._open is batch:
            self._open = None  # never sent: nothing else will answer it
        for entry in batch.entries:
            if not batch.sent:
                self._settle(entry, reason, self._clock.monotonic())
            if not entry.future.done():
                entry.future.set_result(reason)
