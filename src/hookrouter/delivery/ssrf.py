"""SSRF guard: may a delivery go to these resolved addresses? A pure decision.

Theory of operation
-------------------
Tenants choose their endpoint URLs, so a URL is untrusted input that could aim
the router at its own network: ``http://127.0.0.1:6379``, the cloud metadata
service at ``169.254.169.254``, a database on ``10.0.0.5``. The shell resolves
the host name (async ``getaddrinfo``, see ``delivery/resolver.py``) and calls
:func:`check_destination` with the addresses; the address it returns is the
one the transport connects to, while Host and TLS SNI carry the name. So a
DNS answer that changes between the check and the connect (DNS rebinding)
cannot matter: there is no second lookup.

An address is allowed only if it is outside the fixed deny list in
``core/addresses.py``: the IANA special-purpose registries (loopback, RFC 1918,
ULA, link-local with the metadata address, CGNAT, documentation,
benchmarking, reserved), multicast, site-local fec0::/10 and all IPv6 outside
2000::/3, written out rather than read from ``ipaddress`` so the boundary does
not move with the Python version. IPv6 forms that embed an IPv4 address
(IPv4-mapped, NAT64 ``64:ff9b::/96``, 6to4) are judged by the embedded address.

If *any* resolved address is refused the whole destination is refused: a
name that resolves to a public and a private address is an attack pattern,
and connecting to "the good one" would make the outcome depend on order.

Overrides: ``allow_private_networks = true`` allows everything (for
development and private deployments); an allowlist of CIDRs allows addresses
inside them, and an allowlist of host names (exact, or ``*.suffix``) allows
whatever those names resolve to.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from hookrouter.core.addresses import (
    DestinationPolicy,
    IPAddress,
    IPNetwork,
    literal_address,
    refusal_reason,
)
from hookrouter.errors import DestinationRefused


def check_destination(
    host: str, addresses: Iterable[IPAddress | str], policy: DestinationPolicy
) -> IPAddress:
    """The address to connect to for ``host``, or raise ``DestinationRefused``.

    ``addresses`` is what resolving ``host`` returned (or the literal address).
    The first address is returned when all are allowed.
    """
    parsed = [a if not isinstance(a, str) else ipaddress.ip_address(a) for a in addresses]
    if not parsed:
        raise DestinationRefused(f"{host} did not resolve to any address", reason="dns_failure")
    for address in parsed:
        why = policy.refusal(host, address)
        if why is not None:
            raise DestinationRefused(
                f"destination {host} resolves to {address}: {why}; set "
                "[delivery] allow_private_networks = true or allowlist it to permit"
            )
    return parsed[0]


__all__ = [
    "DestinationPolicy",
    "IPAddress",
    "IPNetwork",
    "check_destination",
    "literal_address",
    "refusal_reason",
]
