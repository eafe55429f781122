"""Optional native extension build; project metadata lives in pyproject.toml.

Two optional native builds, each reported as a warning (never an install
error) when it fails:

* The C batch transport (``hookrouter._native._engine``), built when a C
  compiler and the Linux headers are present; without it the asyncio engine
  is used.
* The hot-path modules listed in ``COMPILED`` compiled with mypyc (the same
  typed source, as C extensions). Measured on a 2-core VM, same run, 2 rounds
  each: durable ingest 12.9k -> 16.5k req/s (76 -> 59 us of router CPU per
  request). Without mypy at build time, or when the build fails, they stay
  pure Python and behave the same. A manifest of the compiled sources' hashes
  (``_compiled.json``) lets ``hookrouter doctor`` and the test suite notice a
  compiled module older than its source (an editable install after an edit).

Environment switches:
  HOOKROUTER_NATIVE=0          skip the C transport
  HOOKROUTER_COMPILE=0         skip the mypyc build (pure-Python package)
  HOOKROUTER_NATIVE_DEBUG=1    build with resource counters (tests assert they return to zero)
  HOOKROUTER_NATIVE_ASAN=1     build with AddressSanitizer (run under LD_PRELOAD=libasan)
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE_DIR = "src/hookrouter/_native"
NATIVE_EXTENSION = "hookrouter._native._engine"
# Small native helpers, one module each (the engine does no HTTP and no
# crypto): name -> (sources, libraries, what falls back when it is missing).
HELPERS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "hookrouter._native._http1": (("http1_head.c",), (), "llhttp parses everything"),
    "hookrouter._native._hmac": (("hmac_sha256.c",), ("crypto",), "hashlib computes HMACs"),
}
SOURCES = sorted(
    name
    for name in (os.path.basename(p) for p in glob.glob(f"{NATIVE_DIR}/*.c"))
    if not any(name in sources for sources, _, _ in HELPERS.values())
)
NATIVE_EXTENSIONS = frozenset({NATIVE_EXTENSION, *HELPERS})

# Modules on the per-request and per-delivery paths, compiled with mypyc.
# Left out on purpose: the committers (tests inject faults by patching them;
# their work is per batch, not per event), modules holding objects that are
# tracked in weak sets (metrics registries: a native class takes no weak
# references; the compiled delivery engine, delivery/engine.py, is tracked
# through a small interpreted handle instead, delivery/metrics.py), and
# everything off the hot path.
COMPILED = (
    "hookrouter/clock.py",
    "hookrouter/ids.py",
    "hookrouter/loop_metrics.py",
    "hookrouter/core/http1.py",
    "hookrouter/core/http1client.py",
    "hookrouter/core/routing.py",
    "hookrouter/core/filters.py",
    "hookrouter/ingress/session.py",
    "hookrouter/ingress/asyncio_engine.py",
    "hookrouter/ingress/native_engine.py",
    "hookrouter/ingress/server.py",
    "hookrouter/ingress/handler.py",
    "hookrouter/ingress/admission.py",
    "hookrouter/ingress/ingest_metrics.py",
    "hookrouter/verify/_common.py",
    "hookrouter/verify/stripe.py",
    "hookrouter/verify/standard.py",
    "hookrouter/store/sqlite/batch.py",
    "hookrouter/store/sqlite/dedup_tiers.py",
    "hookrouter/store/sqlite/dedup.py",
    "hookrouter/store/sqlite/cycle.py",
    "hookrouter/store/sqlite/ledger.py",
    "hookrouter/flow/credits.py",
    "hookrouter/flow/scheduler.py",
    "hookrouter/flow/backlog.py",
    "hookrouter/ratelimit/slots.py",
    "hookrouter/ratelimit/bucket.py",
    "hookrouter/store/base.py",
    "hookrouter/store/lifecycle.py",
    "hookrouter/store/ledger.py",
    "hookrouter/verify/base.py",
    "hookrouter/delivery/listener.py",
    "hookrouter/delivery/engine.py",
    "hookrouter/delivery/endpoints.py",
    "hookrouter/delivery/attempt.py",
    "hookrouter/delivery/resolver.py",
    "hookrouter/delivery/transport.py",
    "hookrouter/delivery/connection.py",
    "hookrouter/delivery/outcomes.py",
    "hookrouter/delivery/signing.py",
    "hookrouter/delivery/breaker.py",
    "hookrouter/delivery/policy.py",
    "hookrouter/config/catalog.py",
    "hookrouter/config/entities.py",
    "hookrouter/config/delivery.py",
    "hookrouter/config/stored.py",
    "hookrouter/telemetry/tracing.py",
)
MANIFEST = "hookrouter/_compiled.json"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _extension(
    name: str = NATIVE_EXTENSION, sources: Sequence[str] = (), libraries: Sequence[str] = ()
) -> Extension:
    cflags = [
        "-std=gnu11",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Wno-missing-field-initializers",
        "-fvisibility=hidden",
    ]
    ldflags: list[str] = []
    macros: list[tuple[str, str | None]] = []
    if _flag("HOOKROUTER_NATIVE_DEBUG") or _flag("HOOKROUTER_NATIVE_ASAN"):
        macros.append(("HR_DEBUG", "1"))
        cflags += ["-g", "-O1"]
    if _flag("HOOKROUTER_NATIVE_ASAN"):
        cflags += ["-fsanitize=address", "-fno-omit-frame-pointer"]
        ldflags += ["-fsanitize=address"]
    return Extension(
        name,
        sources=[f"{NATIVE_DIR}/{source}" for source in (sources or SOURCES)],
        depends=[f"{NATIVE_DIR}/{h}" for h in ("engine.h", "uring_abi.h", "uring_ring.h")],
        define_macros=macros,
        libraries=list(libraries),
        extra_compile_args=cflags,
        extra_link_args=ldflags,
    )


# setup.py runs several times per install (metadata, then the build); only
# these commands build extensions, so only they pay for mypyc's type check.
_BUILD_COMMANDS = frozenset(
    {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}
)


# mypy options for the compile: not the project's strict configuration (that
# is the check, in scripts/test), just what mypyc needs. pyproject.toml puts
# the runtime dependencies in the build environment so their types are known.
_MYPYC_OPTIONS = (
    "--config-file=",
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--cache-dir=build/mypyc-cache",
)


def _compiled_extensions() -> list[Extension]:
    """mypyc extensions for ``COMPILED`` (empty when mypyc is missing or switched off)."""
    if os.environ.get("HOOKROUTER_COMPILE", "1") == "0" or _BUILD_COMMANDS.isdisjoint(sys.argv):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not installed; the hot paths stay pure Python")
        return []
    try:
        return list(mypycify([*_MYPYC_OPTIONS, *(f"src/{name}" for name in COMPILED)]))
    except BaseException as exc:  # mypyc exits on type errors: ship pure Python instead
        _warn(f"mypyc could not compile the hot paths ({exc!r}); they stay pure Python")
        return []


def _module(path: str) -> str:
    """``hookrouter/core/http1.py`` -> ``hookrouter.core.http1``."""
    return path.removesuffix(".py").replace("/", ".")


def _warn(message: str) -> None:
    message = f"hookrouter: {message}"
    warnings.warn(message, stacklevel=2)
    print(message, file=sys.stderr)


class OptionalBuildExt(build_ext):
    """Build extensions, but never fail the install because of them.

    The mypyc modules stand or fall together (each one loads the shared
    ``*__mypyc`` library): if any of them fails, all of them are removed and
    the package is pure Python. A manifest of the compiled sources' hashes is
    written next to them.
    """

    def run(self) -> None:
        self._mypyc_failed: BaseException | None = None
        try:
            super().run()
        except Exception as exc:  # e.g. copying a module that failed into the source tree
            _warn(f"building the native extensions failed ({exc}); the failed ones are left out")
        self._finish_compiled()

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            if ext.name == NATIVE_EXTENSION:
                _warn(f"the native ingress engine was not built ({exc}); asyncio will be used")
            elif ext.name in HELPERS:
                _warn(f"{ext.name} was not built ({exc}); {HELPERS[ext.name][2]}")
            else:
                self._mypyc_failed = exc

    def _compiled_outputs(self) -> list[Path]:
        return [
            Path(self.get_ext_fullpath(ext.name))
            for ext in self.extensions
            if ext.name not in NATIVE_EXTENSIONS
        ]

    def _finish_compiled(self) -> None:
        outputs = self._compiled_outputs()
        root = Path(self.get_ext_fullpath("hookrouter._x")).parent.parent  # package root
        manifest = root / MANIFEST
        if not outputs:
            # A pure build in place must not leave an earlier build's modules
            # shadowing the sources.
            if self.inplace:
                for name in COMPILED:
                    Path(self.get_ext_fullpath(_module(name))).unlink(missing_ok=True)
                manifest.unlink(missing_ok=True)
            return
        if self._mypyc_failed is not None or not all(p.exists() for p in outputs):
            for p in outputs:
                p.unlink(missing_ok=True)
            manifest.unlink(missing_ok=True)
            _warn(f"mypyc modules not built ({self._mypyc_failed}); the hot paths stay pure Python")
            return
        hashes = {
            _module(name): hashlib.sha256(Path("src", name).read_bytes()).hexdigest()
            for name in COMPILED
        }
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")


ext_modules = []
if sys.platform.startswith("linux") and os.environ.get("HOOKROUTER_NATIVE", "1") != "0":
    ext_modules.append(_extension())
    for helper, (sources, libraries, _) in HELPERS.items():
        ext_modules.append(_extension(helper, sources, libraries))
ext_modules += _compiled_extensions()

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
