"""Who changed what, when: every successful change through the admin API or the console.

``AdminApi.on_change`` calls ``AuditLog.record`` after each change that
succeeded, whether it came from a bearer token or a console session (the
console's changes are admin API calls too), so the two cannot disagree.
An entry names the caller, the method and path and the status, never a body
(bodies carry secrets). Entries are appended as JSON lines to a file beside
the store, which survives restarts; the newest ``keep`` are also held in
memory for the console's page. The file is rolled over to ``.1`` at
``max_file_bytes``, so it never grows without bound.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import unquote

import orjson

from hookrouter.clock import Clock
from hookrouter.core.http1 import Request, Response

log = logging.getLogger(__name__)

KEEP = 1000
MAX_FILE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: float
    who: str
    method: str
    path: str
    status: int


class AuditLog:
    def __init__(
        self,
        clock: Clock,
        path: Path | None = None,
        *,
        keep: int = KEEP,
        max_file_bytes: int = MAX_FILE_BYTES,
    ) -> None:
        self._clock = clock
        self.path = path
        self._max_file_bytes = max_file_bytes
        self.entries: deque[AuditEntry] = deque(maxlen=keep)
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        with path.open("rb") as file:
            for line in file:
                try:
                    self.entries.append(AuditEntry(**orjson.loads(line)))
                except (orjson.JSONDecodeError, TypeError):
                    continue  # a torn last line after a crash

    def record(self, who: str, request: Request, response: Response) -> None:
        if "dry_run=true" in request.query:
            return  # a count, not a change
        entry = AuditEntry(
            self._clock.time(), who, request.method, unquote(request.path), response.status
        )
        self.entries.append(entry)
        if self.path is not None:
            self._append(self.path, orjson.dumps(asdict(entry)) + b"\n")

    def _append(self, path: Path, line: bytes) -> None:
        try:
            if path.exists() and path.stat().st_size + len(line) > self._max_file_bytes:
                path.replace(path.with_suffix(path.suffix + ".1"))
            with path.open("ab") as file:
                file.write(line)
        except OSError:
            log.exception("audit log: could not write %s", path)

    def newest(self, limit: int = 200) -> list[AuditEntry]:
        return list(reversed(self.entries))[:limit]


__all__ = ["AuditEntry", "AuditLog"]
