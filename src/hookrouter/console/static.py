"""The console's static files (its script and style sheet), cached and compressed.

They ship inside the package and are read once at start: each with a strong
ETag (a hash of its bytes, so a browser revalidates with ``If-None-Match``
and gets a bodiless 304) and a gzip copy made once, sent to browsers that
accept it. Only the names found at start are served; a path is never joined
onto the file system.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from importlib.resources import files

from hookrouter.core.http1 import Request, Response

_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class StaticFile:
    content_type: str
    body: bytes
    gzipped: bytes
    etag: str


def load(package: str = "hookrouter.console", folder: str = "static") -> dict[str, StaticFile]:
    loaded = {}
    for entry in files(package).joinpath(folder).iterdir():
        suffix = entry.name[entry.name.rfind(".") :]
        if not entry.is_file() or suffix not in _TYPES:
            continue
        body = entry.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        loaded[entry.name] = StaticFile(_TYPES[suffix], body, gzip.compress(body, 9, mtime=0), etag)
    return loaded


def serve(found: StaticFile | None, request: Request) -> Response:
    if found is None:
        return Response(404, b"not found", "text/plain; charset=utf-8")
    headers: tuple[tuple[str, str], ...] = (
        ("etag", found.etag),
        ("cache-control", "no-cache"),  # revalidate each time: a 304 is cheap, a stale script not
        ("vary", "accept-encoding"),
        ("x-content-type-options", "nosniff"),
    )
    if found.etag in request.headers.get("if-none-match", ""):
        return Response(304, b"", found.content_type, headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(
            200, found.gzipped, found.content_type, (*headers, ("content-encoding", "gzip"))
        )
    return Response(200, found.body, found.content_type, headers)


__all__ = ["StaticFile", "load", "serve"]
