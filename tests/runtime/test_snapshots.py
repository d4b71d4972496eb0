"""Weight snapshots: shard grouping and the registry's version bookkeeping (no Ray needed).

Publishing through Ray and a worker pulling a version are tested in test_worker_ray.py, which
shares one Ray cluster.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.runtime.snapshots import Snapshot, SnapshotError, _Registry, shard_names


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=500), min_size=0, max_size=30),
    shard_bytes=st.integers(min_value=1, max_value=800),
)
def test_shards_keep_order_and_respect_the_bound(sizes: list[int], shard_bytes: int) -> None:
    """Every name lands once, in order; a shard exceeds the bound only as a lone tensor."""
    named = {f"p{i}": s for i, s in enumerate(sizes)}
    shards = shard_names(named, shard_bytes)
    assert [n for shard in shards for n in shard] == list(named)
    for shard in shards:
        assert shard
        total = sum(named[n] for n in shard)
        assert total <= shard_bytes or len(shard) == 1
    # Greedy: no two neighbouring shards could have been merged.
    for a, b in zip(shards, shards[1:], strict=False):
        assert sum(named[n] for n in a) + named[b[0]] > shard_bytes


def _snap(version: int) -> Snapshot:
    return Snapshot(version, ((("w",), f"ref{version}"),), 4, {"step": version})


def test_registry_keeps_the_newest_versions() -> None:
    reg = _Registry(keep=2)
    assert reg.latest() is None
    for v in (1, 2, 5):
        assert reg.publish(_snap(v)) == v
    assert reg.versions() == [2, 5]
    assert reg.latest().version == 5
    assert reg.get(2).shards == ((("w",), "ref2"),)
    with pytest.raises(SnapshotError, match=r"weight version 1 is not available \(have \[2, 5\]\)"):
        reg.get(1)


def test_registry_refuses_old_or_repeated_versions() -> None:
    reg = _Registry()
    reg.publish(_snap(3))
    for v in (3, 2):
        with pytest.raises(ValueError, match="not newer"):
            reg.publish(_snap(v))
    with pytest.raises(ValueError):
        _Registry(keep=0)


def test_snapshot_names_list_every_tensor() -> None:
    snap = Snapshot(0, ((("a", "b"), None), (("c",), None)), 12)
    assert snap.names == ("a", "b", "c")
