"""``hookrouter replay``: bulk replay through a running router's admin API, with progress.

A dry run counts the matching dead/disabled deliveries; then batches of
``--batch`` are replayed until fewer come back (or the counted total is
reached, so deliveries that die again meanwhile are not replayed twice in one
run). Times accept Unix seconds or ISO 8601 (``2024-05-01T12:00:00Z``).
"""

from __future__ import annotations

import argparse
import http.client
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import orjson
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hookrouter.config import Config
from hookrouter.errors import HookrouterError


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
    parser.add_argument("--url", default=None, help="router base URL (default: [server] listen)")


def selection(args: argparse.Namespace) -> dict[str, Any]:
    doc: dict[str, Any] = {"states": args.state or ["dead"]}
    for key in ("tenant", "endpoint", "event", "since", "until"):
        value = getattr(args, key)
        if value is not None:
            doc[key] = value
    return doc


class AdminClient:
    """The few admin calls replay needs, over one keep-alive connection."""

    def __init__(self, base_url: str, token: str) -> None:
        parts = urlsplit(base_url)
        self._conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80)
        self._token = token

    def post(self, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        headers = {"authorization": f"Bearer {self._token}", "content-type": "application/json"}
        try:
            self._conn.request("POST", "/admin/v1" + path, orjson.dumps(doc), headers)
            response = self._conn.getresponse()
            data = response.read()
        except OSError as exc:
            raise HookrouterError(f"cannot reach the router's admin API: {exc}") from exc
        body: dict[str, Any] = orjson.loads(data) if data else {}
        if response.status != 200:
            raise HookrouterError(f"admin API answered {response.status}: {body.get('message')}")
        return body

    def close(self) -> None:
        self._conn.close()


def run(config: Config, args: argparse.Namespace) -> int:
    """Replay what ``args`` selects; prints a progress bar; returns how many were replayed."""
    host = config.server.host if config.server.host not in ("0.0.0.0", "::") else "127.0.0.1"
    client = AdminClient(args.url or f"http://{host}:{config.server.port}", config.admin.token)
    doc = selection(args)
    try:
        matched = int(client.post("/replay?dry_run=true", doc)["matched"])
        if args.dry_run or matched == 0:
            print(f"{matched} deliveries match")
            return 0
        columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        done = 0
        with Progress(*columns) as progress:
            task = progress.add_task("replay", total=matched)
            while done < matched:
                batch = min(args.batch, matched - done)
                replayed = int(client.post("/replay", {**doc, "limit": batch})["replayed"])
                done += replayed
                progress.update(task, completed=done)
                if replayed < batch:
                    break
        print(f"replayed {done} deliveries")
        return done
    finally:
        client.close()


__all__ = ["AdminClient", "add_arguments", "parse_time", "run", "selection"]
