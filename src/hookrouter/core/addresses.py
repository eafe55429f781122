"""Which IP addresses a delivery may never reach, as a fixed table: the SSRF deny list.

The table is built from the IANA IPv4 and IPv6 Special-Purpose Address
Registries (https://www.iana.org/assignments/iana-ipv4-special-registry,
https://www.iana.org/assignments/iana-ipv6-special-registry), the multicast
blocks, and for IPv6 everything outside 2000::/3, the only block IANA's IPv6
Address Space registry allocates for global unicast. It is written out here,
not taken from ``ipaddress``'s ``is_global`` / ``is_private``, because those
tables change between Python releases (3.11.7 calls 192.0.0.8, 192.0.0.100
and fec0::1 public) and a security boundary must not move with the
interpreter.

Choices stricter than the registries, because no webhook receiver lives there:
the whole of 192.0.0.0/24 and 2001::/23 is denied, including the few anycast
entries inside them the registries mark globally reachable (PCP, TURN, AMT,
AS112 at 2001:4:112::/48); the deprecated site-local fec0::/10 and the
deprecated IPv4-compatible ::/96 are denied because some stacks still route
them; Teredo (2001::/32) is denied whatever client address it embeds.
Globally reachable registry entries outside those blocks (AS112 192.31.196.0/24
and 192.175.48.0/24, AMT 192.52.193.0/24, 2620:4f:8000::/48) stay allowed.

IPv6 forms that *are* an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, the
NAT64 well-known prefix ``64:ff9b::/96``) are judged by that address alone;
6to4 (``2002::/16``) is refused when the IPv4 address it embeds is.

Host literals are read the way ``inet_aton`` (and so ``getaddrinfo``) reads
them, so ``2130706433``, ``0x7f.1`` and ``0177.0.0.1`` are 127.0.0.1 here too.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from hookrouter.errors import ConfigIssue

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class DeniedRange:
    """One deny-list row: the network, what the registry calls it, and where it is defined."""

    network: IPNetwork
    name: str
    reference: str

    def describe(self) -> str:
        return f"{self.name} ({self.network}, {self.reference})"


def _rows(*rows: tuple[str, str, str]) -> tuple[DeniedRange, ...]:
    return tuple(DeniedRange(ipaddress.ip_network(net), name, ref) for net, name, ref in rows)


# First match wins, so a more specific row comes before the block that contains it.
IPV4_DENIED: Final = _rows(
    ("0.0.0.0/8", "'this network' address", "RFC 791"),
    ("10.0.0.0/8", "private-use network address", "RFC 1918"),
    ("100.64.0.0/10", "shared address space (carrier-grade NAT)", "RFC 6598"),
    ("127.0.0.0/8", "loopback address", "RFC 1122"),
    (
        "169.254.0.0/16",
        "link-local address (includes cloud metadata 169.254.169.254)",
        "RFC 3927",
    ),
    ("172.16.0.0/12", "private-use network address", "RFC 1918"),
    ("192.0.0.0/24", "IETF protocol assignment", "RFC 6890"),
    ("192.0.2.0/24", "documentation address (TEST-NET-1)", "RFC 5737"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526"),
    ("192.168.0.0/16", "private-use network address", "RFC 1918"),
    ("198.18.0.0/15", "benchmarking address", "RFC 2544"),
    ("198.51.100.0/24", "documentation address (TEST-NET-2)", "RFC 5737"),
    ("203.0.113.0/24", "documentation address (TEST-NET-3)", "RFC 5737"),
    ("224.0.0.0/4", "multicast address", "RFC 5771"),
    ("255.255.255.255/32", "limited broadcast address", "RFC 919"),
    ("240.0.0.0/4", "reserved address", "RFC 1112"),
)

IPV6_DENIED: Final = _rows(
    ("::/128", "unspecified address", "RFC 4291"),
    ("::1/128", "loopback address", "RFC 4291"),
    ("::/96", "deprecated IPv4-compatible address", "RFC 4291"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation address", "RFC 8215"),
    ("100::/64", "discard-only address", "RFC 6666"),
    ("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780"),
    ("2001::/32", "Teredo tunnel address", "RFC 4380"),
    ("2001::/23", "IETF protocol assignment", "RFC 2928"),
    ("2001:db8::/32", "documentation address", "RFC 3849"),
    ("3fff::/20", "documentation address", "RFC 9637"),
    ("5f00::/16", "segment routing (SRv6) SID", "RFC 9602"),
    ("fc00::/7", "unique-local address (private network)", "RFC 4193"),
    ("fe80::/10", "link-local address", "RFC 4291"),
    ("fec0::/10", "deprecated site-local address", "RFC 3879"),
    ("ff00::/8", "multicast address", "RFC 4291"),
    # Everything else outside 2000::/3 (the mapped and NAT64 prefixes are judged before).
    ("::/3", "address outside global unicast 2000::/3", "IANA IPv6 Address Space"),
    ("4000::/2", "address outside global unicast 2000::/3", "IANA IPv6 Address Space"),
    ("8000::/1", "address outside global unicast 2000::/3", "IANA IPv6 Address Space"),
)

# IPv6 prefixes whose low 32 bits are the IPv4 destination itself.
_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")


def denied_range(address: IPAddress) -> DeniedRange | None:
    """The deny-list row ``address`` falls in (embedded IPv4 judged too), or None."""
    if isinstance(address, ipaddress.IPv4Address):
        return next((row for row in IPV4_DENIED if address in row.network), None)
    if address in _IPV4_MAPPED or address in _NAT64:
        return denied_range(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address in _SIX_TO_FOUR:
        inner = denied_range(ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF))
        if inner is not None:
            return inner
    return next((row for row in IPV6_DENIED if address in row.network), None)


def refusal_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination, or None if it is."""
    row = denied_range(address)
    if row is None:
        return None
    if isinstance(address, ipaddress.IPv6Address) and row.network.version == 4:
        return f"{row.describe()} embedded in {address}"
    return row.describe()


def literal_address(host: str) -> IPAddress | None:
    """``host`` as the IP address a resolver would read from it, or None for a name.

    ``[::1]`` brackets are allowed, and the legacy IPv4 spellings that
    ``inet_aton`` accepts (``2130706433``, ``0x7f.1``, ``0177.0.0.1``) are
    normalised, so no spelling of a denied address passes as a host name.
    """
    text = host.strip("[]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return _legacy_ipv4(text.removesuffix("."))


def _legacy_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """``a``, ``a.b``, ``a.b.c`` or ``a.b.c.d`` with decimal, 0x-hex or 0-octal parts."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        lowered = part.lower()
        if lowered.startswith("0x"):
            digits, base = lowered[2:] or "0", 16
        elif len(part) > 1 and part.startswith("0"):
            digits, base = part[1:], 8
        else:
            digits, base = part, 10
        if not digits.isascii() or not digits.isalnum():
            return None
        try:
            values.append(int(digits, base))
        except ValueError:
            return None
    *leading, last = values
    if any(v > 0xFF for v in leading) or last >= 1 << (8 * (4 - len(leading))):
        return None
    value = last
    for index, byte in enumerate(leading):
        value |= byte << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


@dataclass(frozen=True, slots=True)
class DestinationPolicy:
    """Which denied destinations are allowed anyway (``[delivery]`` settings)."""

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

    def refusal(self, host: str, address: IPAddress) -> str | None:
        """Why ``host`` at ``address`` is refused under this policy, or None if allowed."""
        if self.allow_private_networks or self.host_allowed(host):
            return None
        if any(address in net for net in self.allowed_networks):
            return None
        return refusal_reason(address)


__all__ = [
    "IPV4_DENIED",
    "IPV6_DENIED",
    "DeniedRange",
    "DestinationPolicy",
    "IPAddress",
    "IPNetwork",
    "denied_range",
    "literal_address",
    "refusal_reason",
]
