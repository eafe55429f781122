"""The backend table and ``[store.<backend>]``: options checked by the backend, old keys accepted.

``test_dedup_tiers_defaults_and_bounds`` moved here from tests/config (its
assertions unchanged, read through ``store.backends.choose``): the dedup
tiers are the SQLite backend's own options since the store became contracts
plus backend packages.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hookrouter.config import parse_config
from hookrouter.errors import ConfigError, StoreError
from hookrouter.store import BACKENDS, open_configured
from hookrouter.store.backends import Choice, backup, choose
from hookrouter.store.sqlite import SqliteStore
from hookrouter.store.sqlite.backend import SqliteOptions
from hookrouter.store.sqlite.dedup_tiers import TierPolicy


def minimal(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"path": "./data"},
        "admin": {"token": "admin-token-123"},
    }
    doc.update(overrides)
    return doc


def chosen(doc: dict[str, object]) -> Choice:
    return choose(parse_config(doc).store)


def options(doc: dict[str, object]) -> SqliteOptions:
    found = chosen(doc).options
    assert isinstance(found, SqliteOptions)
    return found


def issues_of(doc: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        chosen(doc)
    return [str(issue) for issue in info.value.issues]


def warnings_of(doc: dict[str, object]) -> list[str]:
    return [str(w) for w in chosen(doc).warnings]


def test_dedup_tiers_defaults_and_bounds() -> None:
    assert options(minimal()).dedup == TierPolicy()
    tuned = minimal(store={"path": "./data", "dedup": {"hot_keys": 65536, "fanout": 4}})
    assert options(tuned).dedup == TierPolicy(hot_limit=65536, fanout=4)
    bad = minimal(store={"path": "./data", "dedup": {"hot_keys": 10, "fanout": 1, "hot_kyes": 5}})
    issues = issues_of(bad)
    assert any(i.startswith("store.dedup.hot_keys: must be at least 1024") for i in issues), issues
    assert any(i.startswith("store.dedup.fanout: must be at least 2") for i in issues), issues
    assert any("store.dedup.hot_kyes" in i for i in issues), issues


def test_the_backends_own_table_with_its_key_paths() -> None:
    assert options(minimal()) == SqliteOptions(grouping="loop", dedup=TierPolicy())
    own = {"grouping": "thread", "dedup": {"hot_keys": 4096, "fanout": 3}}
    doc = minimal(store={"path": "./data", "sqlite": own})
    assert options(doc) == SqliteOptions("thread", TierPolicy(hot_limit=4096, fanout=3))
    assert warnings_of(doc) == []
    bad = {"grouping": "fibre", "dedup": {"hot_keys": 10}, "colour": "blue"}
    assert sorted(issues_of(minimal(store={"path": "./data", "sqlite": bad}))) == [
        "store.sqlite.colour: unknown key",
        "store.sqlite.dedup.hot_keys: must be at least 1024, got 10",
        "store.sqlite.grouping: unknown value 'fibre' (expected one of 'loop', 'thread')",
    ]
    assert issues_of(minimal(store={"path": "./data", "sqlite": 3})) == [
        "store.sqlite: must be a table, not a number"
    ]


def test_the_partition_bucket_is_a_duration_within_bounds() -> None:
    def sqlite(**own: object) -> dict[str, object]:
        return minimal(store={"path": "./data", "sqlite": own})

    assert options(minimal()).bucket_seconds == 3600  # not set: one-hour partitions
    assert options(sqlite(bucket="off")).bucket_seconds is None  # the writer never switches
    assert options(sqlite(bucket="1d")).bucket_seconds == 86400
    assert options(sqlite(bucket="90s")).bucket_seconds == 90
    assert issues_of(sqlite(bucket="30s")) == [
        "store.sqlite.bucket: must be whole seconds and at least one minute, got '30s'"
    ]
    assert issues_of(sqlite(bucket="1500ms")) == [
        "store.sqlite.bucket: must be whole seconds and at least one minute, got '1500ms'"
    ]
    assert issues_of(sqlite(bucket="8d")) == [
        "store.sqlite.bucket: duration '8d' is longer than 7 days (or \"off\" for a single file)"
    ]
    assert issues_of(sqlite(bucket=6)) == [
        'store.sqlite.bucket: must be a duration string such as "1h" (or "off" for a single file)'
    ]
    for junk in ("soon", "Off", "none", ""):
        (issue,) = issues_of(sqlite(bucket=junk))
        assert issue.startswith("store.sqlite.bucket: invalid duration"), issue
        assert issue.endswith('(or "off" for a single file)'), issue


def test_old_keys_under_store_still_work_with_a_warning_naming_the_new_key() -> None:
    doc = minimal(store={"path": "./data", "grouping": "thread", "dedup": {"fanout": 4}})
    assert options(doc) == SqliteOptions("thread", TierPolicy(fanout=4))
    assert warnings_of(doc) == [
        "store.grouping: is deprecated: move it to store.sqlite.grouping",
        "store.dedup: is deprecated: move it to store.sqlite.dedup",
    ]
    both = minimal(store={"path": "./data", "grouping": "thread", "sqlite": {"grouping": "loop"}})
    assert options(both).grouping == "loop"
    assert warnings_of(both) == ["store.grouping: is ignored: store.sqlite.grouping is set"]
    assert issues_of(minimal(store={"path": "./data", "colour": "blue"})) == [
        "store.colour: unknown key"
    ]


def test_unknown_backend_is_named_with_the_known_ones() -> None:
    assert issues_of(minimal(store={"path": "./data", "backend": "cassandra"})) == [
        "store.backend: unknown value 'cassandra' (expected one of 'sqlite', 'postgres')"
    ]
    assert list(BACKENDS) == ["sqlite", "postgres"]


def test_open_configured_passes_the_backends_options(tmp_path: Path) -> None:
    doc = minimal(store={"path": str(tmp_path / "s"), "sqlite": {"grouping": "thread"}})
    store = open_configured(parse_config(doc).store)
    assert isinstance(store, SqliteStore)
    assert repr(store).startswith("SqliteStore(")
    assert store.stats() == {"state": "new"}
    assert store.counters() is None  # not open yet
    assert store._grouping == "thread"


def test_backup_through_the_table_and_a_backend_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = parse_config(minimal(store={"path": str(tmp_path / "none")})).store
    with pytest.raises(StoreError, match="no hookrouter store at"):
        backup(settings, tmp_path / "copy.db")

    class NoBackup:
        name = "sqlite"
        backup = None

    monkeypatch.setattr("hookrouter.store.backends.backend", lambda name: NoBackup())
    with pytest.raises(StoreError) as info:
        backup(settings, tmp_path / "copy.db")
    assert info.value.message == (
        "the 'sqlite' store backend has no backup command; use the backing service's own tools"
    )


def _check_config(tmp_path: Path, store: str) -> Any:
    path = tmp_path / "c.toml"
    path.write_text(f'[admin]\ntoken = "admin-token-123"\n[store]\npath = "./d"\n{store}')
    return subprocess.run(
        [sys.executable, "-m", "hookrouter", "check-config", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_check_config_reports_bad_store_options_and_deprecations(tmp_path: Path) -> None:
    bad = _check_config(tmp_path, '[store.sqlite]\ngrouping = "fibre"\n')
    assert bad.returncode == 2
    assert "store.sqlite.grouping: unknown value 'fibre'" in bad.stderr
    old = _check_config(tmp_path, 'grouping = "thread"\n')
    assert old.returncode == 0, old.stderr
    assert "warning: store.grouping: is deprecated: move it to store.sqlite.grouping" in old.stdout
