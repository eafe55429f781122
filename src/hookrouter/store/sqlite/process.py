"""Process-wide SQLite settings, applied once by ``hookrouter serve`` before any connection opens.

Allocation counters
-------------------

SQLite counts every allocation it makes ("memory status") under one global
mutex, shared by all connections of the process. The router runs SQLite on
three threads at once (the writer on the event loop, the checkpointer, the
dedup worker), and that mutex was their busiest meeting point: traced under
end-to-end load (``perf record -e syscalls:sys_enter_futex`` with call
graphs), a large share of the router's futex calls came from
``sqlite3Malloc``/``sqlite3_free`` contending for it, each a sleep and a
wake-up on two threads. The router never reads those counters (no
``sqlite3_memory_used``, no soft heap limit), so it turns them off.

``sqlite3_config`` only works while SQLite is not initialised: the library
is shut down first, which is only allowed while no connection is open;
hence a process-start step of the server, not something a library user's
process gets by importing hookrouter. The function is reached through the
``_sqlite3`` extension's own handle, so it configures the very SQLite that
Python's ``sqlite3`` uses, whether linked statically or shared.

Parameter adapters
------------------
Python's ``sqlite3`` binds a parameter that is exactly an int, float or str
directly; anything else, None and bytes included, first goes through its
adapter registry, and when no adapter is registered it also asks the
protocol for ``__adapt__``, a failed lookup that raises and clears an
AttributeError (formatted message and all), which costs several times an
adapter found in the registry; with a body and a couple of NULLs per event
it showed clearly in the router's instruction profile. The adapters
registered here return their argument unchanged, so what is bound, and
stored, is the same.
"""

from __future__ import annotations

import ctypes
import logging
import sqlite3
from typing import Final

log = logging.getLogger(__name__)

_SQLITE_OK: Final = 0
_SQLITE_CONFIG_MEMSTATUS: Final = 9  # sqlite3.h


def disable_memory_status() -> bool:
    """Turn SQLite's allocation counters off; True when done.

    Call before the process opens its first SQLite connection. Returns False
    (and logs why) where the library cannot be reached or refuses, and the
    process simply runs with SQLite's defaults.
    """
    try:
        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)
        shut, config, init = lib.sqlite3_shutdown, lib.sqlite3_config, lib.sqlite3_initialize
    except (ImportError, OSError, AttributeError) as exc:
        log.info("sqlite: process settings left at their defaults (%s)", exc)
        return False
    steps = (shut(), config(_SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0)), init())
    if any(code != _SQLITE_OK for code in steps):
        log.info("sqlite: memory status left on (shutdown, config, initialize -> %s)", steps)
        return False
    return True


def register_identity_adapters() -> None:
    """Adapters for None and bytes that return the value itself (see the module docstring).

    Both are C callables, cheaper to call than a Python function:
    ``bytes.__bytes__`` returns an exact bytes object itself (a method call;
    the ``bytes`` constructor, used before, parses its arguments first and
    cost more per bound value), and
    the ``get`` of an empty dict answers None, which is what it is given (it
    is only called with None).
    """
    sqlite3.register_adapter(bytes, bytes.__bytes__)
    sqlite3.register_adapter(type(None), _EMPTY.get)


_EMPTY: Final[dict[None, None]] = {}

__all__ = ["disable_memory_status", "register_identity_adapters"]
