"""Typed reading of untrusted TOML/JSON tables, collecting issues by key path.

Validation never stops at the first problem: every reader call records an
issue (``sources[2].provider: unknown provider 'strip'``) and returns a safe
fallback, so ``hookrouter check-config`` can print all problems at once.
The same readers validate config files and admin API documents.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from hookrouter.errors import ConfigIssue

ENV_PREFIX = "env:"

N = TypeVar("N", int, float)

# Whether an ``env:NAME`` value at a key path may be read from the environment:
# (key path, the value) -> allowed. The config file's readers allow every one;
# the admin API's only those the operator's file already put there.
EnvRefs = Callable[[str, str], bool]
ENV_REFUSED = (
    "env: references belong in the operator's config file; the admin API does not read "
    "the router's environment: send the value itself"
)


def any_env_ref(path: str, value: str) -> bool:
    return True


def no_env_ref(path: str, value: str) -> bool:
    return False


class TableReader:
    """Reads one table (``path`` names it in messages) and tracks unknown keys."""

    def __init__(
        self,
        table: Any,
        path: str,
        issues: list[ConfigIssue],
        *,
        env_refs: EnvRefs = any_env_ref,
    ) -> None:
        self.path = path
        self.issues = issues
        self.env_refs = env_refs
        if not isinstance(table, Mapping):
            self.problem("", f"must be a table, not {_kind(table)}")
            table = {}
        self.table: Mapping[str, Any] = table
        self._seen: set[str] = set()

    def key_path(self, key: str) -> str:
        if not key:
            return self.path
        return f"{self.path}.{key}" if self.path else key

    def problem(self, key: str, message: str) -> None:
        self.issues.append(ConfigIssue(self.key_path(key), message))

    def has(self, key: str) -> bool:
        return key in self.table

    def raw(self, key: str) -> Any:
        self._seen.add(key)
        return self.table.get(key)

    def string(self, key: str, default: str | None = None, *, required: bool = False) -> str:
        value = self.raw(key)
        if value is None:
            if required:
                self.problem(key, "is required")
            return default or ""
        if not isinstance(value, str):
            self.problem(key, f"must be a string, not {_kind(value)}")
            return default or ""
        text: str = value
        if required and not text:
            self.problem(key, "must not be empty")
        return text

    def secret(self, key: str, *, required: bool = False) -> str:
        """A string that may be ``env:NAME`` to read it from the environment."""
        return self.resolve_secret(self.string(key, required=required), key)

    def secret_list(self, key: str, *, required: bool = False) -> list[str]:
        """A list of strings, each of which may be ``env:NAME`` (``[]`` when absent)."""
        raw = self.string_list(key, required=required) or []
        return [self.resolve_secret(s, f"{key}[{i}]") for i, s in enumerate(raw)]

    def resolve_secret(self, value: str, key: str) -> str:
        if not value.startswith(ENV_PREFIX):
            return value
        if not self.env_refs(self.key_path(key), value):
            # Refused before the environment is read: the answer must not tell
            # whether a variable exists.
            self.problem(key, ENV_REFUSED)
            return ""
        name = value[len(ENV_PREFIX) :]
        resolved = os.environ.get(name)
        if not resolved:
            self.problem(key, f"environment variable {name} is not set")
            return ""
        return resolved

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.string(key, default)
        if value not in choices:
            wanted = ", ".join(repr(c) for c in choices)
            self.problem(key, f"unknown value {value!r} (expected one of {wanted})")
            return default
        return value

    def integer(
        self, key: str, default: int, *, minimum: int = 0, maximum: int | None = None
    ) -> int:
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(key, f"must be an integer, not {_kind(value)}")
            return default
        return self._bounded(key, value, default, minimum, maximum)

    def number(
        self, key: str, default: float, *, minimum: float = 0.0, maximum: float | None = None
    ) -> float:
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problem(key, f"must be a number, not {_kind(value)}")
            return default
        return self._bounded(key, float(value), default, minimum, maximum)

    def _bounded(self, key: str, value: N, default: N, minimum: N, maximum: N | None) -> N:
        if value < minimum:
            self.problem(key, f"must be at least {minimum}, got {value}")
            return default
        if maximum is not None and value > maximum:
            self.problem(key, f"must be at most {maximum}, got {value}")
            return default
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problem(key, f"must be true or false, not {_kind(value)}")
            return default
        return value

    def string_list(self, key: str, *, required: bool = False) -> list[str] | None:
        value = self.raw(key)
        if value is None:
            if required:
                self.problem(key, "is required")
            return None
        if not isinstance(value, list):
            self.problem(key, f"must be a list of strings, not {_kind(value)}")
            return None
        out: list[str] = []
        for index, item in enumerate(value):
            if isinstance(item, str):
                out.append(item)
            else:
                self.problem(f"{key}[{index}]", f"must be a string, not {_kind(item)}")
        return out

    def sub(self, key: str) -> TableReader | None:
        """A nested table, or None when absent."""
        value = self.raw(key)
        if value is None:
            return None
        return TableReader(value, self.key_path(key), self.issues, env_refs=self.env_refs)

    def finish(self, *, extra_known: tuple[str, ...] = ()) -> None:
        """Report keys nobody read: usually a typo the user wants to hear about."""
        for key in self.table:
            if key not in self._seen and key not in extra_known:
                self.problem(key, "unknown key")


def issues_from_pairs(base: str, pairs: list[tuple[str, str]]) -> list[ConfigIssue]:
    """Turn (relative key path, message) pairs from a subsystem into issues."""
    out = []
    for rel, message in pairs:
        if rel.startswith("["):
            path = f"{base}{rel}"
        elif base and rel:
            path = f"{base}.{rel}"
        else:
            path = base or rel
        out.append(ConfigIssue(path, message))
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a table"
    return type(value).__name__
