"""``hookrouter backup`` against a live router, and a router restored from the copy."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import tomli_w
from tests.e2e.conftest import stripe_event
from tests.support.router import RouterProcess, base_config

from hookrouter.store.sqlite.backup import partitions_dir


def backup(config: Path, dest: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hookrouter", "backup", "--config", str(config), "--to", str(dest),
         *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def post(router: RouterProcess, prefix: str, n: int) -> list[str]:
    ids = []
    for i in range(n):
        status, doc = router.post("acme-stripe", *stripe_event(f"{prefix}_{i}"))
        assert status == 200, doc
        ids.append(doc["id"])
    return ids


def test_a_backup_taken_while_serving_restores_every_event_acked_before_it(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "copy.db"
    with RouterProcess(tmp_path, base_config(tmp_path / "data", 0)) as router:
        before = post(router, "evt_before", 200)
        # Ingest keeps committing while the copy is taken.
        stop = threading.Event()
        during: list[str] = []

        def keep_posting() -> None:
            for k in range(1000):
                if stop.is_set():
                    return
                during.extend(post(router, f"evt_during_{k}", 5))

        writer = threading.Thread(target=keep_posting)
        writer.start()
        try:
            result = backup(router.config_path, dest)
        finally:
            stop.set()
            writer.join(60)
        assert result.returncode == 0, result.stderr
        assert "events" in result.stdout and "checked" in result.stdout
        assert during, "the backup must overlap with ingest"

        again = backup(router.config_path, dest)
        assert again.returncode == 1 and "already exists" in again.stderr
        assert backup(router.config_path, dest, "--force").returncode == 0

    with sqlite3.connect(dest) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert not Path(f"{dest}-wal").exists()

    restored = tmp_path / "restored"
    restored.mkdir()
    # The restore of docs/operations.md: the copy as events.db, its partitions beside it.
    (restored / "events.db").write_bytes(dest.read_bytes())
    for copy in partitions_dir(dest).iterdir():
        (restored / copy.name).write_bytes(copy.read_bytes())
    with RouterProcess(tmp_path, base_config(restored, 0)) as router:
        for event_id in before:
            status, record = router.admin("GET", f"/events/{event_id}")
            assert status == 200 and record["id"] == event_id
        # The copy is a working store: a duplicate of a restored event is still one.
        status, doc = router.post("acme-stripe", *stripe_event("evt_before_0"))
        assert status == 200 and doc == {"id": before[0], "duplicate": True}


def test_backup_without_a_store_says_so(tmp_path: Path) -> None:
    config_file = tmp_path / "router.toml"
    config_file.write_text(tomli_w.dumps(base_config(tmp_path / "nothing-here", 0)))
    result = backup(config_file, tmp_path / "copy.db")
    assert result.returncode == 1
    assert "no hookrouter store at" in result.stderr
    assert not (tmp_path / "copy.db").exists()
