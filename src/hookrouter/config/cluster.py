"""The ``[cluster]`` section: who this node is and how long its partition leases last.

Cluster mode is the PostgreSQL store (``[store] backend = "postgres"``):
every node leases tenant partitions and delivers only the tenants it holds.

The timing rule, stated once here and in docs/cluster.md: a lease lasts
``lease_seconds``; the node renews it every third of that, and starts an
attempt only while its lease has at least ``timeout_seconds +
start_margin`` left (``start_margin`` is a sixth of the lease). So that
attempts can still start just before a renewal (two thirds of the lease
left), an attempt must fit in half the lease: ``[delivery] timeout_seconds
<= lease_seconds / 2``. When the file sets no delivery timeout, cluster mode
uses half the lease (5 s for the default 10 s lease) instead of the 15 s
single-node default; a timeout the file sets that does not fit is refused.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from dataclasses import dataclass
from typing import Final

from hookrouter.config.delivery import DeliverySettings
from hookrouter.config.reader import TableReader
from hookrouter.errors import ConfigIssue

DEFAULT_LEASE_SECONDS: Final = 10.0
# Below 2 s a lease renews every ~0.6 s: the database round trip and loop
# delays eat the margin. Above 10 minutes a dead node's tenants wait too long.
MIN_LEASE_SECONDS: Final = 2.0
MAX_LEASE_SECONDS: Final = 600.0
# node_id goes into application_name (63 bytes) and log lines: short and plain.
_NODE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,62}")
CLUSTER_BACKEND: Final = "postgres"


def default_node_id() -> str:
    """Hostname and process id: unique per process, readable in ``pg_stat_activity``."""
    return f"{socket.gethostname()}-{os.getpid()}"[:63]


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """``[cluster]``, validated; the timing derived from ``lease_seconds``."""

    node_id: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS

    @property
    def renew_seconds(self) -> float:
        """How often the node renews its leases (and takes free partitions)."""
        return self.lease_seconds / 3

    @property
    def start_margin_seconds(self) -> float:
        """Lease time kept in reserve beyond an attempt's own deadline."""
        return self.lease_seconds / 6

    @property
    def max_attempt_seconds(self) -> float:
        """The longest attempt deadline the lease allows (module docstring)."""
        return self.lease_seconds / 2


def parse_cluster(
    r: TableReader | None,
    issues: list[ConfigIssue],
    backend: str,
    delivery: DeliverySettings,
    *,
    timeout_set: bool,
) -> tuple[ClusterSettings | None, DeliverySettings]:
    """``[cluster]`` and the delivery settings cluster mode runs with.

    None when the store is not PostgreSQL (a ``[cluster]`` table then is a
    problem: it would silently do nothing). ``timeout_set``: the file named
    ``[delivery] timeout_seconds`` itself.
    """
    if backend != CLUSTER_BACKEND:
        if r is not None:
            r.problem("", f'needs [store] backend = "{CLUSTER_BACKEND}" (cluster mode)')
        return None, delivery
    table = r or TableReader({}, "cluster", issues)
    node_id = table.string("node_id") or default_node_id()
    if not _NODE_ID.fullmatch(node_id):
        table.problem(
            "node_id", "must be 1-63 letters, digits or . _ : @ - (starting with a letter or digit)"
        )
    lease = table.number(
        "lease_seconds",
        DEFAULT_LEASE_SECONDS,
        minimum=MIN_LEASE_SECONDS,
        maximum=MAX_LEASE_SECONDS,
    )
    table.finish()
    settings = ClusterSettings(node_id=node_id, lease_seconds=lease)
    limit = settings.max_attempt_seconds
    if delivery.timeout_seconds <= limit:
        return settings, delivery
    if not timeout_set:  # the single-node default does not fit: use the longest that does
        return settings, dataclasses.replace(delivery, timeout_seconds=limit)
    issues.append(
        ConfigIssue(
            "delivery.timeout_seconds",
            f"= {delivery.timeout_seconds:g} s cannot finish inside the {lease:g} s partition "
            f"lease: in cluster mode an attempt must fit in half the lease (at most {limit:g} s)."
            f" Lower it, or raise [cluster] lease_seconds to at least "
            f"{2 * delivery.timeout_seconds:g}",
        )
    )
    return settings, delivery


__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "ClusterSettings",
    "default_node_id",
    "parse_cluster",
]
