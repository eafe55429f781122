"""Loop-stall tracer for a router under load: put this directory on the router's PYTHONPATH.

With ``HOOKROUTER_STALL_TRACE=FILE`` set in the router's environment
(``{pid}`` in FILE becomes the process id), a task stamps the time every
2 ms on the router's event loop, and a watchdog thread records, while the
stamp is older than ``HOOKROUTER_STALL_MS`` (15), the loop thread's Python
stack, its ``/proc`` state and wait channel (in state D also its kernel
stack, readable as root) and the other threads' top frames (up to 12
samples a stall), then at the end of the stall its
length, the CPU ticks each thread used meanwhile and the loop thread's time
on a CPU and runnable but waiting for one (``schedstat``, from the first
sample on): one JSON line per stall in FILE. It also logs every cyclic-GC
collection to ``FILE.gc`` (wall time, generation, ms, objects collected;
with ``HOOKROUTER_STALL_GC_TYPES=1`` also the commonest types it freed),
where the loop committer is interpreted every group commit to
``FILE.flush`` (wall time, ms, events, jobs), and every fan-out
materialization to ``FILE.fanout`` (wall time, ms, events the watermark
rose by, rows inserted, 1 when it went to the newest event rather than a
round's bound). Without the variable it does nothing. The tracer costs the
loop some CPU (a wake every 2 ms; a line per commit), so compare traced
runs with traced runs. Used for docs/performance.md, "Naming the half-load
tail" and "The soak's collapse named".
"""

from __future__ import annotations

import os

# "{pid}" in the name gives each traced process its own file (the bench's own
# processes run asyncio too when the variable is set for the whole run).
_OUT = os.environ.get("HOOKROUTER_STALL_TRACE", "").replace("{pid}", str(os.getpid()))

if _OUT:
    import asyncio
    import contextlib
    import gc
    import json
    import sys
    import threading
    import time
    import traceback
    from collections import Counter
    from types import FrameType
    from typing import Any

    _STALL_MS = float(os.environ.get("HOOKROUTER_STALL_MS", "15"))
    _BEAT_S = 0.002
    _WATCH_S = 0.004
    _beat_at = [time.perf_counter()]
    _loop_ids = [0, 0]  # native id, Python ident

    def _cpu_ticks() -> dict[int, int]:
        out = {}
        base = f"/proc/{os.getpid()}/task"
        for tid in os.listdir(base):
            try:
                with open(f"{base}/{tid}/stat") as fh:
                    fields = fh.read().rpartition(")")[2].split()
            except OSError:
                continue
            out[int(tid)] = int(fields[11]) + int(fields[12])  # utime + stime
        return out

    def _loop_schedstat() -> tuple[int, int]:
        """The loop thread's (ns on a CPU, ns runnable but waiting for one) so far."""
        try:
            with open(f"/proc/self/task/{_loop_ids[0]}/schedstat") as fh:
                on_cpu, waiting, _ = fh.read().split()
        except (OSError, ValueError):
            return 0, 0
        return int(on_cpu), int(waiting)

    def _frames(frame: FrameType | None, limit: int = 14) -> list[str]:
        if frame is None:
            return []
        return [
            f"{os.path.basename(f.filename)}:{f.name}:{f.lineno}"
            for f in traceback.extract_stack(frame)[-limit:]
        ]

    def _loop_state() -> tuple[str, str]:
        base = f"/proc/self/task/{_loop_ids[0]}"
        try:
            with open(f"{base}/stat") as fh:
                state = fh.read().rpartition(")")[2].split()[0]
            with open(f"{base}/wchan") as fh:
                return state, fh.read().strip()
        except OSError:
            return "?", "?"

    def _kernel_stack() -> list[str]:
        """The loop thread's kernel stack (root only): what an uninterruptible wait waits on."""
        try:
            with open(f"/proc/self/task/{_loop_ids[0]}/stack") as fh:
                return [line.split("] ", 1)[-1].split("+")[0] for line in fh.read().splitlines()]
        except OSError:
            return []

    def _sample(age_ms: float) -> dict[str, Any]:
        frames = sys._current_frames()
        try:
            state, wchan = _loop_state()
            others = {
                t.name: _frames(frames.get(t.ident or 0), 3)
                for t in threading.enumerate()
                if t.ident not in (_loop_ids[1], threading.get_ident())
            }
            loop = _frames(frames.get(_loop_ids[1]))
        finally:
            # The dict holds this very frame: left filled, it is a cycle that
            # keeps every sampled frame's locals (a whole commit batch) alive
            # until a collection, which the tracer would then report.
            frames.clear()
        sample = {"age_ms": round(age_ms, 1), "state": state, "wchan": wchan, "loop": loop,
                  "others": others}  # fmt: skip
        if state == "D":
            sample["kernel"] = _kernel_stack()
        return sample

    def _watch() -> None:
        out = open(_OUT, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
        stall: dict[str, Any] | None = None
        last = time.perf_counter()
        while True:
            time.sleep(_WATCH_S)
            now = time.perf_counter()
            late, last = now - last - _WATCH_S, now
            age_ms = (now - _beat_at[0]) * 1000
            if age_ms > _STALL_MS:
                if stall is None:
                    stall = {"t": time.time() - age_ms / 1000, "cpu0": _cpu_ticks(),
                             "sched0": _loop_schedstat(), "samples": [],
                             "wd_late_ms": 0.0}  # fmt: skip
                stall["wd_late_ms"] = max(stall["wd_late_ms"], late * 1000)
                if len(stall["samples"]) < 12:
                    stall["samples"].append(_sample(age_ms))
            elif stall is not None:
                names = {t.native_id: t.name for t in threading.enumerate()}
                on_cpu, waiting = _loop_schedstat()
                on0, wait0 = stall.pop("sched0")
                # From the first sample, which is _STALL_MS into the stall.
                stall["loop_on_cpu_ms"] = round((on_cpu - on0) / 1e6, 1)
                stall["loop_runnable_ms"] = round((waiting - wait0) / 1e6, 1)
                before = stall.pop("cpu0")
                used = {tid: n - before.get(tid, 0) for tid, n in _cpu_ticks().items()}
                stall["cpu_ticks"] = {names.get(t, str(t)): n for t, n in used.items() if n > 0}
                stall["dur_ms"] = round((time.time() - stall["t"]) * 1000, 1)
                out.write(json.dumps(stall) + "\n")
                stall = None

    def _log_gc() -> None:
        out = open(f"{_OUT}.gc", "a", buffering=1)  # noqa: SIM115
        started = [0.0]

        # With HOOKROUTER_STALL_GC_TYPES=1 the collector keeps what it frees
        # (DEBUG_SAVEALL): each line then ends with the most common types of
        # the cycles it found, and the list is emptied again.
        types = os.environ.get("HOOKROUTER_STALL_GC_TYPES") == "1"
        if types:
            gc.set_debug(gc.DEBUG_SAVEALL)

        def callback(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
                return
            ms = (time.perf_counter() - started[0]) * 1000
            line = f"{time.time():.4f} {info['generation']} {ms:.2f} {info['collected']}"
            if types and gc.garbage:
                top = Counter(type(obj).__qualname__ for obj in gc.garbage).most_common(8)
                line += " " + json.dumps(dict(top))
                gc.garbage.clear()
            out.write(line + "\n")

        gc.callbacks.append(callback)

    def _log_commits() -> None:
        from hookrouter.store.sqlite import loopcommit

        out = open(f"{_OUT}.flush", "a", buffering=1)  # noqa: SIM115
        flush = loopcommit.LoopCommitter._flush

        def timed(self: Any) -> None:
            events, jobs = len(self._events), len(self._jobs)
            started = time.perf_counter()
            flush(self)
            ms = (time.perf_counter() - started) * 1000
            out.write(f"{time.time():.4f} {ms:.3f} {events} {jobs}\n")

        with contextlib.suppress(TypeError):  # a compiled class: no commit log
            loopcommit.LoopCommitter._flush = timed  # type: ignore[method-assign]

    def _log_materialize() -> None:
        from hookrouter.store.sqlite import fanout

        out = open(f"{_OUT}.fanout", "a", buffering=1)  # noqa: SIM115
        materialize = fanout.materialize

        def timed(conn: Any, upto: int | None = None) -> int:
            before = fanout.watermark(conn)
            started = time.perf_counter()
            inserted = materialize(conn, upto)
            ms = (time.perf_counter() - started) * 1000
            span = (fanout.watermark(conn) or 0) - (before or 0)
            out.write(f"{time.time():.4f} {ms:.3f} {span} {inserted} {upto is None:d}\n")
            return inserted

        fanout.materialize = timed  # the compiled ledger looks it up on the module

    async def _beat() -> None:
        _log_gc()
        _log_commits()
        _log_materialize()
        _loop_ids[:] = [threading.get_native_id(), threading.get_ident()]
        threading.Thread(target=_watch, daemon=True, name="stall-watchdog").start()
        while True:
            _beat_at[0] = time.perf_counter()
            await asyncio.sleep(_BEAT_S)

    _run = asyncio.Runner.run

    def _traced_run(self: asyncio.Runner, coro: Any, **kwargs: Any) -> Any:
        async def traced() -> Any:
            beat = asyncio.ensure_future(_beat())
            try:
                return await coro
            finally:
                beat.cancel()

        return _run(self, traced(), **kwargs)

    asyncio.Runner.run = _traced_run  # type: ignore[method-assign]
