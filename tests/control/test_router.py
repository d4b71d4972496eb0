"""The router: active workers only, sticky prefix, least-loaded, P then D, staleness."""

from __future__ import annotations

from pearl.control.book import TrajectoryBook
from pearl.control.router import route_queued
from pearl.control.state import ClusterState, Gpu, Role, Status, Worker, Zone


def _state(*workers: Worker) -> ClusterState:
    gpus = tuple(Gpu(g, Zone.DEDICATED) for w in workers for g in w.gpu_ids)
    return ClusterState(gpus=gpus, workers=workers, next_worker_seq=len(workers))


def _w(i: int, role: Role = Role.COLOCATED, status: Status = Status.ACTIVE, v: int = 0) -> Worker:
    return Worker(f"w{i}", (f"g{i}",), role, status, v)


def _book(n: int, step: int = 0) -> TrajectoryBook:
    b = TrajectoryBook(1)
    b.start_batch(step, 1, n)
    for t in list(b):
        b.mark_ready(t.traj_id)
    return b


def test_never_routes_to_transitional_workers():
    """Initialising, draining and inactive workers get nothing, even if idle."""
    s = _state(
        _w(0, status=Status.INITIALIZING),
        _w(1, status=Status.DRAINING),
        _w(2, status=Status.INACTIVE),
        _w(3),
    )
    routes = route_queued(_book(4), s)
    assert {r.prefill_worker_id for r in routes} == {"w3"}


def test_least_loaded_spreads_then_sticky_returns():
    """New turns spread evenly; a trajectory's next turn goes back to its prefix holder."""
    s = _state(_w(0), _w(1))
    b = _book(4)
    routes = route_queued(b, s)
    assert sorted(r.prefill_worker_id for r in routes) == ["w0", "w0", "w1", "w1"]
    assert all(r.full_prefill for r in routes)
    first = routes[0]
    b.mark_turn_finished(first.traj_id, first.prefill_worker_id)
    b.mark_ready(first.traj_id)
    again = route_queued(b, s)
    assert again == [again[0]] and again[0].prefill_worker_id == first.prefill_worker_id
    assert not again[0].full_prefill


def test_disaggregated_routes_prefill_then_decode():
    """With P and D workers a route names a prefill worker and a decode worker."""
    s = _state(_w(0, Role.PREFILL), _w(1, Role.DECODE), _w(2, Role.DECODE))
    routes = route_queued(_book(2), s)
    assert [r.prefill_worker_id for r in routes] == ["w0", "w0"]
    assert sorted(r.decode_worker_id or "" for r in routes) == ["w1", "w2"]


def test_prefill_without_decode_waits():
    """A prefill worker alone cannot serve a turn: nothing is routed."""
    assert route_queued(_book(1), _state(_w(0, Role.PREFILL))) == []


def test_interrupted_resumes_with_full_prefill_elsewhere():
    """An interrupted trajectory is re-routed once, with a full prefill."""
    s = _state(_w(0), _w(1))
    b = _book(1)
    (r,) = route_queued(b, s)
    b.mark_turn_finished(r.traj_id, r.prefill_worker_id)
    b.mark_ready(r.traj_id)
    (r2,) = route_queued(b, s)
    assert not r2.full_prefill
    b.interrupt_workers([r2.prefill_worker_id])
    (r3,) = route_queued(b, s)
    assert r3.full_prefill
    assert route_queued(b, s) == []


def test_staleness_filters_old_workers_and_cap_limits_load():
    """Batch 2 (bound 1) skips a v0 worker; a per-worker cap leaves the rest queued."""
    s = _state(_w(0, v=0), _w(1, v=1))
    b = _book(3, step=2)
    routes = route_queued(b, s, max_inflight_per_worker=2)
    assert [r.prefill_worker_id for r in routes] == ["w1", "w1"]
    assert len(b.queued()) == 1
    b.check()


def test_bounded_stickiness_moves_turns_to_an_idle_new_worker():
    """With `sticky_max_imbalance` = k a trajectory leaves its busy prefix worker for a
    worker with more than k fewer requests (full prefill there); without it, it stays."""
    only = _state(_w(0))
    for k, expect in ((None, "w0"), (3, "w0"), (2, "w1")):
        b = _book(4)
        routes = route_queued(b, only, sticky_max_imbalance=k)
        assert {r.prefill_worker_id for r in routes} == {"w0"}
        first = routes[0]
        b.mark_turn_finished(first.traj_id, "w0")
        b.mark_ready(first.traj_id)
        # a second worker joins (e.g. borrowed); w0 still holds 3 requests, w1 none
        again = route_queued(b, _state(_w(0), _w(1)), sticky_max_imbalance=k)
        assert [r.prefill_worker_id for r in again] == [expect]
        assert again[0].full_prefill == (expect == "w1")


def test_new_trajectories_go_where_fewest_live_not_where_fewest_run():
    """Trajectories stay on their worker, so a new one is placed by residents, not by the
    momentary load: w0's two trajectories both wait on their environment (load 0), w1
    runs one; the next two go to w1 and then the tie breaks by load."""
    s = _state(_w(0), _w(1))
    b = TrajectoryBook(1)
    b.start_batch(0, 1, 3)
    a, c, d = (t.traj_id for t in b)
    for tid in (a, c, d):
        b.mark_ready(tid)
    b.mark_routed(a, "w0", None, 0)
    b.mark_routed(c, "w0", None, 0)
    b.mark_routed(d, "w1", None, 0)
    for tid, w in ((a, "w0"), (c, "w0")):
        b.mark_turn_finished(tid, w)  # in the environment: no load, still at home on w0
    assert b.loads() == {"w1": 1} and b.homes() == {"w0": 2, "w1": 1}
    b.start_batch(1, 1, 2)
    for t in list(b):
        if t.step == 1:
            b.mark_ready(t.traj_id)
    routes = route_queued(b, s)
    assert [r.prefill_worker_id for r in routes] == ["w1", "w0"]
    assert b.homes() == {"w0": 3, "w1": 2}
    # a trajectory that is done leaves its home
    b.mark_done(a)
    assert b.homes() == {"w0": 2, "w1": 2}
