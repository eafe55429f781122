"""``[store.postgres]``: the options the PostgreSQL backend reads, checked by key path."""

from __future__ import annotations

import pytest

from hookrouter.config import parse_config
from hookrouter.errors import ConfigError
from hookrouter.store import open_configured
from hookrouter.store.backends import choose
from hookrouter.store.postgres import PostgresStore
from hookrouter.store.postgres.backend import PostgresOptions

DSN = "postgresql://hookrouter@db1,db2/hookrouter?target_session_attrs=read-write"


def doc(postgres: object, **store: object) -> dict[str, object]:
    return {
        "server": {"listen": "127.0.0.1:0"},
        "store": {"path": "./data", "backend": "postgres", "postgres": postgres, **store},
        "admin": {"token": "admin-token-123"},
    }


def issues_of(d: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        choose(parse_config(d).store)
    return [str(issue) for issue in info.value.issues]


def test_the_contracts_keys_and_their_defaults() -> None:
    chosen = choose(parse_config(doc({"dsn": DSN})).store)
    assert chosen.options == PostgresOptions(dsn=DSN, pool_size=8, partitions=256)
    tuned = {"dsn": DSN, "pool_size": 16, "partitions": 64, "schema": "hr"}
    assert choose(parse_config(doc(tuned)).store).options == PostgresOptions(DSN, 16, 64, "hr")


def test_the_dsn_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HR_TEST_DSN", DSN)
    chosen = choose(parse_config(doc({"dsn": "env:HR_TEST_DSN"})).store)
    assert isinstance(chosen.options, PostgresOptions) and chosen.options.dsn == DSN


def test_bad_options_are_reported_by_key_path() -> None:
    assert issues_of(doc({})) == ["store.postgres.dsn: is required"]
    assert issues_of(doc({"dsn": "host=db1", "pool_size": 1, "partitions": 0, "colour": 1})) == [
        "store.postgres.pool_size: must be at least 2, got 1",
        "store.postgres.partitions: must be at least 1, got 0",
        "store.postgres.dsn: must be a postgresql:// URI",
        "store.postgres.colour: unknown key",
    ]
    assert issues_of(doc({"dsn": DSN}, grouping="loop")) == ["store.grouping: unknown key"]


def test_another_backends_table_may_stay_in_the_file() -> None:
    chosen = choose(parse_config(doc({"dsn": DSN}, sqlite={"grouping": "thread"})).store)
    assert isinstance(chosen.options, PostgresOptions)


def test_open_configured_builds_an_unopened_store() -> None:
    store = open_configured(parse_config(doc({"dsn": DSN, "pool_size": 4})).store)
    assert isinstance(store, PostgresStore)
    assert store.stats() == {"state": "new"}
    assert store.counters() is None
    assert store.delivery_ledger() is None
    assert "state=new" in repr(store)
