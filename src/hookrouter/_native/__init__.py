"""The optional native extensions, imported in exactly one place.

Everything else asks this module: ``AVAILABLE`` says whether the C extension
``hookrouter._native._engine`` (the ingress transport) loaded,
``IMPORT_ERROR`` says why not; ``http1`` is the HTTP/1.1 fast path
(``_http1``, see ``http1_head.c``) or None, and ``HTTP1_IMPORT_ERROR`` says
why. Setting ``HOOKROUTER_NATIVE=0`` in the environment forces the portable
paths even when the extensions are built (the uvloop/aiohttp convention).
"""

from __future__ import annotations

import os
from types import ModuleType

engine: ModuleType | None
IMPORT_ERROR: str | None
http1: ModuleType | None
HTTP1_IMPORT_ERROR: str | None

if os.environ.get("HOOKROUTER_NATIVE", "1") == "0":
    engine = http1 = None
    IMPORT_ERROR = HTTP1_IMPORT_ERROR = "disabled by HOOKROUTER_NATIVE=0"
else:
    try:
        from hookrouter._native import _http1 as http1
    except ImportError as exc:
        http1 = None
        HTTP1_IMPORT_ERROR = f"HTTP/1.1 fast path not available: {exc}"
    else:
        HTTP1_IMPORT_ERROR = None
    try:
        from hookrouter._native import _engine as engine
    except ImportError as exc:  # not built (no compiler, non-Linux) or broken build
        engine = None
        IMPORT_ERROR = f"native extension not available: {exc}"
    else:
        IMPORT_ERROR = None

AVAILABLE: bool = engine is not None

__all__ = ["AVAILABLE", "HTTP1_IMPORT_ERROR", "IMPORT_ERROR", "engine", "http1"]
