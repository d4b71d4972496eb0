"""Scaling (rounded half up), capping and windowing keep the count semantics."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.traces import AvailabilityTrace, Change, cap, parse_scale, parse_window, scale, window
from pearl.traces.transform import scaled_count

count_points = st.lists(
    st.tuples(st.integers(0, 999), st.integers(0, 40)), min_size=1, max_size=30
).map(lambda pts: sorted(pts, key=lambda p: p[0]))


def _trace(points: list[tuple[int, int]]) -> AvailabilityTrace:
    return AvailabilityTrace.from_counts("t", 1000.0, [(float(t), n) for t, n in points])


@given(st.integers(0, 200), st.integers(0, 64), st.integers(1, 64))
def test_scaled_count_rounds_half_up(nodes: int, gpus: int, per_nodes: int) -> None:
    exact = Fraction(nodes * gpus, per_nodes)
    got = scaled_count(nodes, gpus, per_nodes)
    assert exact - Fraction(1, 2) < got <= exact + Fraction(1, 2)
    if exact.denominator == 2:
        assert got == exact + Fraction(1, 2)


def test_full_pool_maps_to_full_scale() -> None:
    assert scaled_count(32, 12, 32) == 12 and scaled_count(24, 12, 24) == 12


@given(count_points, st.integers(0, 16), st.integers(1, 40), st.integers(0, 20))
def test_scale_and_cap_are_pointwise(
    points: list[tuple[int, int]], gpus: int, per_nodes: int, limit: int
) -> None:
    tr = _trace(points)
    out = cap(scale(tr, gpus, per_nodes), limit)
    for t in range(0, 1000, 7):
        assert out.count_at(t) == min(limit, scaled_count(tr.count_at(t), gpus, per_nodes))
    assert out.stats().num_changes <= tr.stats().num_changes


@given(count_points, st.integers(0, 998), st.integers(1, 1000))
def test_window_matches_the_original(points: list[tuple[int, int]], start: int, span: int) -> None:
    """Inside the window, counts equal the original's at the shifted time."""
    tr = _trace(points)
    end = min(1000, start + span)
    seg = window(tr, float(start), float(end))
    assert seg.duration_s == end - start
    assert seg.count_at(0) == tr.count_at(start)
    for t in range(start, end):
        assert seg.count_at(t - start) == tr.count_at(t)


def test_window_of_an_id_trace_starts_with_live_ids() -> None:
    tr = AvailabilityTrace(
        "ids",
        100.0,
        0.0,
        (
            Change(0.0, added=("a", "b")),
            Change(10.0, removed=("a",), added=("c",)),
            Change(50.0, removed=("b",)),
        ),
    )
    seg = window(tr, 20.0, 60.0)
    assert seg.gpu_events() == ((0.0, ("b", "c"), ()), (30.0, (), ("b",)))


def test_window_outside_the_trace_is_an_error() -> None:
    tr = _trace([(0, 3)])
    with pytest.raises(ValueError, match="START < END"):
        window(tr, 10.0, 2000.0)


@pytest.mark.parametrize("text", ["12", "12/0", "a/b", "-1/3", "1/2/3"])
def test_parse_scale(text: str) -> None:
    if text == "12":
        assert parse_scale(text) == (12, 1)
    else:
        with pytest.raises(ValueError):
            parse_scale(text)


@pytest.mark.parametrize("text", ["5:3", "x:10", "10", "-1:5"])
def test_parse_window_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_window(text)
    assert parse_window("0:7200") == (0.0, 7200.0)
