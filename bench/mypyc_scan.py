"""Where compiled code still takes Python's slow paths: ``python -m bench.mypyc_scan``.

mypyc turns most of a typed function into direct C, but some constructs
still go through the generic object protocol, each a few hundred
instructions: a module-level name that is not ``Final`` (a globals-dict
lookup per use), an attribute of an object whose class is not compiled or
is only known as a Protocol (a lookup by name), a star call (``f(*args)``:
list, tuple, argument parsing). This reads the C that the last build
generated (``build/__native_*.c``, newest first) and lists, per compiled
function, the names it looks up that way:

    .venv/bin/python -m bench.mypyc_scan                   # every function
    .venv/bin/python -m bench.mypyc_scan _verify_and_store DeliveryEngine____pump

A name listed is not necessarily slow: lookups on an error branch never run,
and calls into the stdlib or asyncio have no faster form. It is a map for
reading the hot functions, whose names come from ``bench.instructions --keep``
or ``bench.perf``; nothing is measured here.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

_DEFINITION = re.compile(r"^\s*\S.*\b(CPyDef_\w+)\(.*\)\s*\{\s*$")
_NAME = re.compile(r"/\* '([^']+)' \*/")
# What the generated C calls for each kind of slow lookup.
_KINDS = (
    ("PyObject_VectorcallMethod(", "method"),
    ("CPyObject_GetAttr(", "attr"),
    ("CPyDict_GetItem(", "global"),  # only when the dict is the module's globals
)


def newest_build(root: Path) -> Path:
    """The most recently generated mypyc C file under ``root/build``."""
    sources = sorted((root / "build").glob("__native_*.c"), key=lambda p: p.stat().st_mtime)
    if not sources:
        raise SystemExit(f"no build/__native_*.c under {root}: build the package first")
    return sources[-1]


def scan(lines: list[str]) -> dict[str, Counter[str]]:
    """Per ``CPyDef_`` function: ``"kind name"`` of each generic lookup, counted."""
    found: dict[str, Counter[str]] = defaultdict(Counter)
    function = None
    for index, line in enumerate(lines):
        definition = _DEFINITION.match(line)
        if definition:
            function = definition.group(1)
            continue
        kind = next((k for call, k in _KINDS if call in line), None)
        if function is None or kind is None:
            continue
        # mypyc loads the interned name (and the globals dict) on the lines before.
        context = " ".join(lines[max(0, index - 3) : index + 1])
        names = _NAME.findall(context)
        if names and (kind != "global" or "globals" in context):
            found[function][f"{kind} {names[-1]}"] += 1
    return found


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("functions", nargs="*", help="substrings of the C function names to list")
    ap.add_argument("--root", type=Path, default=Path("."), help="the checkout (default: .)")
    args = ap.parse_args(argv)
    source = newest_build(args.root)
    found = scan(source.read_text(errors="replace").splitlines())
    print(f"# {source}")
    for function in sorted(found):
        if args.functions and not any(part in function for part in args.functions):
            continue
        names = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in found[function].items())
        print(f"{function.removeprefix('CPyDef_')}: {names}")


if __name__ == "__main__":
    main()
