"""Scenarios that read like the paper's workflow (§4.1.2, §4.5, §4.6): each feeds the
controller a story of events and checks the commands and the state it answers with."""

from __future__ import annotations

from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.controller import Controller
from pearl.control.plan import PDConfig
from pearl.control.policies.advisor import HeuristicAdvisor
from pearl.control.policies.base import Policy
from pearl.control.state import ClusterState, Gpu, Role, Status, Zone


def dedicated(n: int) -> ClusterState:
    return ClusterState(gpus=tuple(Gpu(f"d{i}", Zone.DEDICATED, "dnode") for i in range(n)))


def preemptible(*ids: str) -> tuple[Gpu, ...]:
    return tuple(Gpu(g, Zone.PREEMPTIBLE, "pnode") for g in ids)


def of(cmds: list[C.Command], kind: type) -> list:
    return [c for c in cmds if isinstance(c, kind)]


def bring_up(ctl: Controller, cmds: list[C.Command], t: float) -> list[C.Command]:
    """Answer every InitWorker in `cmds` with ready, then every SyncWeights with synced."""
    out: list[C.Command] = []
    for c in of(cmds, C.InitWorker):
        out += ctl.handle(E.WorkerReady(t, c.worker_id))
    for c in of(out, C.SyncWeights):
        out += ctl.handle(E.WeightsSynced(t, c.worker_id, c.version))
    return out


def boot(policy: str | Policy = "pearl", n: int = 4, **kw) -> Controller:
    ctl = Controller(policy, state=dedicated(n), batch_size=kw.pop("batch_size", 8), **kw)
    out = ctl.handle(E.Started(0.0))
    bring_up(ctl, out, 1.0)
    assert len(ctl.state.routable()) == n
    return ctl


def make_ready(ctl: Controller, step: int, t: float) -> list[C.Command]:
    out: list[C.Command] = []
    for traj in ctl.book.step_trajs(step):
        out += ctl.handle(E.TrajectoryReady(t, traj.traj_id))
    return out


def test_reclaim_during_expansion_cancels_the_group_and_re_expands():
    """An expansion still initialising loses a GPU: the whole group is cancelled, the GPU is
    released at once, the survivors are re-offered in a new group; the old one never admits."""
    ctl = boot("pearl", 4)
    out = ctl.handle(E.GpusOffered(10.0, preemptible("p0", "p1", "p2", "p3"), None))
    inits = of(out, C.InitWorker)
    assert len(inits) == 4 and len({c.group_id for c in inits}) == 1
    old = [c.worker_id for c in inits]
    ctl.handle(E.WorkerReady(30.0, old[0]))
    routes = make_ready(ctl, 0, 31.0)
    assert {r.prefill_worker_id for r in of(routes, C.Route)} <= {"w0", "w1", "w2", "w3"}

    out = ctl.handle(E.ReclaimNotice(40.0, ("p1",), 70.0))
    assert [c.worker_id for c in of(out, C.StopWorker)] == old
    assert out.index(C.ReleaseGpus(("p1",), "provider")) < out.index(of(out, C.InitWorker)[0])
    assert not of(out, C.AdmitGroup)
    new = of(out, C.InitWorker)
    assert {c.gpu_ids[0] for c in new} == {"p0", "p2", "p3"}
    assert not set(old) & {c.worker_id for c in new}
    assert not ctl.state.has_gpu("p1")
    # Late events about the cancelled workers change nothing.
    assert ctl.handle(E.WorkerReady(50.0, old[2])) == []
    assert ctl.handle(E.WeightsSynced(51.0, old[0], 0)) == []
    assert all(w.status == Status.ACTIVE for w in ctl.state.routable())
    admitted = bring_up(ctl, out, 60.0)
    assert of(admitted, C.AdmitGroup)[0].worker_ids == tuple(c.worker_id for c in new)
    assert len(ctl.state.routable()) == 7


def test_worker_that_fails_to_initialise_cancels_the_whole_group():
    """One failure cancels the expansion: the others stop, the failed GPU goes back to the
    provider, nothing of the group is ever routable."""
    ctl = boot("pearl", 2)
    out = ctl.handle(E.GpusOffered(5.0, preemptible("p0", "p1", "p2"), None))
    ids = [c.worker_id for c in of(out, C.InitWorker)]
    ctl.handle(E.WorkerReady(20.0, ids[0]))
    ctl.handle(E.WeightsSynced(21.0, ids[0], 0))
    assert ctl.state.worker(ids[0]).status == Status.INITIALIZING  # peers not ready yet
    out = ctl.handle(E.WorkerInitFailed(22.0, ids[1], "CUDA OOM"))
    assert {c.worker_id for c in of(out, C.StopWorker)} == {ids[0], ids[2]}
    assert C.ReleaseGpus(("p1",), "provider") in out
    assert not of(out, C.AdmitGroup) and not of(out, C.InitWorker)
    assert [w.worker_id for w in ctl.state.workers] == ["w0", "w1"]
    assert set(ctl.offered) == {"p0", "p2"}
    assert ctl.handle(E.WorkerReady(23.0, ids[2])) == []
    assert any("unknown" in msg for msg in ctl.ignored)
    routes = of(make_ready(ctl, 0, 24.0), C.Route)
    assert {r.prefill_worker_id for r in routes} == {"w0", "w1"}


def test_training_deadline_while_borrow_still_activating():
    """Training wants its GPUs back before the borrow group is even ready: the group is
    cancelled and the GPUs are released to training in the same step, before the deadline."""
    training = tuple(Gpu(f"t{i}", Zone.OVERLAP, "tnode") for i in range(2))
    ctl = boot("pearl-ungated", 2, training_gpus=training)
    out = ctl.handle(E.TrainingIdle(100.0, ("t0", "t1"), 160.0))
    assert out[0] == C.OffloadTraining(("t0", "t1"))
    inits = of(out, C.InitWorker)
    assert len(inits) == 2 and all(c.gpu_ids[0].startswith("t") for c in inits)
    ctl.handle(E.WorkerReady(103.0, inits[0].worker_id))
    out = ctl.handle(E.TrainingWants(104.0, ("t0", "t1"), 110.0))
    assert {c.worker_id for c in of(out, C.StopWorker)} == {c.worker_id for c in inits}
    rel = out.index(C.ReleaseGpus(("t0", "t1"), "training"))
    assert out[rel + 1] == C.RestoreTraining(("t0", "t1"))
    assert not ctl.state.gpus_in(Zone.OVERLAP) and not ctl.groups
    assert ctl.handle(E.TrainingWants(105.0, ("t0", "t1"), 110.0)) == []  # duplicate


def test_return_interrupts_borrowed_workers_and_resumes_their_trajectories():
    """Returning borrowed GPUs interrupts their requests (prefix kept) and the trajectories
    resume on dedicated workers with one full prefill; rollout there never stops."""
    training = (Gpu("t0", Zone.OVERLAP, "tnode"),)
    ctl = boot("pearl-ungated", 1, training_gpus=training)
    bring_up(ctl, ctl.handle(E.TrainingIdle(10.0, ("t0",), 200.0)), 20.0)
    borrowed = ctl.state.owner_of("t0")
    assert borrowed is not None and ctl.state.worker(borrowed).status == Status.ACTIVE
    routes = of(make_ready(ctl, 0, 30.0), C.Route)
    on_borrowed = {r.traj_id for r in routes if r.prefill_worker_id == borrowed}
    assert on_borrowed
    out = ctl.handle(E.TrainingWants(40.0, ("t0",), 50.0))
    assert out[:2] == [C.Interrupt(borrowed), C.StopWorker(borrowed)]
    resumed = of(out, C.Route)
    assert {r.traj_id for r in resumed} == on_borrowed
    assert all(r.full_prefill and r.prefill_worker_id == "w0" for r in resumed)
    # The world's late RequestInterrupted events (the Interrupt's promised completions) do
    # not queue them a second time, and are confirmations, not ignored events.
    ignored = len(ctl.ignored)
    for tid in on_borrowed:
        assert of(ctl.handle(E.RequestInterrupted(41.0, tid, borrowed, 12)), C.Route) == []
    assert len(ctl.ignored) == ignored and ctl.ctx.confirmed_interrupts == len(on_borrowed)
    # one about a worker the request never ran on is ignored, with why
    ctl.handle(E.RequestInterrupted(42.0, next(iter(on_borrowed)), "w9", 3))
    assert "not in flight there" in ctl.ignored[-1]


class SwitchToDisagg(HeuristicAdvisor):
    """A test advisor that asks for disaggregation at the first re-decision."""

    def redecide(self, num_workers: int, current: PDConfig) -> PDConfig | None:
        want = PDConfig.disaggregated(1, num_workers - 1)
        return None if current == want else want


def test_role_change_while_requests_are_in_flight():
    """A PD switch after a rollout step changes roles without interrupting anything: the
    turns in flight finish where they are, the next turns follow the new roles."""
    policy = Policy("test", borrow="never")
    ctl = boot(policy, 3, batch_size=2, group_size=2, advisor=SwitchToDisagg(policy))
    make_ready(ctl, 0, 2.0)
    flying = {t.traj_id: t.prefill_worker for t in ctl.book.step_trajs(1)}
    assert not any(flying.values())
    make_ready(ctl, 1, 3.0)
    flying = {t.traj_id: t.prefill_worker for t in ctl.book.step_trajs(1)}
    for t in ctl.book.step_trajs(0):
        ctl.handle(E.TurnFinished(4.0, t.traj_id, t.decode_worker or ""))
        ctl.handle(E.TrajectoryDone(5.0, t.traj_id))
    out = ctl.handle(E.RolloutStepFinished(6.0, 0))
    changes = of(out, C.ChangeRole)
    assert changes and not of(out, C.Interrupt) and not of(out, C.Drain)
    assert ctl.state.role_counts() == {Role.COLOCATED: 0, Role.PREFILL: 1, Role.DECODE: 2}
    for tid, w in flying.items():  # still in flight on their (re-roled) workers
        assert ctl.book.get(tid).workers == (w,)
        ctl.handle(E.TurnFinished(7.0, tid, w))
    assert not ctl.ignored or all("turn" not in m for m in ctl.ignored)
    tid = next(iter(flying))
    (r,) = of(ctl.handle(E.TrajectoryReady(8.0, tid)), C.Route)
    assert ctl.state.worker(r.prefill_worker_id).role == Role.PREFILL
    assert ctl.state.worker(r.decode_worker_id or "").role == Role.DECODE


class DisaggOnGrowth(HeuristicAdvisor):
    """A test advisor that splits 1:(n-1) once there are more than two workers."""

    def choose(self, num_workers: int, current: PDConfig | None) -> PDConfig:
        if num_workers > 2:
            return PDConfig.disaggregated(1, num_workers - 1)
        return PDConfig.colocated(num_workers)


def test_expansion_that_changes_the_split_switches_roles_only_at_admission():
    """Growing from colocated:2 to disaggregated:1:3: the existing workers keep serving
    colocated while the new ones start; the role change comes with the group's admission."""
    policy = Policy("test", borrow="never")
    ctl = boot(policy, 2, advisor=DisaggOnGrowth(policy))
    out = ctl.handle(E.GpusOffered(5.0, preemptible("p0", "p1"), None))
    assert not of(out, C.ChangeRole) and len(of(out, C.InitWorker)) == 2
    assert {w.role for w in ctl.state.routable()} == {Role.COLOCATED}
    routes = of(make_ready(ctl, 0, 6.0), C.Route)
    assert routes and all(r.decode_worker_id is None for r in routes)
    admitted = bring_up(ctl, out, 70.0)
    cut = admitted.index(of(admitted, C.AdmitGroup)[0])
    assert isinstance(admitted[cut - 1], C.ChangeRole)  # in the same step, just before
    assert not of(admitted[cut + 1 :], C.ChangeRole)
    assert ctl.state.role_counts() == {Role.COLOCATED: 0, Role.PREFILL: 1, Role.DECODE: 3}


def test_a_borrow_that_changes_no_role_admits_each_worker_when_it_is_ready():
    """Borrowed workers of a colocated pool serve one by one as each is restored and synced
    (paper §4.6); the slower ones never hold the faster ones back."""
    training = tuple(Gpu(f"t{i}", Zone.OVERLAP, "tnode") for i in range(3))
    ctl = boot("pearl-ungated", 2, training_gpus=training)
    out = ctl.handle(E.TrainingIdle(10.0, ("t0", "t1", "t2"), 300.0))
    inits = of(out, C.InitWorker)
    assert len(inits) == 3 and len({c.group_id for c in inits}) == 3
    first, *rest = (c.worker_id for c in inits)
    out = ctl.handle(E.WorkerReady(15.0, first))
    (sync,) = of(out, C.SyncWeights)
    out = ctl.handle(E.WeightsSynced(15.5, first, sync.version))
    assert of(out, C.AdmitGroup) == [C.AdmitGroup(inits[0].group_id, (first,))]
    assert ctl.state.worker(first).status == Status.ACTIVE
    assert all(ctl.state.worker(w).status == Status.INITIALIZING for w in rest)
    routes = of(make_ready(ctl, 0, 16.0), C.Route)
    assert first in {r.prefill_worker_id for r in routes}
    assert not set(rest) & {r.prefill_worker_id for r in routes}
    # Training wants its GPUs back while two are still restoring: all three go back at once.
    out = ctl.handle(E.TrainingWants(17.0, ("t0", "t1", "t2"), 25.0))
    assert {c.worker_id for c in of(out, C.StopWorker)} == {first, *rest}
    assert C.ReleaseGpus(("t0", "t1", "t2"), "training") in out
    assert not ctl.groups and not ctl.state.gpus_in(Zone.OVERLAP)


def test_a_borrow_that_changes_roles_is_admitted_as_one_group():
    """A borrow that re-roles serving workers (colocated:2 -> disaggregated:1:3) keeps the
    old topology until every borrowed worker is ready, then changes roles with the admission:
    no mix of the two topologies is ever routable."""
    training = tuple(Gpu(f"t{i}", Zone.OVERLAP, "tnode") for i in range(2))
    policy = Policy("test", borrow="always")
    ctl = boot(policy, 2, training_gpus=training, advisor=DisaggOnGrowth(policy))
    out = ctl.handle(E.TrainingIdle(10.0, ("t0", "t1"), 300.0))
    inits = of(out, C.InitWorker)
    assert len(inits) == 2 and len({c.group_id for c in inits}) == 1
    assert not of(out, C.ChangeRole)
    out = ctl.handle(E.WorkerReady(15.0, inits[0].worker_id))
    out += ctl.handle(E.WeightsSynced(15.5, inits[0].worker_id, 0))
    assert not of(out, C.AdmitGroup) and {w.role for w in ctl.state.routable()} == {Role.COLOCATED}
    admitted = bring_up(ctl, [inits[1]], 20.0)
    assert of(admitted, C.AdmitGroup)[0].worker_ids == tuple(c.worker_id for c in inits)
    assert of(admitted, C.ChangeRole)
    assert ctl.state.role_counts() == {Role.COLOCATED: 0, Role.PREFILL: 1, Role.DECODE: 3}
