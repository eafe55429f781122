"""Scenario plug-ins are found by module, ordered, and slots are reported until filled."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")  # the scenarios draw figures (a bench extra)

from bench.api import Scenario
from bench.scenarios import discover

from bench import report


def test_the_issue_scenarios_are_registered_in_order() -> None:
    scenarios, broken = discover()
    assert not broken, broken
    names = [s.name for s in scenarios]
    for name in ("ingest", "e2e", "isolation", "flood"):
        assert name in names
    assert [s.order for s in scenarios] == sorted(s.order for s in scenarios)
    assert all(isinstance(s, Scenario) and callable(s.run) for s in scenarios)
    assert set(report.KNOWN_SLOTS) == {"ratelimit", "engines"}
