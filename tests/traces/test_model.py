"""AvailabilityTrace: counts over time, stats, stable-id event stream, invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.traces import AvailabilityTrace, Change, TraceError


def _trace(points: list[tuple[float, int]], duration_s: float = 100.0) -> AvailabilityTrace:
    return AvailabilityTrace.from_counts("t", duration_s, points)


def test_count_at_steps_and_holds() -> None:
    """A change at exactly t counts; before the first change the count is 0."""
    tr = _trace([(10.0, 3), (50.0, 1)])
    assert [tr.count_at(t) for t in (0, 9.99, 10, 49, 50, 99, 1000)] == [0, 0, 3, 3, 1, 1, 1]
    with pytest.raises(ValueError):
        tr.count_at(-1)


def test_stats_time_weighted() -> None:
    """Mean weights each level by how long it lasts; min sees the initial 0."""
    s = _trace([(10.0, 3), (50.0, 1)]).stats()
    assert s.mean_gpus == pytest.approx((40 * 3 + 50 * 1) / 100)
    assert (s.min_gpus, s.max_gpus, s.num_changes, s.duration_s) == (0, 3, 2, 100.0)


def test_change_at_time_zero_is_the_start_level_not_a_change() -> None:
    s = _trace([(0.0, 5), (50.0, 7)]).stats()
    assert (s.min_gpus, s.num_changes) == (5, 1)


def test_from_counts_merges_duplicates_and_drops_noops() -> None:
    tr = _trace([(0.0, 2), (0.0, 4), (20.0, 4), (30.0, 1)])
    assert tr.levels() == ((0.0, 4), (30.0, 1))


def test_count_drop_removes_most_recent_first() -> None:
    """Ids are pre0.. in order of addition; a drop removes the newest first."""
    tr = _trace([(0.0, 3), (10.0, 5), (20.0, 2)])
    ev = tr.gpu_events()
    assert ev[0] == (0.0, ("pre0", "pre1", "pre2"), ())
    assert ev[1].added == ("pre3", "pre4") and ev[1].removed == ()
    assert ev[2].removed == ("pre4", "pre3", "pre2")
    assert tr.gpu_events(prefix="p")[0].added == ("p0", "p1", "p2")


def test_id_trace_counts_and_events_pass_through() -> None:
    changes = (
        Change(0.0, added=("a", "b")),
        Change(5.0, added=("c",), removed=("a",)),
        Change(9.0, removed=("b",)),
    )
    tr = AvailabilityTrace("ids", 10.0, 30.0, changes)
    assert not tr.is_count
    assert [tr.count_at(t) for t in (0, 5, 9)] == [2, 2, 1]
    assert tr.gpu_events()[1] == (5.0, ("c",), ("a",))
    assert tr.stats().num_changes == 2


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ((Change(5.0, num_gpus=1), Change(5.0, num_gpus=2)), "time_s"),
        ((Change(5.0, num_gpus=1), Change(3.0, num_gpus=2)), "time_s"),
        ((Change(101.0, num_gpus=1),), "time_s"),
        ((Change(1.0, num_gpus=-1),), "num_gpus"),
        ((Change(1.0, num_gpus=1), Change(2.0, added=("x",))), "add"),
        ((Change(1.0, removed=("x",)),), "remove"),
        ((Change(1.0, added=("x",)), Change(2.0, added=("x",))), "add"),
        ((Change(1.0),), "add"),
    ],
)
def test_invariants_name_the_field(changes: tuple[Change, ...], field: str) -> None:
    with pytest.raises(TraceError) as info:
        AvailabilityTrace("bad", 100.0, 0.0, changes)
    assert info.value.field == field and info.value.path.startswith("changes[")


def test_bad_header_fields() -> None:
    with pytest.raises(TraceError, match="duration_s"):
        AvailabilityTrace("x", 0.0, 0.0, ())
    with pytest.raises(TraceError, match="reclaim_notice_s"):
        AvailabilityTrace("x", 1.0, -1.0, ())


count_points = st.lists(
    st.tuples(st.integers(0, 99), st.integers(0, 12)), min_size=0, max_size=25
).map(lambda pts: sorted(pts, key=lambda p: p[0]))


@given(count_points)
def test_events_replay_to_counts(points: list[tuple[int, int]]) -> None:
    """Replaying gpu_events gives count_at at every change, and the live ids are pre0..n-1."""
    tr = _trace([(float(t), n) for t, n in points])
    live: list[str] = []
    for time_s, added, removed in tr.gpu_events():
        assert all(g in live for g in removed)
        live = [g for g in live if g not in removed] + list(added)
        assert len(live) == tr.count_at(time_s)
        assert sorted(live) == sorted(f"pre{i}" for i in range(len(live)))


@given(count_points)
def test_stats_agree_with_sampling(points: list[tuple[int, int]]) -> None:
    """With integer change times, the mean is the average of count_at over each second."""
    tr = _trace([(float(t), n) for t, n in points])
    samples = [tr.count_at(t) for t in range(100)]
    s = tr.stats()
    assert s.mean_gpus == pytest.approx(sum(samples) / 100)
    assert (s.min_gpus, s.max_gpus) == (min(samples), max(samples))
    assert s.num_changes == sum(1 for a, b in zip(samples, samples[1:], strict=False) if a != b)
