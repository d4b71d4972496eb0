"""The controller's mechanisms one by one: start, batches and staleness, weight sync before
admission, urgent reclaim, sudden loss, re-planning, deferred offers, ignored events."""

from __future__ import annotations

from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.controller import Controller
from pearl.control.policies.base import Policy
from pearl.control.state import ClusterState, Gpu, Role, Status, Zone


def dedicated(n: int) -> ClusterState:
    return ClusterState(gpus=tuple(Gpu(f"d{i}", Zone.DEDICATED) for i in range(n)))


def of(cmds: list[C.Command], kind: type) -> list:
    return [c for c in cmds if isinstance(c, kind)]


def bring_up(ctl: Controller, cmds: list[C.Command], t: float) -> list[C.Command]:
    out: list[C.Command] = []
    for c in of(cmds, C.InitWorker):
        out += ctl.handle(E.WorkerReady(t, c.worker_id))
    for c in of(out, C.SyncWeights):
        out += ctl.handle(E.WeightsSynced(t, c.worker_id, c.version))
    return out


def booted(policy: str | Policy = "pearl", n: int = 2, **kw) -> Controller:
    kw.setdefault("group_size", 2)
    ctl = Controller(policy, state=dedicated(n), batch_size=kw.pop("batch_size", 4), **kw)
    bring_up(ctl, ctl.handle(E.Started(0.0)), 1.0)
    return ctl


def run_step(ctl: Controller, step: int, t: float) -> list[C.Command]:
    """Every trajectory of `step` takes one turn and ends; then the step finishes."""
    for traj in ctl.book.step_trajs(step):
        if traj.state.value == "env":
            ctl.handle(E.TrajectoryReady(t, traj.traj_id))
    for traj in ctl.book.step_trajs(step):
        ctl.handle(E.TurnFinished(t, traj.traj_id, traj.decode_worker or ""))
        ctl.handle(E.TrajectoryDone(t, traj.traj_id))
    return ctl.handle(E.RolloutStepFinished(t, step))


def test_start_plans_initial_group_and_first_batches():
    """The first event plans one group on the free dedicated GPUs and starts two batches."""
    ctl = Controller("pearl", state=dedicated(3), batch_size=4, group_size=2)
    out = ctl.handle(E.Started(0.0))
    inits = of(out, C.InitWorker)
    assert [c.gpu_ids for c in inits] == [("d0",), ("d1",), ("d2",)]
    assert len({c.group_id for c in inits}) == 1
    batches = of(out, C.StartRolloutBatch)
    assert [b.step for b in batches] == [0, 1] and all(len(b.traj_ids) == 4 for b in batches)
    assert not ctl.state.routable()
    assert ctl.handle(E.Started(0.5)) == []  # starting twice does nothing more


def test_group_admits_only_when_all_members_synced_and_ready():
    """A group waits for every member; a version published during initialisation is synced
    too (the admission itself needs only an admissible version, see the next test)."""
    ctl = Controller("pearl", state=dedicated(2), batch_size=2, group_size=2)
    inits = of(ctl.handle(E.Started(0.0)), C.InitWorker)
    a, b = (c.worker_id for c in inits)
    assert ctl.handle(E.WorkerReady(1.0, a)) == [C.SyncWeights(a, 0)]
    out = ctl.handle(E.TrainingStepFinished(2.0, 1))
    assert C.SyncWeights(a, 1) in out and C.SyncWeights(b, 1) not in out
    assert ctl.handle(E.WeightsSynced(3.0, a, 0)) == []
    assert ctl.handle(E.WeightsSynced(3.5, a, 1)) == []  # b not ready yet
    assert ctl.handle(E.WorkerReady(4.0, b)) == [C.SyncWeights(b, 1)]
    out = ctl.handle(E.WeightsSynced(5.0, b, 1))
    assert of(out, C.AdmitGroup) == [C.AdmitGroup(inits[0].group_id, (a, b))]
    assert {w.status for w in ctl.state.workers} == {Status.ACTIVE}


def test_group_admits_when_synced_within_the_staleness_bound():
    """One admission rule: a group synced to latest - 1 is admitted under bound 1 (it can
    serve the oldest batch in flight) and held back under bound 0; a publish that leaves a
    synced member outside the bound un-syncs it until its next sync."""
    for bound, admitted in ((1, True), (0, False)):
        policy = Policy("p", max_staleness=bound, borrow="never")
        ctl = Controller(policy, state=dedicated(1), batch_size=2, group_size=2)
        (init,) = of(ctl.handle(E.Started(0.0)), C.InitWorker)
        ctl.handle(E.WorkerReady(1.0, init.worker_id))
        ctl.handle(E.TrainingStepFinished(2.0, 1))  # v1 published while v0 is syncing
        out = ctl.handle(E.WeightsSynced(3.0, init.worker_id, 0))
        assert bool(of(out, C.AdmitGroup)) is admitted, bound
        if not admitted:
            out = ctl.handle(E.WeightsSynced(4.0, init.worker_id, 1))
            assert of(out, C.AdmitGroup) == [C.AdmitGroup(init.group_id, (init.worker_id,))]
    # Bound 1: a member synced to v0, then v2 is published before the group is complete.
    policy = Policy("p", max_staleness=1, borrow="never")
    ctl = Controller(policy, state=dedicated(2), batch_size=2, group_size=2)
    a, b = (c.worker_id for c in of(ctl.handle(E.Started(0.0)), C.InitWorker))
    ctl.handle(E.WorkerReady(1.0, a))
    ctl.handle(E.WeightsSynced(1.5, a, 0))
    ctl.handle(E.TrainingStepFinished(2.0, 1))
    ctl.handle(E.TrainingStepFinished(2.5, 2))  # a's v0 is now outside the bound
    ctl.handle(E.WorkerReady(3.0, b))
    assert of(ctl.handle(E.WeightsSynced(3.5, b, 2)), C.AdmitGroup) == []  # a must resync
    assert of(ctl.handle(E.WeightsSynced(4.0, a, 1)), C.AdmitGroup) != []


def test_batches_respect_the_staleness_bound():
    """With bound 0 batch k starts only once weights v_k exist; with bound 1 one ahead."""
    strict = booted(Policy("strict", max_staleness=0, borrow="never"))
    assert strict.book.steps == (0,)
    run_step(strict, 0, 5.0)
    assert strict.book.steps == ()
    out = strict.handle(E.TrainingStepFinished(6.0, 1))
    assert of(out, C.StartRolloutBatch)[0].step == 1
    loose = booted("pearl")
    assert loose.book.steps == (0, 1)
    run_step(loose, 0, 5.0)
    assert loose.book.steps == (1,)  # batch 2 would need v1
    out = loose.handle(E.TrainingStepFinished(6.0, 1))
    assert [b.step for b in of(out, C.StartRolloutBatch)] == [2]
    # Batch 2 may not run on v0 workers: it waits for their sync to v1.
    routes = [
        r
        for t in loose.book.step_trajs(2)
        for r in of(loose.handle(E.TrajectoryReady(7.0, t.traj_id)), C.Route)
    ]
    assert routes == []
    out = loose.handle(E.WeightsSynced(8.0, "w0", 1))
    assert {r.prefill_worker_id for r in of(out, C.Route)} == {"w0"}


def test_reclaim_interrupts_stops_releases_then_resumes():
    """Reclaim order: interrupt (prefix kept), stop, release; then the trajectories resume
    elsewhere with a full prefill while the unaffected worker keeps its own."""
    ctl = booted("pearl", 1)
    bring_up(ctl, ctl.handle(E.GpusOffered(2.0, (Gpu("p0", Zone.PREEMPTIBLE),), None)), 3.0)
    victim = ctl.state.owner_of("p0")
    assert victim is not None
    for t in ctl.book.step_trajs(0):
        ctl.handle(E.TrajectoryReady(4.0, t.traj_id))
    moved = {t.traj_id for t in ctl.book.step_trajs(0) if t.prefill_worker == victim}
    kept = {t.traj_id for t in ctl.book.step_trajs(0) if t.prefill_worker == "w0"}
    assert moved and kept
    out = ctl.handle(E.ReclaimNotice(5.0, ("p0",), 35.0))
    assert out[:3] == [
        C.Interrupt(victim),
        C.StopWorker(victim),
        C.ReleaseGpus(("p0",), "provider"),
    ]
    assert {r.traj_id for r in of(out, C.Route)} == moved
    assert all(r.full_prefill and r.prefill_worker_id == "w0" for r in of(out, C.Route))
    assert all(ctl.book.get(t).prefill_worker == "w0" for t in kept)
    assert not ctl.state.has_gpu("p0")


def test_gpus_gone_without_notice_resume_without_release():
    """GPUs that vanish: no interrupt or release command, trajectories still resume once."""
    ctl = booted("pearl", 1)
    bring_up(ctl, ctl.handle(E.GpusOffered(2.0, (Gpu("p0", Zone.PREEMPTIBLE),), None)), 3.0)
    victim = ctl.state.owner_of("p0")
    for t in ctl.book.step_trajs(0):
        ctl.handle(E.TrajectoryReady(4.0, t.traj_id))
    out = ctl.handle(E.GpusGone(5.0, ("p0",)))
    assert not of(out, C.Interrupt) and not of(out, C.ReleaseGpus)
    assert of(out, C.StopWorker) == [C.StopWorker(victim)]
    assert all(r.full_prefill for r in of(out, C.Route))
    assert ctl.handle(E.GpusGone(6.0, ("p0",))) == []


def test_shrink_replans_fixed_split_with_role_change_only():
    """Losing a prefill worker of a 2:2 split re-plans 3 workers by one role change."""
    ctl = Controller("pearl-disagg:1:1", state=dedicated(2), batch_size=4, group_size=2)
    bring_up(ctl, ctl.handle(E.Started(0.0)), 1.0)
    offer = tuple(Gpu(f"p{i}", Zone.PREEMPTIBLE) for i in range(2))
    bring_up(ctl, ctl.handle(E.GpusOffered(2.0, offer, None)), 3.0)
    assert ctl.state.role_counts() == {Role.COLOCATED: 0, Role.PREFILL: 2, Role.DECODE: 2}
    prefill_on_p = [
        w for w in ctl.state.workers if w.role == Role.PREFILL and w.gpu_ids[0].startswith("p")
    ]
    lost = prefill_on_p[0].gpu_ids[0] if prefill_on_p else None
    if lost is None:  # both prefill workers are dedicated: lose a decode worker instead
        lost = next(w.gpu_ids[0] for w in ctl.state.workers if w.gpu_ids[0].startswith("p"))
    out = ctl.handle(E.ReclaimNotice(4.0, (lost,), 30.0))
    assert not of(out, C.InitWorker) and not of(out, C.Drain)
    counts = ctl.state.role_counts()
    assert counts[Role.PREFILL] == 2 and counts[Role.DECODE] == 1
    assert len(of(out, C.ChangeRole)) == (1 if prefill_on_p else 0)


def test_offer_during_pending_group_waits_for_admission():
    """One transition at a time: an offer during initialisation is taken after admission."""
    ctl = Controller("pearl", state=dedicated(1), batch_size=2, group_size=2)
    first = ctl.handle(E.Started(0.0))
    out = ctl.handle(E.GpusOffered(0.5, (Gpu("p0", Zone.PREEMPTIBLE),), None))
    assert not of(out, C.InitWorker) and "p0" in ctl.offered
    out = bring_up(ctl, first, 1.0)
    assert of(out, C.AdmitGroup) and of(out, C.InitWorker)[0].gpu_ids == ("p0",)


def test_nonsense_events_are_logged_and_ignored():
    """Events that make no sense for the current state change nothing and never raise."""
    ctl = booted("pearl", 2)
    before = ctl.state
    nonsense = [
        E.WorkerReady(2.0, "w42"),
        E.WorkerInitFailed(2.0, "w0", "late"),
        E.WeightsSynced(2.0, "w42", 3),
        E.WorkerDrained(2.0, "w1"),
        E.ReclaimNotice(2.0, ("p9",), 30.0),
        E.GpusGone(2.0, ("p9",)),
        E.TrainingWants(2.0, ("t0",), 9.0),
        E.TrainingStepFinished(2.0, 0),
        E.TrajectoryReady(2.0, "s7-g0-0"),
        E.TurnFinished(2.0, "s0-g0-0", "w1"),
        E.RequestInterrupted(2.0, "s0-g0-0", "w1", 5),
        E.TrajectoryDone(2.0, "nope"),
        E.RolloutStepFinished(2.0, 0),
        "not an event",
    ]
    for e in nonsense[:-1]:
        assert ctl.handle(e) == []
    assert ctl.state == before
    assert len(ctl.ignored) == len(nonsense) - 1
    assert ctl.handle(type("Odd", (), {"time_s": 3.0})()) == []
    assert "unknown event type" in ctl.ignored[-1]
    assert ctl.handle(nonsense[-1]) == [] and "not an event" in ctl.ignored[-1]


def test_late_duplicates_are_told_from_news_by_time():
    """A replayed old offer, training-idle or trajectory-ready changes nothing: the GPU was
    taken back, training wants its GPUs, the trajectory is in its environment again."""
    ctl = booted("pearl-ungated", 1, training_gpus=(Gpu("t0", Zone.OVERLAP, "tn"),))
    old_offer = E.GpusOffered(2.0, (Gpu("p0", Zone.PREEMPTIBLE),), None)
    bring_up(ctl, ctl.handle(old_offer), 3.0)
    ctl.handle(E.ReclaimNotice(4.0, ("p0",), 30.0))
    assert ctl.handle(old_offer) == [] and not ctl.state.has_gpu("p0")
    fresh = E.GpusOffered(5.0, (Gpu("p0", Zone.PREEMPTIBLE),), None)
    assert of(ctl.handle(fresh), C.InitWorker)
    assert not of(ctl.handle(E.ReclaimNotice(4.0, ("p0",), 30.0)), C.ReleaseGpus)

    old_idle = E.TrainingIdle(6.0, ("t0",), 500.0)
    ctl.handle(E.TrainingWants(7.0, ("t0",), 9.0))
    assert ctl.handle(old_idle) == [] and "t0" not in ctl.toggle.idle_until

    tid = ctl.book.step_trajs(0)[0].traj_id
    ready = E.TrajectoryReady(10.0, tid)
    (r,) = of(ctl.handle(ready), C.Route)
    ctl.handle(E.TurnFinished(11.0, tid, r.decode_worker_id or r.prefill_worker_id))
    assert ctl.handle(ready) == [] and ctl.book.get(tid).state.value == "env"


def test_group_that_never_finishes_starting_is_cancelled_on_a_later_event():
    """A worker that never reports back cannot block expansions forever."""
    ctl = booted(Policy("t", borrow="never", group_timeout_s=100.0), 1)
    out = ctl.handle(E.GpusOffered(2.0, (Gpu("p0", Zone.PREEMPTIBLE),), None))
    (init,) = of(out, C.InitWorker)
    assert of(ctl.handle(E.TrajectoryReady(50.0, "s0-g0-0")), C.Route)
    out = ctl.handle(E.TrajectoryReady(103.0, "s0-g0-1"))
    assert C.StopWorker(init.worker_id) in out and not ctl.groups
    assert "p0" in ctl.offered and any("not ready after" in d for d in ctl.decisions)
