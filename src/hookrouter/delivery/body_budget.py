"""How many bytes of event bodies the delivery engine keeps in memory.

Queued deliveries keep their event's body so the attempt need not read it
back from the store; unbounded, a tenant with 1 MB events and a slow
endpoint pinned ``queue_capacity`` x ``max_body_bytes`` (a GiB at the
defaults). The budget caps the bytes kept in all and per tenant: a body
past either cap is not kept, and its delivery reads it from the store
(``DeliveryLedger.load``, the page-in path) when its turn comes. Only
memory changes: the delivery is the same, byte for byte.
"""

from __future__ import annotations

from typing import Any, Final

DEFAULT_TOTAL_BYTES: Final = 64 << 20
DEFAULT_TENANT_BYTES: Final = 16 << 20  # one tenant cannot take the whole budget


class BodyBudget:
    """Bytes of cached bodies, in all and against a per-tenant cap.

    The caller keeps each tenant's bytes (the engine's per-tenant record):
    a dict here was one more lookup of the tenant per event.
    """

    __slots__ = ("not_kept", "tenant_bytes", "total_bytes", "used")

    def __init__(
        self, total_bytes: int = DEFAULT_TOTAL_BYTES, tenant_bytes: int = DEFAULT_TENANT_BYTES
    ) -> None:
        self.total_bytes = total_bytes
        self.tenant_bytes = min(tenant_bytes, total_bytes)
        self.used = 0
        self.not_kept = 0  # bodies refused a place (read back from the store instead)

    def admit(self, tenant_used: int, size: int) -> bool:
        """Reserve ``size`` bytes for a body of a tenant that keeps ``tenant_used``.

        False if over either cap. On True the caller adds ``size`` to its tenant's count.
        """
        if self.used + size > self.total_bytes or tenant_used + size > self.tenant_bytes:
            self.not_kept += 1
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        """Give back what ``admit`` reserved (the caller takes it off its tenant's count)."""
        self.used -= size

    def stats(self) -> dict[str, Any]:
        return {
            "bytes": self.used,
            "total_bytes": self.total_bytes,
            "tenant_bytes": self.tenant_bytes,
            "not_kept": self.not_kept,
        }


__all__ = ["DEFAULT_TENANT_BYTES", "DEFAULT_TOTAL_BYTES", "BodyBudget"]
