"""Find (or install) the external tools the harness drives.

wrk, nginx and redis-server come from Debian packages: when one is missing
and we are root, ``apt-get install`` fetches it (after one ``apt-get
update``). py-spy is a pip package; it is looked up next to the running
interpreter first (the project's venv) and installed with pip on demand
only when ``--profile`` asks for it. perf is optional: without it the
syscall column says "n/a".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# tool -> Debian package that ships it
DEBIAN_PACKAGES = {
    "wrk": "wrk",
    "nginx": "nginx",
    "redis-server": "redis-server",
    "redis-cli": "redis-tools",
    "redis-benchmark": "redis-tools",
    "perf": "linux-perf",
}
_EXTRA_PATHS = ("/usr/sbin", "/usr/local/sbin", "/sbin")


class ToolError(RuntimeError):
    """A required tool is missing and could not be installed."""


@dataclass
class Tools:
    """Paths of the tools found, and a log of what was installed."""

    paths: dict[str, str] = field(default_factory=dict)
    installed: list[str] = field(default_factory=list)
    _apt_updated: bool = False

    def path(self, name: str) -> str:
        if name not in self.paths:
            raise ToolError(f"{name} was not resolved; call Tools.require({name!r}) first")
        return self.paths[name]

    def have(self, name: str) -> bool:
        return name in self.paths

    def find(self, name: str) -> str | None:
        if name == "py-spy":
            local = Path(sys.executable).parent / "py-spy"
            if local.exists():
                return str(local)
        found = shutil.which(name)
        if found:
            return found
        for base in _EXTRA_PATHS:
            cand = Path(base) / name
            if cand.exists() and os.access(cand, os.X_OK):
                return str(cand)
        return None

    def require(self, name: str, *, install: bool = True) -> str:
        """The path of ``name``, installing it when missing and allowed."""
        if name in self.paths:
            return self.paths[name]
        found = self.find(name)
        if found is None and install:
            self._install(name)
            found = self.find(name)
        if found is None:
            raise ToolError(f"{name} not found (and could not be installed)")
        self.paths[name] = found
        return found

    def optional(self, name: str, *, install: bool = False) -> str | None:
        try:
            return self.require(name, install=install)
        except ToolError:
            return None

    def _install(self, name: str) -> None:
        if name == "py-spy":
            cmd = [sys.executable, "-m", "pip", "install", "-q", "py-spy"]
            if subprocess.run(cmd, check=False).returncode == 0:
                self.installed.append("py-spy (pip)")
            return
        package = DEBIAN_PACKAGES.get(name)
        if package is None or os.geteuid() != 0 or not shutil.which("apt-get"):
            return
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        if not self._apt_updated:
            subprocess.run(
                ["apt-get", "update", "-q"], env=env, check=False, stdout=subprocess.DEVNULL
            )
            self._apt_updated = True
        done = subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", package],
            env=env,
            check=False,
            stdout=subprocess.DEVNULL,
        )
        if done.returncode == 0:
            self.installed.append(f"{package} (apt)")

    def version(self, name: str) -> str:
        """A one-line version string of a resolved tool (for the report)."""
        path = self.paths.get(name)
        if not path:
            return "not installed"
        flags = {
            "wrk": ["-v"],
            "nginx": ["-v"],
            "redis-server": ["--version"],
            "perf": ["--version"],
            "py-spy": ["--version"],
        }.get(name, ["--version"])
        try:
            done = subprocess.run(
                [path, *flags], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        text = (done.stdout + done.stderr).strip().splitlines()
        line = text[0] if text else "unknown"
        if name == "nginx":
            line = line.replace("nginx version: ", "")
        if name == "wrk":
            line = line.split(" Copyright")[0]
        if name == "redis-server":
            parts = [p for p in line.split() if p.startswith("v=")]
            line = "redis " + (parts[0][2:] if parts else line)
        return line
