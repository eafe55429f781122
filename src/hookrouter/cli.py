"""The ``hookrouter`` command line (work in progress: the lead is writing it)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``hookrouter`` console script."""
    raise SystemExit("hookrouter CLI is not written yet")
