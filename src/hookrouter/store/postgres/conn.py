"""The connection type every statement helper takes: a plain connection or a pooled one."""

from __future__ import annotations

from typing import TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

Conn: TypeAlias = asyncpg.Connection | PoolConnectionProxy

__all__ = ["Conn"]
