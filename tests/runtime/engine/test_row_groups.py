"""Row ranges for the decode attention: a cover of the rows that never reads less than a
row needs and never more than one padded call."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pearl.runtime.engine.row_groups import group_cost, split_rows

lens_lists = st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=48)


@given(lens_lists, st.integers(min_value=1, max_value=6), st.integers(min_value=0, max_value=500))
def test_ranges_cover_rows_in_order_and_read_enough(lens, max_groups, min_saving) -> None:
    groups = split_rows(lens, max_groups, min_saving)
    assert 1 <= len(groups) <= max_groups
    assert groups[0][0] == 0 and groups[-1][1] == len(lens)
    for (_, hi, _), (lo, _, _) in zip(groups, groups[1:], strict=False):
        assert hi == lo  # contiguous, in order
    for lo, hi, keys in groups:
        assert lo < hi and keys >= max(1, max(lens[lo:hi]))
    assert group_cost(groups) <= len(lens) * max(1, max(lens))  # never worse than padding


@given(lens_lists)
def test_one_range_when_a_cut_must_save_too_much(lens) -> None:
    assert split_rows(lens, 4, 10**9) == [(0, len(lens), max(1, max(lens)))]


def test_sorted_rows_split_where_lengths_drop() -> None:
    lens = [200, 190, 180, 40, 30, 20, 0, 0]
    groups = split_rows(lens, 2, 1)
    assert groups == [(0, 3, 200), (3, 8, 40)]
    assert group_cost(groups) == 3 * 200 + 5 * 40 < len(lens) * 200
