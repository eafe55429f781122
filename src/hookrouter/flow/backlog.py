"""The per-tenant durable backlog cap: accept, or shed with 429. A pure decision.

A tenant's backlog is every delivery not yet finished (pending, retrying or
parked), whether its id is in memory or only in the store. Below
``max_backlog`` everything is accepted. At the cap, a sender that documents
automatic retries (``hookrouter.providers``) gets 429 with Retry-After: it
will come back, and we stop growing a backlog we cannot drain. A sender that
never retries would lose the event, so it is still accepted while the store
can take it, and the decision is flagged ``at_risk`` (a loud metric and log)
from 90 % of the cap on, so operators act before the cap is reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from mypy_extensions import mypyc_attr

# Retry-After for a full backlog: draining runs at the endpoint's pace, so
# asking for a minute keeps a retrying sender from hammering us meanwhile.
SHED_RETRY_AFTER: Final = 60.0
# A slow disk usually recovers within seconds (a checkpoint, a noisy
# neighbour): ask retrying senders to come back soon.
PRESSURE_RETRY_AFTER: Final = 5.0
# Warn from 90 % of the cap for senders that cannot be shed.
AT_RISK_FRACTION: Final = 0.9


@dataclass(frozen=True, slots=True)
class Accept:
    at_risk: bool = False  # the sender does not retry and the cap is (nearly) reached


@dataclass(frozen=True, slots=True)
class Shed:
    status: int
    retry_after: float
    reason: str


ACCEPT: Final = Accept()


# Nothing it reaches refers back to it: the collector need not track it (heap.py).
@mypyc_attr(acyclic=True)
class BacklogCount:
    """A tenant's open deliveries as the delivery engine counts them while it has work.

    An object of its own so that ingest admission can keep it with the
    tenant's source, reading the count without a lookup among all tenants,
    and still not keep the engine's other state of the tenant alive once the
    engine releases it: ``live`` turns False then, and the holder asks again.
    """

    __slots__ = ("live", "open")

    def __init__(self, open_deliveries: int) -> None:
        self.open = open_deliveries  # at the last count, + opened - closed since
        self.live = True


def decide_backlog(backlog: int, cap: int, sender_retries: bool) -> Accept | Shed:
    """Accept or shed one more event for a tenant with ``backlog`` open deliveries."""
    if backlog >= cap:
        if sender_retries:
            return Shed(429, SHED_RETRY_AFTER, "backlog_full")
        return Accept(at_risk=True)
    if not sender_retries and backlog >= AT_RISK_FRACTION * cap:
        return Accept(at_risk=True)
    return ACCEPT


def decide_pressure(commit_ms: float, max_commit_ms: float, sender_retries: bool) -> Accept | Shed:
    """Accept or shed while the store's commits are slow (a struggling disk).

    ``commit_ms`` is a smoothed commit latency. Above ``max_commit_ms`` every
    acknowledgement waits that long and the backlog of waiting requests grows;
    a sender that retries gets 503 and comes back later, one that does not is
    still accepted (flagged ``at_risk``): slow is better than lost.
    """
    if commit_ms <= max_commit_ms:
        return ACCEPT
    if sender_retries:
        return Shed(503, PRESSURE_RETRY_AFTER, "store_slow")
    return Accept(at_risk=True)


__all__ = [
    "ACCEPT",
    "AT_RISK_FRACTION",
    "PRESSURE_RETRY_AFTER",
    "SHED_RETRY_AFTER",
    "Accept",
    "BacklogCount",
    "Shed",
    "decide_backlog",
    "decide_pressure",
]
