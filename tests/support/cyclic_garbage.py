"""What a piece of code leaves for the cyclic garbage collector.

Objects freed by reference counting go at once; objects in a reference cycle
wait for a collection, which pauses the thread it runs on for as long as it
takes to scan the heap. ``cyclic_garbage`` runs the collector with
``DEBUG_SAVEALL`` after the block and reports what it would have freed.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_garbage() -> Iterator[Counter[str]]:
    """Yields a Counter, filled on exit with the type names of cyclic garbage made meanwhile."""
    found: Counter[str] = Counter()
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield found
    finally:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            found.update(type(obj).__qualname__ for obj in gc.garbage)
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            if was_enabled:
                gc.enable()
