"""The report writer: targets summary, tables, slots, and results that survive a round trip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from bench.api import Figure, Scenario, Section, Table, Target
from bench.systems import REPO

from bench import machine, report


def _section(tmp_path: Path) -> Section:
    return Section(
        text=["Intro paragraph."],
        tables=[Table("Peak", ["system", "req/s"], [["nginx", "80,000"], ["a|b", 1]], "a note")],
        figures=[Figure(tmp_path / "img" / "x.png", "A caption")],
        targets=[
            Target("ingest vs nginx", ">= 0.30x", "0.25x", False, "bottleneck: fsync"),
            Target("p99", "<= 10 ms", "4 ms", True),
        ],
        data={"k": 1},
    )


def _result(**fields: object) -> dict[str, object]:
    """A saved scenario result of a full, finished run (``fields`` override its entries)."""
    res: dict[str, object] = {
        "scenario": "demo",
        "title": "1. Demo",
        "order": 10,
        "status": "ok",
        "quick": False,
        "runs": 3,
        "date": "2026-01-01 00:00 UTC",
        "duration_s": 12.0,
        "section": None,
    }
    res.update(fields)
    return res


def _scenario(name: str = "demo", order: int = 10) -> Scenario:
    return Scenario(name=name, title=f"{order // 10}. Demo", order=order, run=lambda ctx: Section())


def test_markdown_has_targets_machine_tables_figures_and_slots(tmp_path: Path) -> None:
    section = _section(tmp_path)
    results = [_result(section=report.section_to_json(section))]
    machine = {
        "cpu": "TestCPU",
        "cores": 2,
        "kernel": "6.1",
        "python": "3.11",
        "packages": {"uvloop": "0.19"},
        "tools": {"wrk": "4.1"},
        "commit": "abc",
    }
    out = tmp_path / "docs" / "benchmarks.md"
    text = report.render(results, machine, out, [_scenario()])
    assert (
        "| 1. Demo | ingest vs nginx | >= 0.30x | 0.25x | **MISSED** | bottleneck: fsync |" in text
    )
    assert "**met**" in text
    assert "TestCPU" in text and "uvloop 0.19" in text
    assert "| a\\|b | 1 |" in text  # pipes inside cells are escaped
    assert "![A caption](../img/x.png)" in text
    assert "3 run(s) per figure" in text
    assert "slot for bench/scenarios/ratelimit.py" in text
    assert text.index("## 1. Demo") < text.index("## 5. Rate limiter modes")


def test_results_round_trip_and_unrun_scenarios_are_listed(tmp_path: Path) -> None:
    section = _section(tmp_path)
    payload = {
        "scenario": "demo",
        "title": "1. Demo",
        "order": 10,
        "status": "ok",
        "section": report.section_to_json(section),
    }
    report.save(tmp_path / "results", _scenario(), payload)
    loaded = report.load_all(tmp_path / "results")
    assert report.section_from_json(loaded[0]["section"]) == section
    text = report.render([], {}, tmp_path / "b.md", [_scenario("later", 20)])
    assert "## 2. Demo" in text and "not run yet" in text
    assert "No target has been measured yet" in text


def test_failed_and_quick_runs_say_so(tmp_path: Path) -> None:
    res = _result(status="failed", reason="RuntimeError: boom", quick=True, runs=1)
    text = report.render_section(res, tmp_path)
    assert "quick smoke run" in text and "failed" in text and "boom" in text


def test_bottlenecks_named_by_a_profile_appear_under_the_targets(tmp_path: Path) -> None:
    section = Section(data={"bottlenecks": ["ingest: store takes 54 % of samples"]})
    res = {
        "scenario": "profile",
        "title": "7. Profile",
        "order": 70,
        "status": "ok",
        "section": report.section_to_json(section),
    }
    text = report.render([res], {}, tmp_path / "b.md", [])
    assert "- ingest: store takes 54 % of samples (section 7. Profile)." in text
    assert text.index("store takes") < text.index("## Machine")


def test_section_headers_give_the_host_speed_at_start_and_end_when_measured(
    tmp_path: Path,
) -> None:
    res = _result()
    assert "host speed" not in report.render_section(res, tmp_path)  # older results
    timed = _result(host_speed_ms=38.9, host_speed_end_ms=51.7)
    assert "host speed 38.9 / 51.7 ms" in report.render_section(timed, tmp_path)


def test_figures_in_the_checkout_are_stored_relative_so_other_clones_render_them() -> None:
    figure = Path(report.__file__).resolve().parent.parent / "docs" / "img" / "x.png"
    section = Section(text=[], tables=[], figures=[Figure(figure, "x")], targets=[], notes=[])
    stored = report.section_to_json(section)
    assert stored["figures"][0]["path"] == "docs/img/x.png"
    assert report.section_from_json(stored).figures[0].path == figure


def test_a_section_names_the_host_and_checkout_its_run_recorded(tmp_path: Path) -> None:
    # Sections are measured on different hosts and commits and rendered later,
    # elsewhere: the Machine block cannot say where each one ran.
    out = tmp_path / "docs" / "benchmarks.md"
    recorded = _result(host="AMD EPYC, 2 cores", commit="f64ef47")
    text = report.render_section(recorded, out.parent)
    assert "full run on AMD EPYC, 2 cores, checkout f64ef47, 3 run(s)" in text
    older = report.render_section(_result(), out.parent)  # saved before the fields existed
    assert "_2026-01-01 00:00 UTC, full run, 3 run(s) per figure" in older


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout")
def test_the_host_and_checkout_a_run_records() -> None:
    assert machine.host_label().endswith(f", {os.cpu_count()} cores")
    commit = machine.checkout(REPO)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert commit.startswith(head)
