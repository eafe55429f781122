"""What the generated client methods call: encode, send, decode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, Self, TypeVar

import msgspec

from hookrouter.client.transport import (
    AsyncTransport,
    SyncTransport,
    decode,
    encode,
    query_string,
)

T = TypeVar("T")


class DataList(msgspec.Struct, Generic[T]):
    """A list answer, ``{"data": [...]}``; the methods return its ``data``."""

    data: list[T]


class DataPage(msgspec.Struct, Generic[T]):
    """One page of a list by id; the methods follow ``next_after`` and return every item."""

    data: list[T]
    next_after: str | None


class SyncBase:
    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        self._transport = SyncTransport(base_url, token, timeout)

    def _call(
        self,
        method: str,
        path: str,
        *,
        result: type[T],
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str | None] | None = None,
    ) -> T:
        status, got, data = self._transport.request(
            method,
            path + query_string(query or {}),
            None if body is None else encode(body),
            {k: v for k, v in (headers or {}).items() if v is not None},
        )
        return decode(status, got, data, result)

    def _every_page(
        self, path: str, query: Mapping[str, Any], result: type[DataPage[T]]
    ) -> list[T]:
        """Every item of a list answered a page at a time, following ``next_after``."""
        items: list[T] = []
        after: str | None = None
        while True:
            page = self._call("GET", path, query={**query, "after": after}, result=result)
            items.extend(page.data)
            if page.next_after is None:
                return items
            after = page.next_after

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncBase:
    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        self._transport = AsyncTransport(base_url, token, timeout)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        result: type[T],
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str | None] | None = None,
    ) -> T:
        status, got, data = await self._transport.request(
            method,
            path + query_string(query or {}),
            None if body is None else encode(body),
            {k: v for k, v in (headers or {}).items() if v is not None},
        )
        return decode(status, got, data, result)

    async def _every_page(
        self, path: str, query: Mapping[str, Any], result: type[DataPage[T]]
    ) -> list[T]:
        """Every item of a list answered a page at a time, following ``next_after``."""
        items: list[T] = []
        after: str | None = None
        while True:
            page = await self._call("GET", path, query={**query, "after": after}, result=result)
            items.extend(page.data)
            if page.next_after is None:
                return items
            after = page.next_after

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
