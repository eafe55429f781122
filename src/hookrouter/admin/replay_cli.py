"""``hookrouter replay``: bulk replay through a running router's admin API, with progress.

A dry run counts the matching dead/disabled deliveries; then batches of
``--batch`` are replayed until fewer come back (or the counted total is
reached, so deliveries that die again meanwhile are not replayed twice in one
run). Times accept Unix seconds or ISO 8601 (``2024-05-01T12:00:00Z``).
The calls go through ``hookrouter.client`` (``cli`` hands ``run`` a client:
this layer may not import that package above it).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hookrouter.admin import schemas


def parse_time(text: str) -> float:
    """Unix seconds from ``1700000000`` or ``2024-05-01T12:00:00Z``."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not Unix seconds or ISO 8601: {text!r}") from exc
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give a time zone (e.g. Z) in {text!r}")
    return when.timestamp()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", required=True)
    parser.add_argument("--tenant")
    parser.add_argument("--endpoint")
    parser.add_argument("--event", help="one event id")
    parser.add_argument(
        "--state",
        action="append",
        choices=("dead", "disabled"),
        help="delivery states to replay (repeatable; default dead)",
    )
    parser.add_argument("--since", type=parse_time, help="events that arrived at or after")
    parser.add_argument("--until", type=parse_time, help="events that arrived before")
    parser.add_argument("--batch", type=int, default=1000, help="deliveries per request")
    parser.add_argument("--dry-run", action="store_true", help="only count what would replay")
    parser.add_argument(
        "--url", default=None, help="router base URL (default: [admin] or [server] listen)"
    )


def selection(args: argparse.Namespace) -> dict[str, Any]:
    doc: dict[str, Any] = {"states": args.state or ["dead"]}
    for key in ("tenant", "endpoint", "event", "since", "until"):
        value = getattr(args, key)
        if value is not None:
            doc[key] = value
    return doc


class Replayer(Protocol):
    """The one call replay needs (``hookrouter.client.Client.replay``)."""

    def replay(
        self, body: Mapping[str, Any], *, dry_run: bool | None = None
    ) -> schemas.ReplayResult: ...


def run(client: Replayer, args: argparse.Namespace) -> int:
    """Replay what ``args`` selects; prints a progress bar; returns how many were replayed."""
    doc = selection(args)
    matched = client.replay(doc, dry_run=True).matched or 0
    if args.dry_run or matched == 0:
        print(f"{matched} deliveries match")
        return 0
    columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    done = 0
    with Progress(*columns) as progress:
        task = progress.add_task("replay", total=matched)
        while done < matched:
            batch = min(args.batch, matched - done)
            replayed = client.replay({**doc, "limit": batch}).replayed or 0
            done += replayed
            progress.update(task, completed=done)
            if replayed < batch:
                break
    print(f"replayed {done} deliveries")
    return done


__all__ = ["Replayer", "add_arguments", "parse_time", "run", "selection"]
