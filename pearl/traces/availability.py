"""One model of preemptible GPU availability over time (paper §4.5, §6.1).

An `AvailabilityTrace` is a frozen list of `Change`s over `[0, duration_s]`. Each change
happens at `time_s` and is either

- a *count* change: from now on `num_gpus` preemptible GPUs are available, or
- an *id* change: the GPUs `added` appear and the GPUs `removed` disappear.

A trace uses one kind throughout. Before the first change no preemptible GPU is available.
`reclaim_notice_s` is how long before a GPU disappears the provider warns (the world sends a
reclaim notice that much earlier). Reserved (dedicated) GPUs are never part of a trace.

Two views serve the two worlds:

- `count_at(t_s)` / `levels()` / `stats()`: how many GPUs, for planning, bounds and reports;
- `gpu_events()`: an explicit-id stream `(time_s, added, removed)` with stable ids. For a
  count trace the ids are `pre0, pre1, ...`; GPUs are added in ascending index order and,
  when the count drops, the most recently added are removed first, so while the count is n
  the live set is exactly `pre0 .. pre{n-1}`. Deterministic for equal traces.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from pearl.errors import PathError

ID_PREFIX = "pre"


class TraceError(PathError):
    """A trace that breaks an invariant; `path` is a JSON path (e.g. `changes[3].time_s`)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One availability change at `time_s`: either `num_gpus` (a count) or ids added/removed."""

    time_s: float
    num_gpus: int | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def is_count(self) -> bool:
        return self.num_gpus is not None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"time_s": self.time_s}
        if self.num_gpus is not None:
            doc["num_gpus"] = self.num_gpus
        if self.added:
            doc["add"] = list(self.added)
        if self.removed:
            doc["remove"] = list(self.removed)
        return doc


class GpuEvent(NamedTuple):
    """GPUs that appear and disappear at `time_s` (unpacks as `(time_s, added, removed)`)."""

    time_s: float
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TraceStats:
    """Summary of a trace over `[0, duration_s]`; `mean_gpus` is time-weighted."""

    duration_s: float
    min_gpus: int
    mean_gpus: float
    max_gpus: int
    num_changes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "duration_s": self.duration_s,
            "min_gpus": self.min_gpus,
            "mean_gpus": round(self.mean_gpus, 4),
            "max_gpus": self.max_gpus,
            "num_changes": self.num_changes,
        }


@dataclass(frozen=True)
class AvailabilityTrace:
    """Preemptible availability over `[0, duration_s]`; validated on construction.

    Invariants: `duration_s > 0`; `reclaim_notice_s >= 0`; change times strictly increase
    and lie in `[0, duration_s]`; all changes are of one kind; counts are `>= 0`; an id
    change adds only ids not live and removes only live ids, and is not empty.
    `source` is free text (where the trace came from, attribution).
    """

    name: str
    duration_s: float
    reclaim_notice_s: float
    changes: tuple[Change, ...]
    source: str = ""

    def __post_init__(self) -> None:
        _check(self)
        levels = _levels(self.changes)
        object.__setattr__(self, "_times", tuple(t for t, _ in levels))
        object.__setattr__(self, "_counts", tuple(n for _, n in levels))

    # -- constructors -------------------------------------------------------------------

    @classmethod
    def from_counts(
        cls,
        name: str,
        duration_s: float,
        points: Iterable[tuple[float, int]],
        *,
        reclaim_notice_s: float = 0.0,
        source: str = "",
    ) -> AvailabilityTrace:
        """A count trace from `(time_s, num_gpus)` step points in time order.

        Points at the same time collapse to the last one; points that do not change the
        count are dropped (a count of 0 at the start is dropped too: 0 is the default).
        """
        merged: list[tuple[float, int]] = []
        for t, n in points:
            if merged and merged[-1][0] == t:
                merged[-1] = (t, n)
            else:
                merged.append((t, n))
        changes: list[Change] = []
        current = 0
        for t, n in merged:
            if n != current:
                changes.append(Change(float(t), num_gpus=int(n)))
                current = n
        return cls(name, float(duration_s), float(reclaim_notice_s), tuple(changes), source)

    # -- count view ---------------------------------------------------------------------

    @property
    def is_count(self) -> bool:
        """True for a count trace (also for a trace without changes)."""
        return all(c.is_count for c in self.changes)

    def levels(self) -> tuple[tuple[float, int], ...]:
        """Step points `(time_s, num_gpus)` starting at time 0; one per count change."""
        times: tuple[float, ...] = self._times  # type: ignore[attr-defined]
        counts: tuple[int, ...] = self._counts  # type: ignore[attr-defined]
        return tuple(zip(times, counts, strict=True))

    def count_at(self, t_s: float) -> int:
        """GPUs available at `t_s` (a change at exactly `t_s` counts). After `duration_s` the
        last level holds; `t_s < 0` is an error."""
        if t_s < 0:
            raise ValueError(f"time must be >= 0, got {t_s}")
        times: tuple[float, ...] = self._times  # type: ignore[attr-defined]
        counts: tuple[int, ...] = self._counts  # type: ignore[attr-defined]
        return counts[bisect.bisect_right(times, t_s) - 1]

    def stats(self) -> TraceStats:
        """min/max over `[0, duration_s)`, time-weighted mean, and the number of changes after
        time 0 (the start level is not a change; a count change that keeps the count is not
        counted; every id change after time 0 is)."""
        levels = self.levels()
        total = 0.0
        seen: list[int] = []
        for i, (t, n) in enumerate(levels):
            end = levels[i + 1][0] if i + 1 < len(levels) else self.duration_s
            if end > t:  # a change exactly at duration_s has no weight
                total += (end - t) * n
                seen.append(n)
        return TraceStats(
            duration_s=self.duration_s,
            min_gpus=min(seen),
            mean_gpus=total / self.duration_s,
            max_gpus=max(seen),
            num_changes=(
                len(levels) - 1 if self.is_count else sum(1 for c in self.changes if c.time_s > 0)
            ),
        )

    # -- id view ------------------------------------------------------------------------

    def gpu_events(self, prefix: str = ID_PREFIX) -> tuple[GpuEvent, ...]:
        """The explicit-id stream, one event per change (see the module docstring for ids).

        `added` is in ascending id order; for a count drop `removed` lists the most recently
        added GPU first. Id changes pass through unchanged.
        """
        events: list[GpuEvent] = []
        live = 0
        for c in self.changes:
            if c.num_gpus is None:
                events.append(GpuEvent(c.time_s, c.added, c.removed))
                continue
            n = c.num_gpus
            added = tuple(f"{prefix}{i}" for i in range(live, n))
            removed = tuple(f"{prefix}{i}" for i in range(live - 1, n - 1, -1))
            events.append(GpuEvent(c.time_s, added, removed))
            live = n
        return tuple(events)

    # -- serialisation ------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """Our own format (docs/traces.md); `pearl.traces.io.trace_from_json` reads it back."""
        doc: dict[str, Any] = {
            "format": "pearl-trace/1",
            "name": self.name,
            "duration_s": self.duration_s,
            "reclaim_notice_s": self.reclaim_notice_s,
        }
        if self.source:
            doc["source"] = self.source
        doc["changes"] = [c.to_json() for c in self.changes]
        return doc


def _levels(changes: tuple[Change, ...]) -> list[tuple[float, int]]:
    """Step points of the GPU count, always starting with a point at time 0."""
    levels: list[tuple[float, int]] = [(0.0, 0)]
    live = 0
    for c in changes:
        live = c.num_gpus if c.num_gpus is not None else live + len(c.added) - len(c.removed)
        if c.time_s == levels[-1][0]:
            levels[-1] = (c.time_s, live)
        elif live != levels[-1][1]:
            levels.append((c.time_s, live))
    return levels


def _check(trace: AvailabilityTrace) -> None:
    """All invariants in one place; raises `TraceError` with a JSON path."""
    if not trace.name:
        raise TraceError("must not be empty", "name", "name")
    if not trace.duration_s > 0:
        raise TraceError(f"must be > 0, got {trace.duration_s}", "duration_s", "duration_s")
    if not trace.reclaim_notice_s >= 0:
        raise TraceError(
            f"must be >= 0, got {trace.reclaim_notice_s}", "reclaim_notice_s", "reclaim_notice_s"
        )
    live: set[str] = set()
    previous = -1.0
    for i, c in enumerate(trace.changes):
        where = f"changes[{i}]"
        if not 0 <= c.time_s <= trace.duration_s:
            raise TraceError(
                f"time {c.time_s} s outside [0, duration_s={trace.duration_s}]",
                f"{where}.time_s",
                "time_s",
            )
        if c.time_s <= previous:
            raise TraceError(
                f"time {c.time_s} s is not after the previous change ({previous} s)",
                f"{where}.time_s",
                "time_s",
            )
        previous = c.time_s
        if c.is_count != trace.changes[0].is_count:
            raise TraceError(
                "mixes count changes (num_gpus) and id changes (add/remove) in one trace",
                where,
                "num_gpus" if c.is_count else "add",
            )
        if c.num_gpus is not None:
            if c.added or c.removed:
                raise TraceError("a count change has no add/remove", where, "num_gpus")
            if c.num_gpus < 0:
                raise TraceError(
                    f"negative GPU count {c.num_gpus}", f"{where}.num_gpus", "num_gpus"
                )
            continue
        if not c.added and not c.removed:
            raise TraceError("an id change must add or remove GPUs", where, "add")
        for g in c.removed:
            if g not in live:
                raise TraceError(
                    f"removes GPU '{g}' that is not there", f"{where}.remove", "remove"
                )
            live.discard(g)
        for g in c.added:
            if not g:
                raise TraceError("empty GPU id", f"{where}.add", "add")
            if g in live:
                raise TraceError(f"adds GPU '{g}' that is already there", f"{where}.add", "add")
            live.add(g)
