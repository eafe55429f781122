"""The Lua token bucket, as an EVALSHA script and as a Redis Functions library.

``token_bucket.lua`` (package data) holds the algorithm once. The Functions
library is generated from it at import: ``token_bucket_function.lua`` is only
a wrapper with two placeholders, the body and the function's name. The name
carries a digest of the body, so a router never calls an older function that
another version left loaded: it gets "Function not found", loads its own
library with ``FUNCTION LOAD REPLACE`` and retries.

Caveat: two router versions sharing one Redis keep replacing each other's
library (one extra load per miss); run one version per Redis during upgrades
or use ``mode = "script"``, where different bodies simply have different SHAs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

LIBRARY_NAME = "hookrouter"


@dataclass(frozen=True, slots=True)
class BucketProgram:
    """Both forms of the token bucket program."""

    script: str  # EVAL/EVALSHA source
    script_sha: str  # SHA1 Redis assigns to ``script``
    library: str  # FUNCTION LOAD source
    function_name: str  # FCALL target


def _read(name: str) -> str:
    return resources.files("hookrouter.ratelimit").joinpath(name).read_text(encoding="utf-8")


def build_program() -> BucketProgram:
    """Read the package data and derive the library from the script body."""
    body = _read("token_bucket.lua")
    template = _read("token_bucket_function.lua")
    digest = hashlib.sha1(body.encode()).hexdigest()
    name = f"{LIBRARY_NAME}_bucket_{digest[:12]}"
    if "--@BODY@" not in template or "@NAME@" not in template:
        raise RuntimeError("token_bucket_function.lua lost its placeholders")
    library = template.replace("--@BODY@", body).replace("@NAME@", name)
    return BucketProgram(script=body, script_sha=digest, library=library, function_name=name)


PROGRAM = build_program()
