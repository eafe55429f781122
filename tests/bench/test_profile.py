"""py-spy collapsed stacks summarised by area of the code and by self time."""

from __future__ import annotations

from pathlib import Path

from bench.profile import area_of, summarise


def test_shares_by_area_and_by_leaf_function(tmp_path: Path) -> None:
    raw = tmp_path / "p.raw.txt"
    raw.write_text(
        "run (asyncio/base_events.py:1) ;_commit (hookrouter/store/sqlite_writer.py:10) 60\n"
        "run (asyncio/base_events.py:1);verify (hookrouter/verify/stripe.py:70) 30\n"
        "run (asyncio/base_events.py:1) 10\n"
        "garbage line\n"
    )
    areas, leaves, total = summarise(raw, top=2)
    assert total == 100
    assert areas[0] == ["store (SQLite, group commit)", "60.0 %"]
    assert ["signature verification", "30.0 %"] in areas
    assert ["event loop (asyncio/uvloop)", "10.0 %"] in areas
    assert leaves == [
        ["`_commit (hookrouter/store/sqlite_writer.py:10)`", "60.0 %"],
        ["`verify (hookrouter/verify/stripe.py:70)`", "30.0 %"],
    ]
    assert summarise(tmp_path / "missing.txt") == ([], [], 0)


def test_area_of_unknown_frames() -> None:
    assert area_of("parse (hookrouter/core/http1.py:5)") == "HTTP/1.1 core (httptools)"
    assert area_of("post (hookrouter/core/http1client.py:5)") == "delivery HTTP client"
    assert area_of("<module> (<string>:1)") == "other (stdlib, interpreter)"
