"""bench.pyframes: the call sites it names, the router command it wraps, its report."""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import pytest
from bench.pyframes import CallSite, call_site, read_counts, report, router_argv


class _Pair(NamedTuple):
    a: int
    b: int


@dataclass
class _Box:
    value: int


def _plain(x: int) -> int:
    return x + 1


def _calls_of(fn: Any) -> Counter[CallSite]:
    seen: Counter[CallSite] = Counter()

    def count(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            seen[call_site(frame)] += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_generated_constructors_are_named_by_their_class() -> None:
    seen = _calls_of(lambda: (_Pair(1, 2), _Box(3), _plain(4)))
    names = {name for (_, _, name) in seen}
    assert f"__new__ of {__name__}._Pair" in names  # the NamedTuple's generated __new__
    assert f"__init__ of {__name__}._Box" in names  # the dataclass's generated __init__
    plain = [site for site in seen if site[2] == "_plain"]
    assert plain and plain[0][0].endswith("test_pyframes.py") and seen[plain[0]] == 1


def test_the_router_arguments_start_at_serve() -> None:
    script = ["/venv/bin/hookrouter", "serve", "--config", "r.toml"]
    assert router_argv(script) == ["serve", "--config", "r.toml"]
    module = ["/usr/bin/python3", "-m", "hookrouter", "serve", "--config", "r.toml"]
    assert router_argv(module) == ["serve", "--config", "r.toml"]
    with pytest.raises(SystemExit, match="not a 'hookrouter serve'"):
        router_argv(["/venv/bin/hookrouter", "doctor"])


def test_report_divides_by_the_events_and_keeps_the_order(tmp_path: Path) -> None:
    tsv = tmp_path / "calls.tsv"
    tsv.write_text(
        "3000\thookrouter/store/sqlite.py\t292\tappend_then\n150\tpathlib.py\t536\t__str__\n"
    )
    rows = read_counts(tsv)
    assert rows == [
        (3000, "hookrouter/store/sqlite.py:292 append_then"),
        (150, "pathlib.py:536 __str__"),
    ]
    text = report(rows, events=3000, top=1)
    assert "3,150 for 3,000 events (1.05 per event)" in text
    assert "1.000     3,000  hookrouter/store/sqlite.py:292 append_then" in text
    assert "__str__" not in text  # beyond --top
