"""A network namespace joined to this one by a veth pair, whose link a test can cut.

``Netns`` creates the namespace and the pair (``ip``, as root), gives the
host end ``host_ip`` and the namespace end ``ns_ip`` (a /30 of their own),
and removes both at exit. ``cut()`` sets the host end down: packets stop both
ways, sockets stay open (as in a real partition, not a kill); ``mend()``
brings it back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


def unavailable() -> str | None:
    """Why a namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def _used_subnets() -> set[str]:
    out = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True)
    return {word.rsplit(".", 1)[0] for word in out.stdout.split() if word.startswith("10.")}


class Netns:
    """One namespace with a veth link to the host's (see the module docstring)."""

    def __init__(self, tag: str) -> None:
        self.name = f"hr-{tag}"
        self.host_link = f"hrv{tag}h"[:15]
        self.ns_link = f"hrv{tag}n"[:15]
        used = _used_subnets()
        third = next(n for n in range(200, 255) if f"10.213.{n}" not in used)
        self.host_ip = f"10.213.{third}.1"
        self.ns_ip = f"10.213.{third}.2"

    def prefix(self) -> list[str]:
        """A command prefix that runs a program inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def create(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.ns_link)
        _ip("link", "set", self.ns_link, "netns", self.name)
        _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        inside = ["netns", "exec", self.name, "ip"]
        _ip(*inside, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_link)
        _ip(*inside, "link", "set", self.ns_link, "up")
        _ip(*inside, "link", "set", "lo", "up")

    def cut(self) -> None:
        _ip("link", "set", self.host_link, "down")

    def mend(self) -> None:
        _ip("link", "set", self.host_link, "up")

    def remove(self) -> None:
        # Deleting one end deletes the pair; the namespace goes once nothing runs in it.
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)


@contextmanager
def netns(tag: str) -> Iterator[Netns]:
    space = Netns(tag)
    try:
        space.create()
        yield space
    finally:
        space.remove()
