"""The discrete-event core: one heap keyed (time, priority, seq), a virtual clock, a seed.

Everything that happens in the simulated world is an entry on one heap. Ties in time are
broken first by `priority` (lower first), then by `seq` (the order of scheduling), so a run
is a pure function of its config and seed: no wall clock, no hash order, no global state.

Entries can be cancelled lazily (`Handle.cancel()`): a cancelled entry stays on the heap
and is skipped when it reaches the top, which keeps cancellation O(1).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Priorities for entries at the same instant (lower runs first). Losing GPUs is applied
# before anything else that happens at that time, so no work is scheduled onto a GPU that
# is already gone; training and rollout bookkeeping run after the physics of that instant.
PRIO_GPU_GONE = 0
PRIO_NOTICE = 1
PRIO_PHYSICS = 2
PRIO_COMPLETION = 3
PRIO_DEFAULT = 5
PRIO_TRAINER = 6
PRIO_OFFER = 7


class SimError(RuntimeError):
    """The simulation reached an impossible state (a bug, not bad user input)."""


@dataclass(slots=True)
class Handle:
    """A scheduled entry; `cancel()` makes the core skip it."""

    time_s: float
    priority: int
    seq: int
    payload: Any = field(compare=False)
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class EventCore:
    """A heap of timed payloads with a virtual clock and a seeded random generator.

    `schedule(time_s, payload)` never accepts a time before `now_s` (SimError): the past is
    immutable. `pop()` advances `now_s` to the popped entry's time and returns the entry.
    """

    def __init__(self, seed: int) -> None:
        self.now_s = 0.0
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._heap: list[tuple[float, int, int, Handle]] = []
        self._seq = 0
        self.num_popped = 0

    def schedule(self, time_s: float, payload: Any, priority: int = PRIO_DEFAULT) -> Handle:
        now = self.now_s
        if time_s < now:
            if time_s < now - 1e-9:
                raise SimError(f"cannot schedule at {time_s:.6f} s: clock is at {now:.6f} s")
            time_s = now
        seq = self._seq
        handle = Handle(time_s, priority, seq, payload)
        heapq.heappush(self._heap, (time_s, priority, seq, handle))
        self._seq = seq + 1
        return handle

    def after(self, delay_s: float, payload: Any, priority: int = PRIO_DEFAULT) -> Handle:
        """Schedule `delay_s` (>= 0) after now."""
        if delay_s < 0:
            raise SimError(f"negative delay {delay_s}")
        return self.schedule(self.now_s + delay_s, payload, priority)

    def peek_time_s(self) -> float | None:
        """Time of the next live entry, or None if the heap holds none."""
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else None

    def pop(self) -> Handle | None:
        """Remove and return the next live entry (advancing the clock), or None if empty."""
        self._drop_cancelled()
        if not self._heap:
            return None
        time_s, _, _, handle = heapq.heappop(self._heap)
        self.now_s = time_s
        self.num_popped += 1
        return handle

    def pop_due(self, until_s: float) -> Handle | None:
        """`pop()` if the next live entry is due at or before `until_s`, else None (and the
        heap is left as it is, less cancelled entries)."""
        heap = self._heap
        while heap and heap[0][3].cancelled:
            heapq.heappop(heap)
        if not heap or heap[0][0] > until_s:
            return None
        time_s, _, _, handle = heapq.heappop(heap)
        self.now_s = time_s
        self.num_popped += 1
        return handle

    def __len__(self) -> int:
        return sum(1 for *_, h in self._heap if not h.cancelled)

    def _drop_cancelled(self) -> None:
        heap = self._heap
        while heap and heap[0][3].cancelled:
            heapq.heappop(heap)

    def uniform(self, low: float, high: float) -> float:
        """One seeded draw from U[low, high] (low == high returns low)."""
        if high <= low:
            return float(low)
        return float(self.rng.uniform(low, high))

    def child_rng(self, key: int) -> np.random.Generator:
        """An independent generator derived from the run seed and `key` (stable across runs)."""
        return np.random.default_rng([self.seed, key])


Action = Callable[[], None]
