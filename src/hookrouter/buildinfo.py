"""Which hot-path modules run compiled (mypyc), and whether any is older than its source.

``setup.py`` compiles the modules on the request and delivery paths with
mypyc and writes ``_compiled.json`` (module -> SHA-256 of the source it was
compiled from) next to them. A compiled module is a C extension placed beside
its ``.py`` file, and Python imports the extension first: after an edit to the
source in an editable install, the old compiled code keeps running until the
package is built again. :func:`compiled_status` notices that (``stale``), so
``hookrouter doctor``, ``hookrouter serve`` and the test suite can say so.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

MANIFEST = Path(__file__).with_name("_compiled.json")


@dataclass(frozen=True, slots=True)
class CompiledStatus:
    """The compiled modules' state; ``manifest`` is False for a pure-Python build."""

    manifest: bool
    compiled: tuple[str, ...]  # loaded from a C extension
    interpreted: tuple[str, ...]  # in the manifest, but loaded from source
    stale: tuple[str, ...]  # compiled from a source that has changed since

    def summary(self) -> str:
        """One line for logs and ``hookrouter doctor``."""
        if not self.manifest:
            return "pure Python (built without mypyc)"
        text = f"{len(self.compiled)} hot-path modules compiled with mypyc"
        if self.interpreted:
            text += f"; loaded from source instead: {', '.join(self.interpreted)}"
        if self.stale:
            text += (
                f"; STALE (source edited after the build, rebuild with `pip install -e .`):"
                f" {', '.join(self.stale)}"
            )
        return text


def source_hash(path: Path) -> str:
    """The SHA-256 recorded for a compiled module's source."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def classify(manifest: Mapping[str, str], loaded_from: Callable[[str], Path]) -> CompiledStatus:
    """Sort the manifest's modules by how they were loaded and whether their source moved on.

    ``loaded_from(module)`` is the file the module was imported from.
    """
    compiled: list[str] = []
    interpreted: list[str] = []
    stale: list[str] = []
    for name, recorded in sorted(manifest.items()):
        origin = loaded_from(name)
        if not origin.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            interpreted.append(name)
            continue
        compiled.append(name)
        source = origin.with_name(name.rpartition(".")[2] + ".py")
        if source.exists() and source_hash(source) != recorded:
            stale.append(name)
    return CompiledStatus(True, tuple(compiled), tuple(interpreted), tuple(stale))


def _loaded_from(name: str) -> Path:
    return Path(str(importlib.import_module(name).__file__))


def compiled_status(manifest_path: Path = MANIFEST) -> CompiledStatus:
    """The state of this installation's compiled modules (imports each of them)."""
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return CompiledStatus(False, (), (), ())
    return classify(manifest, _loaded_from)
