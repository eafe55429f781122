"""Optional native extension build; project metadata lives in pyproject.toml.

The C batch transport (``hookrouter._native._engine``) is built when a C
compiler and the Linux headers are present.  If the build fails for any
reason the package still installs and the asyncio engine is used: the
failure is reported as a warning, never as an install error.

Environment switches:
  HOOKROUTER_NATIVE=0          skip the extension entirely
  HOOKROUTER_NATIVE_DEBUG=1    build with resource counters (tests assert they return to zero)
  HOOKROUTER_NATIVE_ASAN=1     build with AddressSanitizer (run under LD_PRELOAD=libasan)
"""

from __future__ import annotations

import glob
import os
import sys
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE_DIR = "src/hookrouter/_native"
SOURCES = sorted(os.path.basename(p) for p in glob.glob(f"{NATIVE_DIR}/*.c"))


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _extension() -> Extension:
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
        "hookrouter._native._engine",
        sources=[f"{NATIVE_DIR}/{name}" for name in SOURCES],
        depends=[f"{NATIVE_DIR}/{h}" for h in ("engine.h", "uring_abi.h", "uring_ring.h")],
        define_macros=macros,
        extra_compile_args=cflags,
        extra_link_args=ldflags,
    )


class OptionalBuildExt(build_ext):
    """Build extensions, but never fail the install because of them."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # any failure means "no native engine"
            self._warn(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._warn(exc)

    @staticmethod
    def _warn(exc: BaseException) -> None:
        message = (
            f"hookrouter: the native ingress engine was not built ({exc}); "
            "the asyncio engine will be used"
        )
        warnings.warn(message, stacklevel=1)
        print(message, file=sys.stderr)


ext_modules = []
if sys.platform.startswith("linux") and os.environ.get("HOOKROUTER_NATIVE", "1") != "0":
    ext_modules.append(_extension())

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
