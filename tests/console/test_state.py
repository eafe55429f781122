"""The console's in-memory state: sessions expire, links work once, tables stay bounded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hookrouter.admin.operations import Principal
from hookrouter.clock import ManualClock
from hookrouter.console.audit import AuditLog
from hookrouter.console.charts import sparkline
from hookrouter.console.replays import ReplayJobs
from hookrouter.console.sessions import IDLE_SECONDS, LINK_SECONDS, PortalLinks, SessionStore
from hookrouter.core.http1 import Request, Response

ADMIN = Principal(tenant=None)


async def test_a_session_ends_after_its_idle_time_and_each_request_restarts_it() -> None:
    clock = ManualClock()
    sessions = SessionStore(clock)
    session = await sessions.create(ADMIN, "console (admin token)")
    clock.advance(IDLE_SECONDS - 1)
    assert await sessions.get(session.id) is session  # used: its idle time starts again
    clock.advance(IDLE_SECONDS - 1)
    assert await sessions.get(session.id) is session
    clock.advance(IDLE_SECONDS + 1)
    assert await sessions.get(session.id) is None
    assert len(sessions) == 0  # and it is gone, not only refused


async def test_session_ids_are_unguessable_and_unknown_ones_are_nothing() -> None:
    sessions = SessionStore(ManualClock())
    a, b = await sessions.create(ADMIN, "a"), await sessions.create(ADMIN, "b")
    assert a.id != b.id and len(a.id) >= 43 and a.csrf != b.csrf
    assert await sessions.get("") is None and await sessions.get(None) is None
    assert await sessions.get(a.id[:-1] + "x") is None


async def test_the_session_table_is_bounded_dropping_the_least_recently_used() -> None:
    clock = ManualClock()
    sessions = SessionStore(clock, max_entries=3)
    first, second, third = [await sessions.create(ADMIN, str(i)) for i in range(3)]
    await sessions.get(first.id)  # used: now the most recent
    await sessions.create(ADMIN, "fourth")
    assert len(sessions) == 3
    assert await sessions.get(second.id) is None
    assert await sessions.get(first.id) is first and await sessions.get(third.id) is third


async def test_a_portal_link_works_once_and_only_within_its_time() -> None:
    clock = ManualClock()
    links = PortalLinks(clock)
    link = await links.mint("acme")
    assert await links.redeem(link.token) == "acme"
    assert await links.redeem(link.token) is None  # used
    late = await links.mint("acme")
    clock.advance(LINK_SECONDS + 1)
    assert await links.redeem(late.token) is None  # expired
    assert await links.redeem("made-up") is None


def _change(path: str) -> tuple[Request, Response]:
    return Request("DELETE", path, "", {}, b"", True), Response(204)


def test_the_audit_log_survives_a_restart_and_rolls_its_file_over(tmp_path: Path) -> None:
    clock = ManualClock()
    path = tmp_path / "audit.jsonl"
    log = AuditLog(clock, path, max_file_bytes=400)
    for i in range(5):
        log.record("admin API", *_change(f"/admin/v1/tenants/t{i}"))
    dry_run = Request("POST", "/admin/v1/replay", "dry_run=true", {}, b"", True)
    log.record("admin API", dry_run, Response(200))  # a count, not a change
    again = AuditLog(clock, path)
    paths = [e.path for e in again.newest()]
    assert paths and paths[0] == "/admin/v1/tenants/t4"
    assert "/admin/v1/replay" not in paths
    assert path.with_suffix(".jsonl.1").exists()  # rolled over at 400 bytes
    assert path.stat().st_size <= 400


def test_a_sparkline_fits_its_box() -> None:
    chart = sparkline([0.0, 5.0, 10.0, 0.0])
    ys = [float(p.split(",")[1]) for p in chart.points.split()]
    xs = [float(p.split(",")[0]) for p in chart.points.split()]
    assert min(ys) >= 0 and max(ys) <= chart.height and xs[-1] == chart.width
    assert chart.peak == 10.0 and chart.last == 0.0
    assert sparkline([]).points == "" and sparkline([0.0, 0.0]).peak == 0.0


def test_a_time_becomes_an_event_id_cursor_between_the_ids_around_it() -> None:
    from hookrouter.console.events import first_id_after
    from hookrouter.ids import event_id_time_ms, is_event_id, new_event_id

    at = 1_796_000_000.123
    before, after = new_event_id(int(at * 1000)), new_event_id(int(at * 1000) + 1)
    cursor = first_id_after(at)
    assert is_event_id(cursor) and event_id_time_ms(cursor) == int(at * 1000) + 1
    assert before < cursor <= after  # "before <cursor>" keeps what arrived up to ``at``


class _Batches:
    """The replay API as a replay job sees it: each batch waits for the test's go."""

    def __init__(self, dead: int) -> None:
        self.dead = dead
        self.asked: list[int] = []
        self.go = asyncio.Event()

    async def __call__(self, selection: dict[str, Any], size: int) -> int:
        self.asked.append(size)
        await self.go.wait()
        self.go.clear()
        done = min(size, self.dead)
        self.dead -= done
        return done


async def _step(batches: _Batches) -> None:
    batches.go.set()
    for _ in range(10):  # let the job take the answer and ask for its next batch
        await asyncio.sleep(0)


async def test_a_replay_job_shows_its_progress_batch_by_batch_and_ends() -> None:
    jobs = ReplayJobs(ManualClock(), batch_size=3)
    batches = _Batches(dead=7)
    job = jobs.start(("/console", None), {"states": ["dead"]}, 7, batches)
    seen = []
    for _ in range(3):
        await _step(batches)
        seen.append((job.replayed, job.state))
    assert seen == [(3, "running"), (6, "running"), (7, "done")]
    assert batches.asked == [3, 3, 1]  # never more than the count it started with
    # A job belongs to who started it.
    assert jobs.get(("/console", None), job.id) is job
    assert jobs.get(("/portal", "acme"), job.id) is None
    assert jobs.get(("/console", None), "made-up") is None


async def test_a_replay_job_ends_when_a_batch_comes_back_short_or_fails() -> None:
    jobs = ReplayJobs(ManualClock(), batch_size=5)
    batches = _Batches(dead=2)  # fewer than counted: replayed by someone else meanwhile
    job = jobs.start(("/portal", "acme"), {}, 9, batches)
    await _step(batches)
    assert (job.replayed, job.state, batches.asked) == (2, "done", [5])

    async def refused(selection: dict[str, Any], size: int) -> int:
        raise RuntimeError("store unavailable")

    failed = jobs.start(("/portal", "acme"), {}, 9, refused)
    for _ in range(5):
        await asyncio.sleep(0)
    assert (failed.state, failed.error) == ("failed", "store unavailable")
    assert failed.finished_at is not None


async def test_the_job_table_is_bounded_and_stopping_ends_running_jobs() -> None:
    jobs = ReplayJobs(ManualClock(), max_jobs=2)
    hung = _Batches(dead=5)
    running = jobs.start(("/console", None), {}, 5, hung)
    for _ in range(3):
        jobs.start(("/console", None), {}, 0, hung)  # nothing to do: done at once
        await asyncio.sleep(0)
    assert len(jobs) == 2 and jobs.get(("/console", None), running.id) is running
    await jobs.stop()
    assert running.state == "failed" and running.error == "the router stopped"
