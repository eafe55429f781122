"""Exact duplicate detection without a randomly written index: a memory tier over sorted runs.

Theory of operation
-------------------
The dedup key (source id, provider event id) is random, so a b-tree index
on it makes every append dirty a page of its own once the index has more
leaves than a group commit has events: measured at about half of what an
append cost (``tests/store/bench_dedup_index.py``). This module keeps the same exact
answer with writes that have locality, the way an LSM tree does:

* the **hot tier** is a dict of the keys of the newest events (the ones
  committed after the last flush). It needs no writes of its own: the
  events table is its durable copy, and it is rebuilt from the events above
  ``flushed_rowid`` when the store opens;
* when it reaches ``TierPolicy.hot_limit`` keys the committer **rotates**
  it: the dict becomes the *flushing* tier and a new hot dict starts. A
  background thread writes the flushing keys as one sorted **run** (whole
  pages, written once) and then publishes it;
* runs form levels: ``fanout`` runs of one level are merged into one run of
  the next, so every key is rewritten about once per level (log of the
  store's size), not once per neighbour inserted beside it;
* each run has a Bloom filter in memory, and one **summary** filter holds
  the hashes of every run, so a new key (the usual case) costs a dict probe,
  a hash (``key_hash``) and one summary probe however many runs there are;
  only a summary hit goes on to the runs' own filters, and only a run's
  filter hit reads that run from disk. (Each filter probe is several random
  memory reads: with a run per filter, a store of many runs paid that many
  times over per event.) The summary only grows: merges drop keys, it keeps them
  (a few more false positives until the next rebuild). The worker adds a
  flush's hashes to it before publishing the run, and builds a bigger one
  from the runs when it is full (``summary_due``).

Keys of events that retention deleted stay in the tiers until the next
merge drops them, so a hit is always confirmed against the events table by
whoever probes (``dedup``): the tiers may over-report, never miss.

Threads: the committer (one thread at a time) probes, adds, and rotates; the
dedup worker publishes runs; the read thread probes. Publishing replaces
``runs`` first and then clears ``flushing``, and probes read ``flushing``
before ``runs``, so a key is always in one of the two a prober sees. A
merged run's inputs are deleted from disk only once no prober can still be
using a ``runs`` tuple that names them (``generation`` and ``Pins``).

Pure: no SQLite, no threads started here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import xxhash
from rbloom import Bloom

IDLE: Final = -1  # a pin slot that is using no runs tuple


def dedup_key(source_id: str, provider_event_id: str) -> str:
    """The one string a source's provider event id is deduplicated under.

    The source id's length leads, so no two (source, id) pairs share a key
    whatever characters either contains.
    """
    return f"{len(source_id)}:{source_id}{provider_event_id}"


# The function ``key_hash`` computes, as recorded in the runs file's meta: a
# file written with another one is rebuilt from the events when it is opened
# (``dedup.open_tiers``). Version 1 was blake2b-64 (hashlib).
KEY_HASH_NAME: Final = "xxh3-64"
_xxh3_64: Final = xxhash.xxh3_64_intdigest
_SIGNED_OFFSET: Final = 1 << 63


def key_hash(key: str) -> int:
    """The 64-bit hash runs store and filters test instead of the key itself.

    Stable across processes (the runs are on disk), unlike ``hash()``. Runs
    hold (hash, event id) pairs: 8-byte integer keys make a run a third the
    size of one keyed by text and cheaper to write and merge; a hash match
    is confirmed against the event's own source and provider id, so a
    collision costs one extra read, never a wrong answer.

    XXH3 rather than blake2b: no cryptographic property is needed (a forged
    collision costs one read), and it is about ten times cheaper per key than
    ``hashlib.blake2b`` (object set-up dominates for keys this short);
    every event is hashed twice, at ingest and when its run is written.
    The offset maps the unsigned digest onto SQLite's signed 64-bit integers.
    """
    return _xxh3_64(key.encode()) - _SIGNED_OFFSET


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """Sizes of the tiers (see module docstring)."""

    # 32k keys: ~6 MiB of dict, a flush every few seconds under load, and a
    # run of ~400 whole pages.
    hot_limit: int = 32_768
    # 8 runs per level: a key is rewritten once per level (~2 levels at 1M
    # keys, ~3 at 10M), a probe checks up to 7 cheap filters per level.
    fanout: int = 8
    # 0.1 %: ~14 bits per key (~18 MiB of filters for 10M keys); a false
    # positive costs one indexed read of the run.
    false_positive_rate: float = 0.001
    # 1 %: ~10 bits per key, at twice the keys of the runs when built; a false
    # positive costs the runs' filter probes that the summary saved.
    summary_false_positive_rate: float = 0.01

    def __post_init__(self) -> None:
        if self.hot_limit < 1 or self.fanout < 2:
            raise ValueError("hot_limit must be >= 1 and fanout >= 2")
        for rate in (self.false_positive_rate, self.summary_false_positive_rate):
            if not 0.0 < rate < 1.0:
                raise ValueError("false positive rates must be between 0 and 1")

    def new_filter(self, keys: int) -> Bloom:
        """An empty filter sized for ``keys`` keys."""
        return Bloom(max(keys, 1), self.false_positive_rate)

    def new_summary(self, run_keys: int) -> tuple[Bloom, int]:
        """An empty summary filter for runs holding ``run_keys`` keys, and its capacity.

        Twice the keys (at least four flushes' worth), so that it is rebuilt
        once per doubling of the store, not at every flush.
        """
        capacity = max(2 * run_keys, 4 * self.hot_limit)
        return Bloom(capacity, self.summary_false_positive_rate), capacity


@dataclass(frozen=True, slots=True)
class Run:
    """One sorted run on disk and its in-memory filter."""

    run_id: int
    level: int
    keys: int
    bloom: Bloom = field(compare=False, repr=False)


@dataclass(slots=True)
class Pins:
    """Which ``runs`` generation each prober is using (``IDLE`` when none)."""

    committer: int = IDLE
    reader: int = IDLE

    def clear_of(self, generation: int) -> bool:
        """True when no prober can still hold a runs tuple older than ``generation``."""
        return all(p == IDLE or p >= generation for p in (self.committer, self.reader))


class DedupTiers:
    """The hot, flushing and run tiers of the dedup index (see module docstring)."""

    def __init__(self, policy: TierPolicy, runs: tuple[Run, ...], flushed_rowid: int) -> None:
        self.policy = policy
        self.hot: dict[str, str] = {}
        self.flushing: dict[str, str] | None = None
        self.flushing_upto = 0  # largest events rowid whose key is in flushing or a run
        self.runs = runs
        self.generation = 0
        self.flushed_rowid = flushed_rowid
        self.pins = Pins()
        # None until built (``install_summary``): then every run's filter is probed.
        self.summary: Bloom | None = None
        self.summary_room = 0  # keys the summary takes before it is due for a rebuild
        self.rotations = 0
        self.filter_hits = 0
        self.filter_false_positives = 0

    # ---- probing (committer or reader) ------------------------------------

    def find_in_memory(self, key: str) -> str | None:
        """The event id the hot or flushing tier holds for ``key``, or None."""
        found = self.hot.get(key)
        if found is None:
            flushing = self.flushing
            if flushing is not None:
                found = flushing.get(key)
        return found

    def runs_that_may_hold(self, hashed: int, runs: tuple[Run, ...]) -> list[int]:
        """Ids of the runs (newest first) whose filter admits a key hashed to ``hashed``.

        ``runs`` is read before this call and the summary in it: a run is in
        the summary before it is published (see the module docstring).
        """
        summary = self.summary
        if summary is not None and hashed not in summary:
            return []
        return [run.run_id for run in runs if hashed in run.bloom]

    # ---- the summary (worker, or the opener) -------------------------------

    def install_summary(self, summary: Bloom, room: int) -> None:
        """Use ``summary``, which holds every published run's hashes, from now on."""
        self.summary, self.summary_room = summary, room

    def summary_due(self) -> bool:
        """No summary yet, or the current one took more keys than it was sized for."""
        return self.summary is None or self.summary_room < 0

    # ---- the committer -----------------------------------------------------

    def add(self, key: str, event_id: str) -> None:
        """Record a committed event's key (committer thread, after the commit)."""
        self.hot[key] = event_id

    def rotation_due(self) -> bool:
        """Hot tier full and no flush under way."""
        return self.flushing is None and len(self.hot) >= self.policy.hot_limit

    def rotate(self, upto_rowid: int) -> dict[str, str]:
        """Committer thread, between commits: hand the hot tier to the flush.

        ``upto_rowid`` is the largest events rowid committed so far: every
        event up to it now has its key in ``flushing`` or in a run.
        """
        batch, self.hot = self.hot, {}
        self.flushing, self.flushing_upto = batch, upto_rowid
        self.rotations += 1
        return batch

    # ---- the worker --------------------------------------------------------

    def publish(self, run: Run, *, replaces: tuple[int, ...] = (), flushed: bool = False) -> int:
        """Make ``run`` visible (replacing merged inputs); return the new generation.

        ``flushed``: ``run`` holds the flushing tier, which is dropped after
        the runs are replaced (order matters, see module docstring).
        """
        kept = tuple(r for r in self.runs if r.run_id not in replaces)
        self.runs = tuple(sorted((*kept, run), key=lambda r: r.run_id, reverse=True))
        self.generation += 1
        if flushed:
            self.flushed_rowid = self.flushing_upto
            self.flushing = None
        return self.generation

    def merge_candidate(self) -> tuple[Run, ...] | None:
        """The runs of the lowest level that has ``fanout`` of them, oldest first."""
        by_level: dict[int, list[Run]] = {}
        for run in self.runs:
            by_level.setdefault(run.level, []).append(run)
        for level in sorted(by_level):
            members = by_level[level]
            if len(members) >= self.policy.fanout:
                return tuple(sorted(members, key=lambda r: r.run_id))
        return None

    # ---- introspection -----------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Sizes and counters for metrics and tests."""
        flushing = self.flushing
        runs = self.runs
        return {
            "hot_keys": len(self.hot),
            "flushing_keys": 0 if flushing is None else len(flushing),
            "runs": len(runs),
            "run_keys": sum(r.keys for r in runs),
            "levels": len({r.level for r in runs}),
            "rotations": self.rotations,
            "filter_hits": self.filter_hits,
            "filter_false_positives": self.filter_false_positives,
            "summary_room": self.summary_room if self.summary is not None else -1,
        }

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"DedupTiers(hot={s['hot_keys']}, flushing={s['flushing_keys']}, "
            f"runs={s['runs']}, run_keys={s['run_keys']})"
        )
