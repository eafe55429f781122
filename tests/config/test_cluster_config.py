"""``[cluster]``: node identity, lease length, and the attempt timeout that must fit the lease."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

from hookrouter.config import parse_config
from hookrouter.errors import ConfigError

PG: dict[str, Any] = {"backend": "postgres", "postgres": {"dsn": "postgresql://h@127.0.0.1/db"}}


def config(**sections: Any) -> dict[str, Any]:
    return {"admin": {"token": "t" * 16}, **sections}


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(doc)
    return [str(issue) for issue in caught.value.issues]


def test_sqlite_runs_without_cluster_settings() -> None:
    assert parse_config(config()).cluster is None


def test_postgres_defaults_to_hostname_pid_and_a_ten_second_lease() -> None:
    cfg = parse_config(config(store=PG))
    assert cfg.cluster is not None
    assert cfg.cluster.node_id == f"{socket.gethostname()}-{os.getpid()}"
    assert cfg.cluster.lease_seconds == 10.0
    assert cfg.cluster.renew_seconds == pytest.approx(10 / 3)


def test_unset_delivery_timeout_shrinks_to_half_the_lease() -> None:
    """The 15 s single-node default cannot finish inside a 10 s lease: 5 s is used."""
    cfg = parse_config(config(store=PG))
    assert cfg.delivery.timeout_seconds == 5.0
    longer = parse_config(config(store=PG, cluster={"lease_seconds": 40}))
    assert longer.delivery.timeout_seconds == 15.0  # fits: left alone


def test_a_set_timeout_that_cannot_fit_the_lease_is_refused() -> None:
    found = problems(config(store=PG, delivery={"timeout_seconds": 15}))
    assert len(found) == 1
    assert "delivery.timeout_seconds" in found[0]
    assert "at most 5 s" in found[0] and "at least 30" in found[0]
    fits = parse_config(config(store=PG, delivery={"timeout_seconds": 5}))
    assert fits.delivery.timeout_seconds == 5.0


def test_bad_node_id_and_lease_are_reported_by_key() -> None:
    found = problems(
        config(store=PG, cluster={"node_id": "two words", "lease_seconds": 1, "leases": 3})
    )
    assert any(p.startswith("cluster.node_id") for p in found)
    assert any(p.startswith("cluster.lease_seconds") for p in found)
    assert any(p.startswith("cluster.leases") and "unknown key" in p for p in found)


def test_cluster_table_without_postgres_is_refused() -> None:
    found = problems(config(cluster={"node_id": "router-1"}))
    assert found and found[0].startswith("cluster") and 'backend = "postgres"' in found[0]
