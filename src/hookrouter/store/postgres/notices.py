"""Work notices: what a commit or a replay tells the owners of the partitions it wrote.

A notice is ``<node> <lowest event id> <partitions>`` (the watermark;
``*`` for every partition) and, when it fits, a fourth field naming the
lanes with new pending deliveries: ``<partition>/<tenant>/<endpoint>/<count>/
<lowest event id>``, joined by ``,``. An owner queues named lanes as they
are; for a watermark alone it asks the database which lanes have pending
work from that id on (``PENDING_SINCE``, one query per notice on every
node that owns a partition named). PostgreSQL refuses a payload of 8000
bytes or more, so a notice whose lanes would not fit is sent as the
watermark alone.

Names cannot hold a space, ``/`` or ``,`` (``ids.is_valid_name``); a notice
whose lanes do not parse is read as its watermark, so a stranger name costs
a query, never a lost lane.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

# PostgreSQL's limit: a NOTIFY payload must be shorter than 8000 bytes.
PAYLOAD_LIMIT: Final = 8000
# A watermark names at most this many partitions ("*" past it: all), so it alone
# stays far below the payload limit.
MAX_PARTITIONS: Final = 1000


class Lane(NamedTuple):
    """One endpoint's new pending deliveries, as a notice names them."""

    partition: int
    tenant_id: str
    endpoint_id: str
    pending: int  # how many
    oldest: str  # the lowest event id among them


@dataclass(frozen=True, slots=True)
class WorkNotice:
    node: str
    since: str  # the lowest event id written
    partitions: tuple[int, ...] | None  # None: every partition
    lanes: tuple[Lane, ...] | None  # None: not named (ask the database)


def encode(
    node: str,
    partitions: Sequence[int],
    tenants: Sequence[str],
    endpoints: Sequence[str],
    events: Sequence[str],
) -> str | None:
    """The notice for deliveries given column by column; None when there are none."""
    if not events:
        return None
    where: dict[tuple[str, str], int] = {}  # lane -> its partition
    counts: dict[tuple[str, str], int] = {}
    oldest: dict[tuple[str, str], str] = {}
    for part, tenant, endpoint, event in zip(partitions, tenants, endpoints, events, strict=True):
        lane = (tenant, endpoint)
        seen = oldest.get(lane)
        if seen is None:
            where[lane], counts[lane], oldest[lane] = part, 1, event
        else:
            counts[lane] += 1
            if event < seen:
                oldest[lane] = event
    watermark = _watermark(node, min(events), sorted(set(partitions)))
    named = ",".join(f"{p}/{t}/{e}/{counts[t, e]}/{oldest[t, e]}" for (t, e), p in where.items())
    payload = f"{watermark} {named}"
    return payload if len(payload.encode()) < PAYLOAD_LIMIT else watermark


def merged(lanes: Sequence[Lane]) -> list[Lane]:
    """Lanes of several notices, one per (tenant, endpoint): counts summed, the oldest kept."""
    found: dict[tuple[str, str], Lane] = {}
    for lane in lanes:
        key = (lane.tenant_id, lane.endpoint_id)
        seen = found.get(key)
        found[key] = (
            lane
            if seen is None
            else seen._replace(
                pending=seen.pending + lane.pending, oldest=min(seen.oldest, lane.oldest)
            )
        )
    return list(found.values())


def _watermark(node: str, since: str, partitions: Sequence[int]) -> str:
    named = ",".join(map(str, partitions)) if len(partitions) <= MAX_PARTITIONS else "*"
    return f"{node} {since} {named}"


def decode(payload: str) -> WorkNotice | None:
    """A notice's parts; None when even its watermark does not parse."""
    fields = payload.split(" ")
    if len(fields) < 3:
        return None
    node, since, named = fields[0], fields[1], fields[2]
    try:
        partitions = None if named == "*" else tuple(int(x) for x in named.split(",") if x)
    except ValueError:
        return None
    lanes = _lanes(fields[3]) if len(fields) == 4 else None
    return WorkNotice(node, since, partitions, lanes)


def _lanes(text: str) -> tuple[Lane, ...] | None:
    lanes: list[Lane] = []
    for item in text.split(","):
        parts = item.split("/")
        if len(parts) != 5:
            return None
        try:
            lanes.append(Lane(int(parts[0]), parts[1], parts[2], int(parts[3]), parts[4]))
        except ValueError:
            return None
    return tuple(lanes)


__all__ = ["MAX_PARTITIONS", "PAYLOAD_LIMIT", "Lane", "WorkNotice", "decode", "encode", "merged"]
