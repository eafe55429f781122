"""Which partitions a node should take and release: pure arithmetic over one snapshot.

Every node runs ``plan`` on what it read from the ``nodes`` and
``partitions`` tables in its lease turn (``leases``). The rules:

* Quotas: ``partitions`` divided over the live nodes in node-id order; the
  first ``partitions % nodes`` get one more. Every node computes the same
  quotas from the same snapshot, and they sum to ``partitions``.
* Take: a node under its quota takes free partitions (no live lease) up to
  it. Nodes prefer different partitions (a per-node hash order, rendezvous
  style), so nodes racing for the free ones after a death rarely collide;
  the database decides the collisions that remain (the take is conditional).
* Release: a node over its quota gives back the excess (quotas sum to the
  partitions, so live nodes under their quota lack at least as many). It
  gives back the partitions it prefers least, so a node that joins and
  leaves again moves the same partitions each time.

Nobody takes a live lease: a node that joins waits for others to release,
and a dead node's partitions become free when its leases expire.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plan:
    """What one node does this turn."""

    take: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


def quotas(nodes: Collection[str], partitions: int) -> dict[str, int]:
    """Each live node's fair number of partitions (they sum to ``partitions``)."""
    ordered = sorted(set(nodes))
    if not ordered:
        return {}
    base, extra = divmod(partitions, len(ordered))
    return {node: base + (1 if index < extra else 0) for index, node in enumerate(ordered)}


def preference(node: str, partition: int) -> int:
    """How much ``node`` wants ``partition``: a hash, different per node, stable everywhere."""
    digest = hashlib.blake2b(f"{node}/{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def plan(
    me: str,
    held: Collection[int],
    live_nodes: Collection[str],
    holders: Mapping[int, str],
    partitions: int,
) -> Plan:
    """This node's moves, given what it holds and the snapshot.

    ``held``: the partitions this node holds at its own epochs. ``holders``:
    partition -> owner of every live lease (this node's own included).
    ``live_nodes`` need not include ``me``; it is added.
    """
    share = quotas({*live_nodes, me}, partitions)
    mine = set(held)
    quota = share[me]
    if len(mine) > quota:
        excess = len(mine) - quota
        least = sorted(mine, key=lambda p: (preference(me, p), p))[:excess]
        return Plan(release=tuple(sorted(least)))
    wanted = quota - len(mine)
    if wanted <= 0:
        return Plan()
    free = [p for p in range(partitions) if p not in holders and p not in mine]
    best = sorted(free, key=lambda p: (-preference(me, p), p))[:wanted]
    return Plan(take=tuple(sorted(best)))


__all__ = ["Plan", "plan", "preference", "quotas"]
