"""The router's own events (``[[operator_hooks]]``), delivered like any tenant's.

The hooks are endpoints of a reserved tenant, ``OPERATOR_TENANT``, added to
the catalog the delivery engine reads (never to the stored entities, the
admin API or the ingest path). An operator event is appended to the store
as an event of that tenant and offered to the engine once committed, so it
is signed (Standard Webhooks, the hook's secret), retried on the schedule,
kept behind a breaker and survives a restart exactly like a tenant's
delivery; its own credit queue keeps a flapping operator URL from slowing
any tenant. A Slack hook gets the same event as a Slack message (``slack``).

Emitted (``watches`` has the rules): ``endpoint.breaker_opened`` /
``endpoint.breaker_closed`` (each transition), ``endpoint.disabled`` (a 410
Gone), ``delivery.dead_lettered`` (per endpoint, a count per
``dead_letter_summary`` period), ``tenant.backlog_high`` / ``cleared``,
``store.saturated`` / ``recovered`` (ingest answering 429/503 for lack of
room), ``ratelimit.redis_unavailable`` / ``recovered`` and ``source.quiet`` /
``resumed``. A condition is told once when it starts and once when it ends
(``latch``). Events about the reserved tenant itself are never emitted.
"""

from hookrouter.operator_events.emitter import (
    OPERATOR_SOURCE,
    OPERATOR_TENANT,
    OperatorEvents,
    hook_id,
)

__all__ = ["OPERATOR_SOURCE", "OPERATOR_TENANT", "OperatorEvents", "hook_id"]
