"""Minimal-change planning (paper §4.4.2): reaches the target, minimal, deterministic."""

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.control.plan import (
    AddWorker,
    PDConfig,
    PlanError,
    RemoveWorker,
    SetRole,
    apply,
    config_of,
    plan_transition,
)
from pearl.control.state import ClusterState, Gpu, Role, Status, Worker, Zone

ROLES = (Role.COLOCATED, Role.PREFILL, Role.DECODE)


def _state(roles: list[Role | None], statuses: list[Status] | None = None) -> ClusterState:
    zones = [Zone.DEDICATED, Zone.PREEMPTIBLE, Zone.OVERLAP]
    gpus = tuple(Gpu(f"g{i}", zones[i % 3]) for i in range(len(roles)))
    workers = []
    for i, r in enumerate(roles):
        if r is not None:
            st_ = statuses[i] if statuses else Status.ACTIVE
            workers.append(Worker(f"w{i}", (f"g{i}",), r, st_))
    return ClusterState(gpus=gpus, workers=tuple(workers), next_worker_seq=len(roles))


def brute_force_min_ops(
    roles: list[Role | None], usable: frozenset[int], target: PDConfig
) -> int | None:
    """BFS over per-GPU role maps (one GPU per worker): the true minimum number of ops."""
    want = target.role_counts()

    def done(s: tuple) -> bool:
        if any(r is not None and i not in usable for i, r in enumerate(s)):
            return False
        return all(sum(1 for r in s if r == role) == want[role] for role in ROLES)

    start = tuple(roles)
    seen = {start: 0}
    q = deque([start])
    while q:
        s = q.popleft()
        if done(s):
            return seen[s]
        for i, r in enumerate(s):
            nexts = []
            if r is None:
                if i in usable:
                    nexts += [role for role in ROLES]  # add
            else:
                nexts.append(None)  # remove
                nexts += [role for role in ROLES if role != r]  # set role
            for nr in nexts:
                t = s[:i] + (nr,) + s[i + 1 :]
                if t not in seen:
                    seen[t] = seen[s] + 1
                    q.append(t)
    return None


targets = st.one_of(
    st.integers(1, 6).map(PDConfig.colocated),
    st.tuples(st.integers(1, 5), st.integers(1, 5)).map(lambda pd: PDConfig.disaggregated(*pd)),
)


@st.composite
def small_cases(draw):
    n = draw(st.integers(1, 6))
    roles = draw(st.lists(st.sampled_from([None, *ROLES]), min_size=n, max_size=n))
    statuses = draw(st.lists(st.sampled_from(list(Status)), min_size=n, max_size=n))
    usable = frozenset(draw(st.sets(st.integers(0, n - 1))))
    return roles, statuses, usable, draw(targets)


@settings(max_examples=300, deadline=None)
@given(small_cases())
def test_plan_is_minimal_and_reaches_target(case):
    """Plan reaches the target, equals the brute-force minimum, keeps invariants on every apply."""
    roles, statuses, usable, target = case
    state = _state(roles, statuses)
    usable_ids = [f"g{i}" for i in sorted(usable)]
    best = brute_force_min_ops(roles, usable, target)
    if best is None:
        with pytest.raises(PlanError):
            plan_transition(state, target, usable_ids)
        return
    plan = plan_transition(state, target, usable_ids)
    assert plan.num_ops == best
    s = state
    for op in plan.ops:  # every intermediate state is a valid ClusterState
        s = apply(s, [op])
    assert config_of(s) == target
    assert all(all(g in usable_ids for g in w.gpu_ids) for w in s.workers)
    assert plan_transition(state, target, usable_ids) == plan  # deterministic


def test_roles_and_bindings_are_kept():
    """Workers whose role the target still needs keep binding and role (no op)."""
    state = _state([Role.PREFILL, Role.DECODE, Role.DECODE, Role.DECODE, None])
    plan = plan_transition(state, PDConfig.disaggregated(2, 3), [f"g{i}" for i in range(5)])
    assert plan.ops == (AddWorker("w5", ("g4",), Role.PREFILL),)


def test_reclaimed_gpu_forces_removal_and_replacement():
    """A worker on a GPU that is no longer usable is removed; a free GPU takes its place."""
    state = _state([Role.COLOCATED, Role.COLOCATED, None])
    plan = plan_transition(state, PDConfig.colocated(2), ["g0", "g2"])
    assert plan.ops == (RemoveWorker("w1"), AddWorker("w3", ("g2",), Role.COLOCATED))


def test_prefers_to_keep_dedicated_and_active_workers():
    """When shrinking, borrowed (overlap) and preemptible workers go before dedicated ones."""
    state = _state([Role.COLOCATED] * 3)  # zones: dedicated, preemptible, overlap
    plan = plan_transition(state, PDConfig.colocated(1), ["g0", "g1", "g2"])
    assert {op.worker_id for op in plan.removes} == {"w1", "w2"}


def test_not_enough_gpus_raises():
    with pytest.raises(PlanError, match="needs 3 new worker"):
        plan_transition(_state([None, None]), PDConfig.disaggregated(1, 2), ["g0", "g1"])


def test_tensor_parallel_workers_stay_on_one_node():
    gpus = tuple(Gpu(f"g{i}", Zone.DEDICATED, f"n{i // 3}") for i in range(6))
    state = ClusterState(gpus=gpus)
    plan = plan_transition(
        state, PDConfig.disaggregated(1, 1), [g.gpu_id for g in gpus], gpus_per_worker=2
    )
    nodes = [{state.gpu(g).node for g in op.gpu_ids} for op in plan.adds]
    assert all(len(n) == 1 for n in nodes) and len(plan.adds) == 2
    with pytest.raises(
        PlanError
    ):  # 3 GPUs per node: no room for a third 2-GPU worker on n0 + n1 split
        plan_transition(state, PDConfig.colocated(3), [g.gpu_id for g in gpus], gpus_per_worker=2)


def test_new_workers_start_initializing_and_role_change_keeps_status():
    state = _state([Role.COLOCATED, None], [Status.ACTIVE, Status.ACTIVE])
    after = apply(state, plan_transition(state, PDConfig.disaggregated(1, 1), ["g0", "g1"]))
    assert after.worker("w0").status is Status.ACTIVE
    assert [w.status for w in after.workers if w.worker_id != "w0"] == [Status.INITIALIZING]


def test_pdconfig_parse_and_validation():
    assert PDConfig.parse("disaggregated:3:5") == PDConfig.disaggregated(3, 5)
    assert PDConfig.parse("disagg:1:2") == PDConfig.disaggregated(1, 2)
    assert str(PDConfig.parse("colocated:8")) == "colocated:8"
    for bad in ("colocated:0", "disaggregated:0:3", "mixed:1", "colocated:-1"):
        with pytest.raises(ValueError):
            PDConfig.parse(bad)


def test_apply_rejects_unknown_workers():
    state = _state([Role.COLOCATED])
    with pytest.raises(PlanError):
        apply(state, [RemoveWorker("nope")])
    with pytest.raises(PlanError):
        apply(state, [SetRole("nope", Role.DECODE)])
