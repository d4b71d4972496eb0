"""Topology: resource naming, reading Ray's node table, drains -> reclaim notices -> events.

These run on hand-written `ray.nodes()`-shaped tables (no Ray). The same functions on a
live multi-node cluster (a drained, then removed preemptible node) are exercised in
test_worker_ray.py::test_ray_node_removed_mid_decode_keeps_every_prefix.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.control.events import GpusGone, GpusOffered, ReclaimNotice
from pearl.control.state import Gpu, Zone
from pearl.runtime.topology import (
    NodeReclaim,
    WatchState,
    discover_gpus,
    gpu_changes,
    node_labels,
    node_resources,
    reclaim_notices,
    watch_step,
    worker_options,
)


def _node(
    node_id: str,
    name: str,
    zone: str | None,
    gpus: list[str],
    *,
    alive: bool = True,
    label: bool = True,
):
    res = node_resources(zone, gpus) if zone else {}
    res.update({"CPU": 1.0, "memory": 1e9})
    return {
        "NodeID": node_id,
        "Alive": alive,
        "Resources": res,
        "Labels": node_labels(zone, name) if zone and label else {},
    }


NODES = [
    _node("h", "head", None, []),
    _node("a", "ded", "dedicated", ["d0", "d1"]),
    _node("b", "pre", "preemptible", ["p1", "p0"]),
    _node("c", "train", "overlap", ["t0"], label=False),  # zone from its resource only
    _node("x", "gone", "preemptible", ["p9"], alive=False),
]


def test_resources_bind_a_worker_to_exact_slots() -> None:
    assert node_resources("preemptible", ["p0", "p1"]) == {
        "pearl_gpu_p0": 1.0,
        "pearl_gpu_p1": 1.0,
        "pearl_slot": 2.0,
        "pearl_zone_preemptible": 2.0,
    }
    opts = worker_options(("p0", "p1"), use_cuda=True)
    assert opts["resources"] == {"pearl_gpu_p0": 1.0, "pearl_gpu_p1": 1.0}
    assert opts["num_gpus"] == 2 and opts["num_cpus"] == 0
    assert "num_gpus" not in worker_options(("p0",))
    with pytest.raises(ValueError):
        worker_options(())
    with pytest.raises(ValueError):
        node_resources("cloud", ["g"])


def test_discover_reads_live_nodes_with_zones() -> None:
    """Dead nodes and nodes without a zone are skipped; labels name the node."""
    assert discover_gpus(NODES) == (
        Gpu("d0", Zone.DEDICATED, "ded"),
        Gpu("d1", Zone.DEDICATED, "ded"),
        Gpu("p0", Zone.PREEMPTIBLE, "pre"),
        Gpu("p1", Zone.PREEMPTIBLE, "pre"),
        Gpu("t0", Zone.OVERLAP, "c"),
    )


def test_reclaim_notices_only_for_draining_nodes_with_deadline_in_reclaimable_zones() -> None:
    draining = {"a": 5_000, "b": 12_500, "c": 0, "x": 9_000, "unknown": 1_000}
    got = reclaim_notices(draining, NODES)
    assert got == (NodeReclaim("b", "pre", Zone.PREEMPTIBLE, ("p0", "p1"), 12.5),)
    # dedicated nodes count when asked for; a drain without deadline never does
    assert [r.node_id for r in reclaim_notices(draining, NODES, zones=tuple(Zone))] == ["a", "b"]


@settings(max_examples=80, deadline=None)
@given(
    before=st.sets(st.sampled_from([f"g{i}" for i in range(8)])),
    after=st.sets(st.sampled_from([f"g{i}" for i in range(8)])),
)
def test_gpu_changes_partition_the_difference(before: set[str], after: set[str]) -> None:
    def gpus(ids: set[str]) -> list[Gpu]:
        return [Gpu(g, Zone.PREEMPTIBLE) for g in ids]

    joined, gone = gpu_changes(gpus(before), gpus(after))
    assert {g.gpu_id for g in joined} == after - before
    assert set(gone) == before - after
    assert list(gone) == sorted(gone)


def test_watch_turns_readings_into_offer_notice_and_gone_events() -> None:
    """Join -> GpusOffered; drain -> one ReclaimNotice on the caller's clock; leave -> GpusGone."""
    ded = Gpu("d0", Zone.DEDICATED, "ded")
    p0, p1 = Gpu("p0", Zone.PREEMPTIBLE, "pre"), Gpu("p1", Zone.PREEMPTIBLE, "pre")
    state, events = watch_step(WatchState(), (ded, p0, p1), (), now_s=1.0, now_unix_s=1000.0)
    assert events == [GpusOffered(1.0, (p0, p1))]  # dedicated GPUs are configured, not offered
    reclaim = NodeReclaim("b", "pre", Zone.PREEMPTIBLE, ("p0", "p1"), 1030.0)
    state, events = watch_step(state, (ded, p0, p1), (reclaim,), now_s=2.0, now_unix_s=1001.0)
    assert events == [ReclaimNotice(2.0, ("p0", "p1"), 31.0)]
    state, events = watch_step(state, (ded, p0, p1), (reclaim,), now_s=3.0, now_unix_s=1002.0)
    assert events == []  # noticed once
    state, events = watch_step(state, (ded,), (), now_s=4.0, now_unix_s=1003.0)
    assert events == [GpusGone(4.0, ("p0", "p1"))] and state.noticed == frozenset()
    # Drained and gone between two readings: only GpusGone.
    state, _ = watch_step(state, (ded, p0), (), now_s=5.0, now_unix_s=1004.0)
    late = NodeReclaim("b2", "pre", Zone.PREEMPTIBLE, ("p0",), 1010.0)
    _, events = watch_step(state, (ded,), (late,), now_s=6.0, now_unix_s=1005.0)
    assert events == [GpusGone(6.0, ("p0",))]
