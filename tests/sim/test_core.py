"""The event core: ordering, cancellation, the clock never runs backwards, seeded draws."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.sim.core import EventCore, SimError


@given(st.lists(st.tuples(st.floats(0, 100), st.integers(0, 3)), max_size=50))
def test_pops_in_time_priority_seq_order(entries: list[tuple[float, int]]) -> None:
    """Entries come off in (time, priority, scheduling order) order."""
    core = EventCore(seed=0)
    for i, (t, p) in enumerate(entries):
        core.schedule(t, i, p)
    popped = []
    while (h := core.pop()) is not None:
        popped.append(h.payload)
    expected = sorted(range(len(entries)), key=lambda i: (entries[i][0], entries[i][1], i))
    assert popped == expected


def test_cancelled_entries_are_skipped() -> None:
    """A cancelled entry never pops and does not count."""
    core = EventCore(seed=0)
    a = core.schedule(1.0, "a")
    core.schedule(2.0, "b")
    a.cancel()
    assert len(core) == 1
    assert core.peek_time_s() == 2.0
    h = core.pop()
    assert h is not None and h.payload == "b" and core.now_s == 2.0
    assert core.pop() is None


def test_cannot_schedule_in_the_past() -> None:
    """Once the clock moved, scheduling before it is a bug."""
    core = EventCore(seed=0)
    core.schedule(5.0, "x")
    core.pop()
    with pytest.raises(SimError):
        core.schedule(4.0, "y")
    with pytest.raises(SimError):
        core.after(-1.0, "y")


def test_seeded_draws_repeat() -> None:
    """Same seed, same draws; another seed, other draws."""
    a, b, c = EventCore(7), EventCore(7), EventCore(8)
    da = [a.uniform(0, 1) for _ in range(5)]
    assert da == [b.uniform(0, 1) for _ in range(5)]
    assert da != [c.uniform(0, 1) for _ in range(5)]
    assert a.uniform(3.0, 3.0) == 3.0
