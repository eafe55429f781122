"""Process-wide SQLite settings (``hookrouter serve`` applies them at start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Runs in a fresh interpreter: the settings need a process with no connection open.
_CHILD = """
import ctypes, sqlite3, sys, _sqlite3
from hookrouter.store.sqlite.process import disable_memory_status
applied = disable_memory_status() if sys.argv[2] == "off" else None
conn = sqlite3.connect(sys.argv[1])
conn.execute("CREATE TABLE t (x BLOB)")
conn.executemany("INSERT INTO t VALUES (?)", [(b"x" * 1000,)] * 1000)
conn.commit()
used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
used.restype = ctypes.c_int64
print(applied, used(), conn.execute("SELECT count(*) FROM t").fetchone()[0])
"""


def _python(code: str, *args: str) -> str:
    """What ``code`` printed, run in a fresh interpreter (which must succeed)."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _child(tmp_path: Path, mode: str) -> list[str]:
    return _python(_CHILD, str(tmp_path / f"{mode}.db"), mode).split()


def test_memory_status_is_off_after_the_call_and_sqlite_still_works(tmp_path: Path) -> None:
    applied, used, rows = _child(tmp_path, "off")
    assert (applied, used, rows) == ("True", "0", "1000")


def test_sqlite_counts_allocations_by_default(tmp_path: Path) -> None:
    """The control: without the call SQLite keeps its counters (what the call removes)."""
    applied, used, rows = _child(tmp_path, "default")
    if used == "0":
        pytest.skip("this SQLite was built without memory status")
    assert (applied, rows) == ("None", "1000")
    assert int(used) > 0


_ADAPTERS_CHILD = """
import sqlite3
from hookrouter.store.sqlite.process import register_identity_adapters
register_identity_adapters()
proto = sqlite3.PrepareProtocol
body = bytes(range(256))
assert sqlite3.adapters[(bytes, proto)](body) is body, sqlite3.adapters
assert sqlite3.adapters[(type(None), proto)](None) is None
conn = sqlite3.connect(":memory:")
conn.execute("CREATE TABLE t (a, b, c)")
conn.execute("INSERT INTO t VALUES (?, ?, ?)", (None, body, bytearray(b"x")))
row = conn.execute("SELECT a, typeof(a), b, typeof(b), typeof(c) FROM t").fetchone()
assert row == (None, "null", body, "blob", "blob"), row
print("ok")
"""


def test_identity_adapters_bind_none_and_bytes_exactly_as_before() -> None:
    assert _python(_ADAPTERS_CHILD).strip() == "ok"
