"""HTTP/1.1 for the admin API client: one keep-alive connection, sync or asyncio.

The standard library only: ``http.client`` for the sync client, asyncio
streams for the async one (the router answers every request with a
Content-Length, so reading an answer is a status line, headers and that
many bytes). A request fails as ``ApiError`` (the router's answer: status,
reason code, message, issues) or ``ConnectError`` (no answer at all).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import msgspec

from hookrouter.admin.schemas import ErrorBody

T = TypeVar("T")
PREFIX = "/admin/v1"
USER_AGENT = "hookrouter-client"
# A request on a reused connection that the router closed meanwhile (idle
# keep-alive timeout) is sent again once, on a new connection, when it is
# safe to repeat: as urllib3 does for idempotent methods.
_REPEATABLE = frozenset({"GET", "PUT", "DELETE"})


class ConnectError(Exception):
    """The router could not be reached, or closed the connection without answering."""


class ApiError(Exception):
    """The router's answer to a request it refused."""

    def __init__(self, status: int, body: ErrorBody, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {body.error}: {body.message}")
        self.status = status
        self.error = body.error
        self.message = body.message
        self.issues = body.issues or []
        self.retry_after = retry_after


def path_part(value: str) -> str:
    """One path segment, percent-encoded (ids with ``/`` or spaces stay one segment)."""
    return quote(value, safe="")


def query_string(params: Mapping[str, Any]) -> str:
    given = {
        k: ("true" if v else "false") if isinstance(v, bool) else v
        for k, v in params.items()
        if v is not None
    }
    return "?" + urlencode(given) if given else ""


def encode(body: Any) -> bytes:
    return msgspec.json.encode(body)


def decode(status: int, headers: Mapping[str, str], data: bytes, result: type[T]) -> T:
    """The answer as ``result``, or ``ApiError`` for a status outside 2xx."""
    if not 200 <= status < 300:
        try:
            error = msgspec.json.decode(data, type=ErrorBody)
        except msgspec.MsgspecError:
            error = ErrorBody("http_error", data.decode(errors="replace")[:200] or str(status))
        retry = headers.get("retry-after")
        raise ApiError(status, error, float(retry) if retry and retry.isdigit() else None)
    if result is type(None):
        return None
    return msgspec.json.decode(data, type=result)


def _split(base_url: str) -> tuple[str, int, str]:
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the client speaks plain http:// to a router, got {base_url!r}")
    return parts.hostname, parts.port or 80, parts.path.rstrip("/")


def _headers(token: str, body: bytes | None, extra: Mapping[str, str]) -> dict[str, str]:
    headers = {"authorization": f"Bearer {token}", "user-agent": USER_AGENT, **extra}
    if body is not None:
        headers["content-type"] = "application/json"
    return headers


class SyncTransport:
    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self._host, self._port, self._root = _split(base_url)
        self._token = token
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        sent = _headers(self._token, body, headers or {})
        target = self._root + PREFIX + path
        for attempt in (1, 2):
            reused = self._conn is not None
            conn = self._conn or http.client.HTTPConnection(
                self._host, self._port, timeout=self._timeout
            )
            self._conn = conn
            try:
                conn.request(method, target, body=body, headers=sent)
                response = conn.getresponse()
                data = response.read()
            except (http.client.HTTPException, OSError) as exc:
                self.close()
                if attempt == 1 and reused and method in _REPEATABLE:
                    continue
                raise ConnectError(
                    f"cannot reach the router at {self._host}:{self._port}: {exc}"
                ) from exc
            got = {k.lower(): v for k, v in response.getheaders()}
            if response.will_close:
                self.close()
            return response.status, got, data
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class AsyncTransport:
    """One connection, one request at a time (a lock orders concurrent calls)."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self._host, self._port, self._root = _split(base_url)
        self._token = token
        self._timeout = timeout
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock = asyncio.Lock()

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        sent = _headers(self._token, body, headers or {})
        sent["host"] = f"{self._host}:{self._port}"
        sent["content-length"] = str(len(body or b""))
        head = f"{method} {self._root}{PREFIX}{path} HTTP/1.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in sent.items()) + "\r\n"
        async with self._lock:
            for attempt in (1, 2):
                reused = self._streams is not None
                try:
                    return await asyncio.wait_for(
                        self._exchange(head.encode("latin-1") + (body or b"")), self._timeout
                    )
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                    await self.close()
                    if attempt == 1 and reused and method in _REPEATABLE:
                        continue
                    raise ConnectError(
                        f"cannot reach the router at {self._host}:{self._port}: {exc!r}"
                    ) from exc
        raise AssertionError("unreachable")

    async def _exchange(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self._host, self._port)
        reader, writer = self._streams
        writer.write(request)
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        headers: dict[str, str] = {}
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        data = await reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, headers, data

    async def close(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()
            with contextlib.suppress(OSError):
                await streams[1].wait_closed()


__all__ = [
    "ApiError",
    "AsyncTransport",
    "ConnectError",
    "SyncTransport",
    "decode",
    "encode",
    "path_part",
    "query_string",
]
