"""Which hot-path modules run compiled (mypyc), and whether any is older than its source.

``setup.py`` compiles the modules on the request and delivery paths with
mypyc and writes ``_compiled.json`` (module -> SHA-256 of the source it was
compiled from) next to them. A compiled module is a C extension placed beside
its ``.py`` file, and Python imports the extension first: after an edit to the
source in an editable install, the old compiled code keeps running until the
package is built again. :func:`compiled_status` notices that (``stale``), so
``hookrouter doctor``, ``hookrouter serve`` and the test suite can say so.
:func:`interpreted_copy` gives the same source without the compiled modules
(the interpreted test run, the benchmark's comparison, profiling).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

MANIFEST = Path(__file__).with_name("_compiled.json")
_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


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
        if not origin.name.endswith(_EXTENSION_SUFFIXES):
            interpreted.append(name)
            continue
        compiled.append(name)
        source = origin.with_name(name.rpartition(".")[2] + ".py")
        if source.exists() and source_hash(source) != recorded:
            stale.append(name)
    return CompiledStatus(True, tuple(compiled), tuple(interpreted), tuple(stale))


def _loaded_from(name: str) -> Path:
    return Path(str(importlib.import_module(name).__file__))


def _read_manifest(path: Path) -> dict[str, str] | None:
    try:
        manifest: dict[str, str] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return manifest


def compiled_status(manifest_path: Path = MANIFEST) -> CompiledStatus:
    """The state of this installation's compiled modules (imports each of them)."""
    manifest = _read_manifest(manifest_path)
    if manifest is None:
        return CompiledStatus(False, (), (), ())
    return classify(manifest, _loaded_from)


def interpreted_copy(dest: Path) -> Path:
    """Copy this package into ``dest`` without its compiled modules; returns ``dest``.

    With ``dest`` first on ``PYTHONPATH`` the same source runs interpreted.
    Other extensions (the C transport) are kept; the manifest is left out,
    so the copy reports itself as pure Python.
    """
    package = Path(__file__).parent
    compiled = set(_read_manifest(MANIFEST) or ())

    def skip(folder: str, names: list[str]) -> set[str]:
        prefix = ".".join(Path(folder).relative_to(package.parent).parts)
        return {
            n
            for n in names
            if n in ("__pycache__", MANIFEST.name)
            or (n.endswith(_EXTENSION_SUFFIXES) and f"{prefix}.{n.split('.')[0]}" in compiled)
        }

    shutil.copytree(package, dest / package.name, ignore=skip, dirs_exist_ok=True)
    return dest
