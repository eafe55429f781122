"""The optional native ingress transport, imported in exactly one place.

Everything else asks this module: ``AVAILABLE`` says whether the C extension
``hookrouter._native._engine`` loaded, ``IMPORT_ERROR`` says why not. Setting
``HOOKROUTER_NATIVE=0`` in the environment forces the portable path even
when the extension is built (the uvloop/aiohttp convention).

The pure native helpers (the HTTP/1.1 fast path, HMAC) are imported in
``accel.py``, so that the sans-IO core can use them without this transport.
"""

from __future__ import annotations

import os
from types import ModuleType

engine: ModuleType | None
IMPORT_ERROR: str | None

if os.environ.get("HOOKROUTER_NATIVE", "1") == "0":
    engine = None
    IMPORT_ERROR = "disabled by HOOKROUTER_NATIVE=0"
else:
    try:
        from hookrouter._native import _engine as engine
    except ImportError as exc:  # not built (no compiler, non-Linux) or broken build
        engine = None
        IMPORT_ERROR = f"native extension not available: {exc}"
    else:
        IMPORT_ERROR = None

AVAILABLE: bool = engine is not None

__all__ = ["AVAILABLE", "IMPORT_ERROR", "engine"]
