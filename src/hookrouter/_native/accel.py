"""The optional native helpers of the sans-IO core, imported in exactly one place.

Pure functions over bytes, no I/O (so the core may use them, see
tests/test_layering.py): ``http1`` parses a whole HTTP/1.1 message of the
common shape in one call (``http1_head.c``), ``hmac`` computes HMAC-SHA256
from a precomputed key state (``hmac_sha256.c``). Each is the module or
None, with ``HTTP1_IMPORT_ERROR`` / ``HMAC_IMPORT_ERROR`` saying why not;
the callers keep a portable path for None. ``HOOKROUTER_NATIVE=0`` turns
them off, as it does the transport.
"""

from __future__ import annotations

import os
from types import ModuleType

http1: ModuleType | None
HTTP1_IMPORT_ERROR: str | None
hmac: ModuleType | None
HMAC_IMPORT_ERROR: str | None

if os.environ.get("HOOKROUTER_NATIVE", "1") == "0":
    http1 = hmac = None
    HTTP1_IMPORT_ERROR = HMAC_IMPORT_ERROR = "disabled by HOOKROUTER_NATIVE=0"
else:
    try:
        import hookrouter._native._http1 as http1
    except ImportError as exc:  # not built: no compiler, or a broken build
        http1 = None
        HTTP1_IMPORT_ERROR = f"HTTP/1.1 fast path not available: {exc}"
    else:
        HTTP1_IMPORT_ERROR = None
    try:
        import hookrouter._native._hmac as hmac
    except ImportError as exc:  # not built, or built without OpenSSL's headers
        hmac = None
        HMAC_IMPORT_ERROR = f"native HMAC not available: {exc}"
    else:
        HMAC_IMPORT_ERROR = None

__all__ = ["HMAC_IMPORT_ERROR", "HTTP1_IMPORT_ERROR", "hmac", "http1"]
