"""Redis key names for rate limiting, built in this one place.

Every key of a tenant starts with the tenant id as a Redis Cluster hash tag,
``{tenant}``, so all of a tenant's keys hash to one slot: a script may touch
several of them (they are all passed in ``KEYS``) and tenants spread over the
cluster's slots. ``key_prefix`` namespaces a deployment sharing a Redis; it
comes *before* the tag and may not contain braces, or the tag would move.

::

    <prefix>{<tenant>}:rl:b:<scope>     bucket hash (tokens, ts), one per limited scope
    <prefix>{<tenant>}:rl:limits        operator overrides: "<scope>:capacity", "<scope>:rate"
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BucketKeys:
    """The keys one decision touches, in ``KEYS`` order."""

    bucket: str
    limits: str

    def as_list(self) -> list[str]:
        return [self.bucket, self.limits]


def check_prefix(prefix: str) -> None:
    """Reject a ``key_prefix`` that would change which part of a key is hashed."""
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"key_prefix may not contain braces: {prefix!r}")


def bucket_keys(tenant_id: str, scope: str, prefix: str = "") -> BucketKeys:
    """Keys for ``tenant_id``'s bucket named ``scope`` (e.g. ``ingest``, ``src:stripe``).

    >>> bucket_keys("acme", "ingest")
    BucketKeys(bucket='{acme}:rl:b:ingest', limits='{acme}:rl:limits')
    """
    # Braces in a tenant id would cut the hash tag short and split the
    # tenant's keys across slots; configured ids never contain them.
    if not tenant_id or "{" in tenant_id or "}" in tenant_id:
        raise ValueError(f"tenant id unusable as a hash tag: {tenant_id!r}")
    if not scope:
        raise ValueError("scope must not be empty")
    tag = f"{prefix}{{{tenant_id}}}:rl:"
    return BucketKeys(bucket=f"{tag}b:{scope}", limits=f"{tag}limits")


def override_fields(scope: str) -> tuple[str, str]:
    """Fields of the limits hash that override ``scope``'s capacity and rate."""
    return f"{scope}:capacity", f"{scope}:rate"
