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

An address is allowed only if it is globally routable (``ipaddress``'s
``is_global``, which follows the IANA special-purpose registries) and not
multicast. That refuses loopback, RFC 1918, ULA (fc00::/7), link-local
(169.254/16 with the metadata address, fe80::/10), unspecified, reserved,
CGNAT (100.64/10), benchmarking and documentation ranges. IPv6 forms that
embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, 6to4 ``2002::/16``,
NAT64 ``64:ff9b::/96``, Teredo) are judged by the embedded address too.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hookrouter.errors import ConfigIssue, DestinationRefused

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")


@dataclass(frozen=True, slots=True)
class DestinationPolicy:
    """Which non-public destinations are allowed anyway."""

    allow_private_networks: bool = False
    allowed_networks: tuple[IPNetwork, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # lower-case names, "*.example.internal" allowed

    @classmethod
    def parse(
        cls, allow_private_networks: bool, allowlist: Sequence[str], path: str
    ) -> tuple[DestinationPolicy, list[ConfigIssue]]:
        """Build from config: allowlist entries are CIDRs / addresses or host names."""
        networks: list[IPNetwork] = []
        hosts: list[str] = []
        issues: list[ConfigIssue] = []
        for index, entry in enumerate(allowlist):
            text = entry.strip().lower() if isinstance(entry, str) else ""
            if not text:
                issues.append(ConfigIssue(f"{path}[{index}]", "must be a CIDR or a host name"))
                continue
            try:
                networks.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                if "/" in text or " " in text:
                    issues.append(ConfigIssue(f"{path}[{index}]", f"invalid CIDR {entry!r}"))
                else:
                    hosts.append(text.rstrip("."))
        return cls(allow_private_networks, tuple(networks), tuple(hosts)), issues

    def host_allowed(self, host: str) -> bool:
        name = host.lower().rstrip(".")
        for pattern in self.allowed_hosts:
            if pattern.startswith("*."):
                if name.endswith(pattern[1:]):
                    return True
            elif name == pattern:
                return True
        return False


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's (obfuscation removed) address
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination, or None if it is."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        inner = refusal_reason(embedded)
        if inner is not None:
            return f"{inner} (embedded in {address})"
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            return None  # ::ffff:a.b.c.d *is* a.b.c.d; ::/8 being "reserved" is irrelevant
    if address.is_loopback:
        return "loopback address"
    if address.is_link_local:
        return "link-local address (includes cloud metadata 169.254.169.254)"
    if address.is_unspecified:
        return "unspecified address"
    if address.is_multicast:
        return "multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "carrier-grade NAT address (100.64.0.0/10)"
    if address.is_private:
        return "private network address"
    if address.is_reserved or not address.is_global:
        return "reserved or non-global address"
    return None


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
    if policy.allow_private_networks or policy.host_allowed(host):
        return parsed[0]
    for address in parsed:
        if any(address in net for net in policy.allowed_networks):
            continue
        why = refusal_reason(address)
        if why is not None:
            raise DestinationRefused(
                f"destination {host} resolves to {address}: {why}; set "
                "[delivery] allow_private_networks = true or allowlist it to permit"
            )
    return parsed[0]


def literal_address(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is a literal (``[::1]`` brackets allowed)."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


__all__ = [
    "DestinationPolicy",
    "IPAddress",
    "check_destination",
    "literal_address",
    "refusal_reason",
]
