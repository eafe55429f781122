"""Store backends, chosen by name: the one table, and what a backend provides.

A backend is a package under ``store/`` whose module exposes ``BACKEND``, an
object meeting ``StoreBackend``. It is imported only when chosen, so that
choosing one never imports another's dependencies. The store's contracts
(``base``, ``ledger``, ``lifecycle``) never import a backend; runtime and
the command line reach one only through this table.

Options: ``[store]`` holds what every backend shares (``backend``, ``path``,
``retention``, ``max_commit_latency_ms``: ``config``). Everything else a
backend needs sits in its own table, ``[store.<name>]``, which the config
keeps raw and the backend validates (``parse_options``), reporting problems
by key path like the rest of the config. Keys a backend once read directly
under ``[store]`` are handed to it too, to accept with a deprecation warning.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from hookrouter.clock import SYSTEM_CLOCK, Clock
from hookrouter.errors import ConfigError, ConfigIssue, StoreError

if TYPE_CHECKING:
    from hookrouter.config.store import StoreSettings
    from hookrouter.store.base import EventStore

# name -> the module holding its ``BACKEND``. The next backend joins here;
# the first one is the default, used when ``[store]`` names none.
BACKENDS: Final[dict[str, str]] = {
    "sqlite": "hookrouter.store.sqlite.backend",
    "postgres": "hookrouter.store.postgres.backend",
}
DEFAULT_BACKEND: Final = next(iter(BACKENDS))


@dataclass(frozen=True, slots=True)
class BackupResult:
    """What a backup copied."""

    path: Path
    bytes: int
    events: int
    schema_version: int
    seconds: float


Backup = Callable[[Path, Path, bool], BackupResult]
"""``backup(store_path, dest, overwrite)``: a consistent copy; raises ``StoreError``."""


@dataclass(slots=True)
class OptionsInput:
    """A backend's options as the config file gave them, and where problems go."""

    own: Any  # the ``[store.<name>]`` table, None when absent
    legacy: Mapping[str, Any]  # other keys found directly under ``[store]``
    issues: list[ConfigIssue]
    warnings: list[ConfigIssue]


class StoreBackend(Protocol):
    """What a backend package provides besides its ``EventStore``."""

    @property
    def name(self) -> str: ...

    def parse_options(self, given: OptionsInput) -> object:
        """Validate the backend's options; append problems to ``given.issues``.

        Unknown keys, in its own table or among ``given.legacy``, are problems.
        Returns the options for ``open`` (defaults where a value was wrong).
        """
        ...

    def open(self, path: Path, options: object, *, clock: Clock) -> EventStore:
        """Build the store (not yet opened) over ``path`` with parsed ``options``."""
        ...

    @property
    def store_class(self) -> Callable[..., EventStore]:
        """The store's constructor, for tests and tools that pass its keyword arguments."""
        ...

    def prepare_process(self) -> None:
        """Process-wide set-up, once, before the server opens its first store."""
        ...

    @property
    def backup(self) -> Backup | None:
        """A consistent copy of a store on disk (``hookrouter backup``); None: not offered."""
        ...


def backend(name: str) -> StoreBackend:
    """The backend called ``name``; ``ConfigError`` naming the known ones if none is."""
    try:
        module_name = BACKENDS[name]
    except KeyError:
        wanted = ", ".join(repr(n) for n in BACKENDS)
        raise ConfigError(
            [ConfigIssue("store.backend", f"unknown value {name!r} (expected one of {wanted})")]
        ) from None
    found: StoreBackend = importlib.import_module(module_name).BACKEND
    return found


@dataclass(frozen=True, slots=True)
class Choice:
    """A backend with its validated options (``choose``)."""

    backend: StoreBackend
    options: object
    warnings: tuple[ConfigIssue, ...]

    def open(self, path: Path, *, clock: Clock = SYSTEM_CLOCK) -> EventStore:
        return self.backend.open(path, self.options, clock=clock)


def choose(settings: StoreSettings) -> Choice:
    """The configured backend with its options checked; ``ConfigError`` listing every problem."""
    chosen = backend(settings.backend or DEFAULT_BACKEND)
    others = dict(settings.backend_keys)
    given = OptionsInput(others.pop(chosen.name, None), others, [], [])
    options = chosen.parse_options(given)
    if given.issues:
        raise ConfigError(given.issues)
    return Choice(chosen, options, tuple(given.warnings))


def open_configured(settings: StoreSettings, *, clock: Clock = SYSTEM_CLOCK) -> EventStore:
    """The store ``[store]`` describes (not yet opened)."""
    return choose(settings).open(settings.path, clock=clock)


def backup(settings: StoreSettings, dest: Path, *, overwrite: bool = False) -> BackupResult:
    """Back the configured store up to ``dest``; ``StoreError`` when its backend cannot."""
    chosen = backend(settings.backend or DEFAULT_BACKEND)
    run = chosen.backup
    if run is None:
        raise StoreError(
            f"the {chosen.name!r} store backend has no backup command; "
            "use the backing service's own tools"
        )
    return run(settings.path, dest, overwrite)


__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "Backup",
    "BackupResult",
    "Choice",
    "OptionsInput",
    "StoreBackend",
    "backend",
    "backup",
    "choose",
    "open_configured",
]
