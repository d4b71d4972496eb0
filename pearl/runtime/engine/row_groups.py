"""Split the decode rows into a few contiguous ranges, each attending over its own keys.

One batched attention call over every decode row must pad every row to the longest
sequence's length. Under continuous batching the rows are of very different lengths (a
request that just finished its prefill sits next to one that has decoded for hundreds of
steps), so the padded call reads about twice the KV the rows hold. A range of rows
[lo, hi) only needs the keys of its longest row, so a few ranges (a few more attention
calls) read far fewer keys. The ranges must be contiguous to be views of the row storage
(no copy), which is why `DecodeRows` keeps the rows roughly sorted by length.

Pure functions of the rows' key counts; the cost unit is a row-key (one row attending to
one key: 2 x kv_heads x head_dim elements read).
"""

from __future__ import annotations

from itertools import accumulate

RowGroup = tuple[int, int, int]  # (first row, end row, keys the range attends over)


def group_cost(groups: list[RowGroup]) -> int:
    """Row-keys the ranges' attention calls read."""
    return sum((hi - lo) * keys for lo, hi, keys in groups)


def _best_split(lens: list[int], lo: int, hi: int) -> tuple[int, int]:
    """(saving, cut) of the best single cut of [lo, hi) into [lo, cut) + [cut, hi)."""
    part = lens[lo:hi]
    head = list(accumulate(part, max))
    tail = list(accumulate(reversed(part), max))[::-1]
    whole = (hi - lo) * head[-1]
    best, cut = 0, lo
    for i in range(1, hi - lo):
        saving = whole - i * head[i - 1] - (hi - lo - i) * tail[i]
        if saving > best:
            best, cut = saving, lo + i
    return best, cut


def split_rows(lens: list[int], max_groups: int, min_saving: int) -> list[RowGroup]:
    """Contiguous ranges covering rows [0, len(lens)) (in order), each with the largest key
    count of its rows, chosen greedily: keep cutting the range whose best cut saves the
    most row-keys, while a cut saves at least `min_saving` (the price of one more call)
    and there are fewer than `max_groups` ranges. Rows with 0 keys (unused) cost a row."""
    n = len(lens)
    if n == 0:
        return []
    ranges = [(0, n)]
    cuts = {(0, n): _best_split(lens, 0, n)}
    while len(ranges) < max_groups:
        lo, hi = max(ranges, key=lambda r: cuts[r][0])
        saving, cut = cuts[(lo, hi)]
        if saving < max(min_saving, 1):
            break
        at = ranges.index((lo, hi))
        ranges[at : at + 1] = [(lo, cut), (cut, hi)]
        for r in ((lo, cut), (cut, hi)):
            cuts[r] = _best_split(lens, *r)
    return [(lo, hi, max(1, max(lens[lo:hi]))) for lo, hi in ranges]
