"""Durations (``"250ms"``, ``"5s"``, ``"2h"``) and retry schedules, parsed once into seconds.

The config file and admin API documents write durations as text; everything
past this module sees float seconds. A retry schedule is the list of delays
before attempts 2, 3, ... (``delivery/policy.py`` gives it its meaning).
"""

from __future__ import annotations

import re
from typing import NewType

from hookrouter.config.reader import TableReader
from hookrouter.errors import ConfigIssue

# Longest accepted single delay: one week. Anything longer is almost surely a
# typo ("10d" meant "10h") and would keep a delivery invisible for too long.
MAX_DELAY_SECONDS = 7 * 86400.0

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")

RetrySchedule = NewType("RetrySchedule", tuple[float, ...])
"""Delays in seconds: ``schedule[i]`` is the wait before attempt ``i + 2``; ``()`` = one attempt."""


def parse_duration(text: str, *, maximum: float = MAX_DELAY_SECONDS) -> float:
    """Seconds in a duration such as ``"250ms"``, ``"5s"``, ``"30m"``, ``"2h"``, ``"1d"``.

    Raises ``ValueError`` with a message fit for a config issue. ``maximum``
    defaults to the longest retry delay.
    """
    match = _DURATION_RE.match(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r}: use a number and a unit (ms, s, m, h, d)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"duration {text!r} must be greater than zero")
    if seconds > maximum:
        raise ValueError(f"duration {text!r} is longer than {maximum / 86400:g} days")
    return seconds


def parse_retry_schedule(value: object, path: str) -> tuple[RetrySchedule, list[ConfigIssue]]:
    """Parse a schedule such as ``["5s", "5m"]`` into delays in seconds.

    Returns ``(delays, issues)``; when ``issues`` is non-empty the delays are
    not usable. Issues carry the key path of the offending element, e.g.
    ``endpoints[2].retry_schedule[1]``. An empty list is valid: one attempt, no retries.
    """
    if not isinstance(value, list | tuple):
        issue = ConfigIssue(path, 'must be a list of durations such as ["5s", "5m"]')
        return RetrySchedule(()), [issue]
    delays: list[float] = []
    issues: list[ConfigIssue] = []
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        if not isinstance(item, str):
            issues.append(ConfigIssue(item_path, 'must be a duration string such as "5s"'))
            continue
        try:
            delays.append(parse_duration(item))
        except ValueError as exc:
            issues.append(ConfigIssue(item_path, str(exc)))
    return RetrySchedule(tuple(delays)), issues


def read_retry_schedule(r: TableReader, key: str = "retry_schedule") -> RetrySchedule | None:
    """The table's schedule, or None when it has none or it is invalid (an issue is recorded)."""
    value = r.raw(key)
    if value is None:
        return None
    schedule, issues = parse_retry_schedule(value, r.key_path(key))
    r.issues.extend(issues)
    return None if issues else schedule


def retry_schedule(*durations: str) -> RetrySchedule:
    """A schedule from duration literals known to be valid; raises ``ValueError`` otherwise."""
    return RetrySchedule(tuple(parse_duration(d) for d in durations))


# Eight attempts over about 32.6 hours, as Svix does (the first attempt is immediate).
DEFAULT_RETRY_SCHEDULE = retry_schedule("5s", "5m", "30m", "2h", "5h", "10h", "10h")


def read_window(r: TableReader, key: str) -> float | None:
    """An optional duration where ``"0"`` (or 0) turns a feature off; None when absent."""
    value = r.raw(key)
    if value is None:
        return None
    if value == "0" or (type(value) is int and value == 0):
        return 0.0
    if not isinstance(value, str):
        r.problem(key, 'must be a duration string such as "1h", or "0" to turn it off')
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        r.problem(key, str(exc))
        return None
