"""Cluster state: invariants checked in one place, JSON round-trip, queries."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.control.state import ClusterState, Gpu, Role, StateError, Status, Worker, Zone


def _gpus(n: int) -> tuple[Gpu, ...]:
    zones = [Zone.DEDICATED, Zone.PREEMPTIBLE, Zone.OVERLAP]
    return tuple(Gpu(f"g{i}", zones[i % 3], f"n{i // 2}") for i in range(n))


def test_gpu_bound_twice_is_rejected():
    """No GPU may be bound to two workers."""
    with pytest.raises(StateError, match="bound twice"):
        ClusterState(
            gpus=_gpus(2),
            workers=(Worker("a", ("g0",), Role.PREFILL), Worker("b", ("g0",), Role.DECODE)),
        )


def test_worker_on_unknown_gpu_is_rejected():
    """A worker's GPUs must exist."""
    with pytest.raises(StateError, match="unknown GPU"):
        ClusterState(gpus=_gpus(1), workers=(Worker("a", ("g9",), Role.COLOCATED),))


def test_duplicate_ids_are_rejected():
    """GPU ids and worker ids are unique."""
    with pytest.raises(StateError, match="listed twice"):
        ClusterState(gpus=(Gpu("g0", Zone.DEDICATED), Gpu("g0", Zone.OVERLAP)))
    with pytest.raises(StateError, match="listed twice"):
        ClusterState(
            gpus=_gpus(2),
            workers=(Worker("a", ("g0",), Role.DECODE), Worker("a", ("g1",), Role.DECODE)),
        )


def test_worker_needs_a_gpu():
    with pytest.raises(StateError, match="at least one GPU"):
        ClusterState(gpus=_gpus(1), workers=(Worker("a", (), Role.DECODE),))


def test_removing_a_bound_gpu_is_rejected():
    """Dropping a GPU that a worker still uses breaks the binding invariant."""
    s = ClusterState(gpus=_gpus(2), workers=(Worker("a", ("g0",), Role.DECODE),))
    with pytest.raises(StateError):
        s.without_gpus(["g0"])
    assert s.without_gpus(["g1"]).free_gpus() == ()


def test_new_worker_ids_are_never_reused():
    """Worker ids come from a monotonic sequence, even after removal."""
    s = ClusterState(gpus=_gpus(2))
    s, w0 = s.new_worker(("g0",), Role.PREFILL)
    s = s.without_worker(w0.worker_id)
    s, w1 = s.new_worker(("g0",), Role.PREFILL)
    assert w0.worker_id != w1.worker_id
    assert w1.status is Status.INITIALIZING


def test_routable_is_active_only():
    s = ClusterState(
        gpus=_gpus(4),
        workers=(
            Worker("a", ("g0",), Role.DECODE, Status.ACTIVE),
            Worker("b", ("g1",), Role.DECODE, Status.INITIALIZING),
            Worker("c", ("g2",), Role.DECODE, Status.DRAINING),
            Worker("d", ("g3",), Role.DECODE, Status.INACTIVE),
        ),
    )
    assert [w.worker_id for w in s.routable()] == ["a"]


def test_view_keeps_only_workers_fully_inside():
    s = ClusterState(
        gpus=_gpus(4),
        workers=(Worker("a", ("g0", "g1"), Role.COLOCATED), Worker("b", ("g2",), Role.COLOCATED)),
    )
    v = s.view(["g1", "g2"])
    assert [w.worker_id for w in v.workers] == ["b"]
    assert set(v.free_gpus()) == {"g1"}


def test_from_json_errors_name_path_and_field():
    doc = {
        "gpus": [{"gpu_id": "g0", "zone": "dedicated"}],
        "workers": [{"worker_id": "w0", "gpu_ids": ["g0"], "role": "boss"}],
    }
    with pytest.raises(StateError) as info:
        ClusterState.from_json(doc)
    assert info.value.path == "workers[0].role" and info.value.field == "role"
    with pytest.raises(StateError) as info:
        ClusterState.from_json({"gpus": [{"zone": "dedicated"}]})
    assert info.value.path == "gpus[0].gpu_id"


@st.composite
def states(draw):
    n = draw(st.integers(0, 8))
    gpus = _gpus(n)
    free = [g.gpu_id for g in gpus]
    workers = []
    for i in range(draw(st.integers(0, n))):
        size = draw(st.integers(1, 2))
        if len(free) < size:
            break
        bound, free = free[:size], free[size:]
        workers.append(
            Worker(
                f"w{i}",
                tuple(bound),
                draw(st.sampled_from(list(Role))),
                draw(st.sampled_from(list(Status))),
                draw(st.integers(0, 5)),
            )
        )
    return ClusterState(gpus=gpus, workers=tuple(workers), next_worker_seq=len(workers))


@given(states())
def test_json_round_trip(state):
    """to_json / from_json is the identity."""
    assert ClusterState.from_json(state.to_json()) == state
