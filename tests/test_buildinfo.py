"""The mypyc-compiled hot paths: built, loaded, and never silently older than their source."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hookrouter
from hookrouter.buildinfo import (
    MANIFEST,
    classify,
    compiled_status,
    interpreted_copy,
    source_hash,
)

COMPILE_OFF = os.environ.get("HOOKROUTER_COMPILE", "1") == "0"
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


@pytest.mark.skipif(COMPILE_OFF, reason="package built with HOOKROUTER_COMPILE=0")
def test_the_hot_paths_run_compiled_from_their_current_source() -> None:
    assert MANIFEST.exists(), "the mypyc build failed or was skipped: see pip's output"
    status = compiled_status()
    manifest = json.loads(MANIFEST.read_text())
    assert "hookrouter.core.http1" in manifest and "hookrouter.delivery.transport" in manifest
    assert status.interpreted == (), status.summary()
    assert set(status.compiled) == set(manifest)
    assert status.stale == (), status.summary()


def _fake_build(tmp_path: Path, source: str) -> tuple[Path, dict[str, str]]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(source)
    (pkg / f"mod{SUFFIX}").write_bytes(b"")
    return pkg, {"pkg.mod": source_hash(pkg / "mod.py")}


def test_a_source_edited_after_the_build_is_reported_stale(tmp_path: Path) -> None:
    pkg, manifest = _fake_build(tmp_path, "X = 1\n")
    compiled = pkg / f"mod{SUFFIX}"
    fresh = classify(manifest, lambda name: compiled)
    assert fresh.compiled == ("pkg.mod",) and fresh.stale == ()

    (pkg / "mod.py").write_text("X = 2\n")
    edited = classify(manifest, lambda name: compiled)
    assert edited.stale == ("pkg.mod",)
    assert "STALE" in edited.summary() and "pkg.mod" in edited.summary()


def test_a_module_loaded_from_source_is_reported_as_interpreted(tmp_path: Path) -> None:
    pkg, manifest = _fake_build(tmp_path, "X = 1\n")
    status = classify(manifest, lambda name: pkg / "mod.py")
    assert status.interpreted == ("pkg.mod",) and status.compiled == ()
    assert "loaded from source instead: pkg.mod" in status.summary()


def test_without_a_manifest_the_build_is_pure_python(tmp_path: Path) -> None:
    status = compiled_status(tmp_path / "missing.json")
    assert not status.manifest
    assert status.summary() == "pure Python (built without mypyc)"


def test_doctor_reports_the_hot_paths() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hookrouter", "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"hot paths: {compiled_status().summary()}" in out


def test_the_interpreted_copy_runs_the_same_source_without_compiled_modules(
    tmp_path: Path,
) -> None:
    root = interpreted_copy(tmp_path)
    assert not list(root.rglob("__pycache__"))
    code = (
        "import hookrouter.core.http1 as m, hookrouter.buildinfo as b;"
        "print(m.__file__); print(b.compiled_status().summary())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    ).stdout.splitlines()
    assert out == [
        str(root / "hookrouter" / "core" / "http1.py"),
        "pure Python (built without mypyc)",
    ]
    package = Path(hookrouter.__file__).parent
    native = sorted(p.name for p in (package / "_native").glob(f"*{SUFFIX}"))
    assert sorted(p.name for p in (root / "hookrouter" / "_native").glob(f"*{SUFFIX}")) == native
