"""Random interleavings of every event (plausible, duplicate, late, out of order, nonsense)
against the controller, checking the invariants after every step (hypothesis stateful)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.book import IN_FLIGHT, QUEUED, TrajState
from pearl.control.controller import Controller
from pearl.control.state import ClusterState, Gpu, Status, Zone

POLICIES = ["pearl", "pearl-ungated", "rlboost+", "roll", "pearl-disagg:1:2", "pearl-colocated"]
PREEMPTIBLE = tuple(Gpu(f"p{i}", Zone.PREEMPTIBLE, f"pn{i // 2}") for i in range(6))
TRAINING = tuple(Gpu(f"t{i}", Zone.OVERLAP, "tn") for i in range(4))
IDS = st.integers(0, 1 << 30)


class ControllerMachine(RuleBasedStateMachine):
    """The world is a bag of things the controller asked for and has not heard back about;
    each rule answers one of them (or sends something unexpected) and checks the answer."""

    @initialize(policy=st.sampled_from(POLICIES), num_dedicated=st.integers(1, 3))
    def start(self, policy: str, num_dedicated: int) -> None:
        state = ClusterState(gpus=tuple(Gpu(f"d{i}", Zone.DEDICATED) for i in range(num_dedicated)))
        self.ctl = Controller(
            policy, state=state, batch_size=4, group_size=2, training_gpus=TRAINING
        )
        self.t = 0.0
        self.sent: list[object] = []
        self.inits: list[str] = []  # InitWorker ids not answered yet
        self.syncs: list[tuple[str, int]] = []
        self.drains: list[str] = []
        self.workers_seen: list[str] = ["w99"]
        self.trajs_seen: list[str] = ["s9-g0-0"]
        self.started: set[str] = set()
        self.retired: set[str] = set()
        self.version = 0
        self.wanted: dict[str, float] = {}  # training GPU -> deadline, until idle again
        # the time of the latest training signal per GPU: a replayed (late) signal older
        # than it changes nothing, in the controller and here
        self.signal_t: dict[str, float] = {}
        self.send(E.Started(self.t))

    # -- plumbing --------------------------------------------------------------------------
    def send(self, event: object) -> list[C.Command]:
        ctl = self.ctl
        before = {t.traj_id: (t.state, t.num_interrupts) for t in ctl.book}
        held_before = set(ctl.state.gpus_in(Zone.OVERLAP))
        if isinstance(event, E.RolloutStepFinished) and ctl.book.step_done(event.step):
            self.retired |= {t.traj_id for t in ctl.book.step_trajs(event.step)}
        if isinstance(event, E.TrainingIdle):
            for g in event.gpu_ids:
                if event.time_s >= self.signal_t.get(g, float("-inf")):
                    self.wanted.pop(g, None)
                    self.signal_t[g] = event.time_s
        out = ctl.handle(event)
        self.sent.append(event)
        s = ctl.state
        routed: set[str] = set()
        for c in out:
            if isinstance(c, C.Route):
                was, num_interrupts = before[c.traj_id]
                traj = ctl.book.get(c.traj_id)
                assert traj is not None and c.traj_id not in routed, c
                routed.add(c.traj_id)
                ready_now = isinstance(event, E.TrajectoryReady) and event.traj_id == c.traj_id
                interrupted_now = traj.num_interrupts == num_interrupts + 1
                assert (
                    was in QUEUED
                    or (ready_now and was == TrajState.ENV)
                    or (was in IN_FLIGHT and interrupted_now)
                ), (c, was)
                assert traj.workers == tuple(
                    dict.fromkeys(w for w in (c.prefill_worker_id, c.decode_worker_id) if w)
                )
                for w in (c.prefill_worker_id, c.decode_worker_id):
                    if w is not None:
                        assert s.has_worker(w) and s.worker(w).status == Status.ACTIVE, c
            elif isinstance(c, C.InitWorker):
                self.inits.append(c.worker_id)
                self.workers_seen.append(c.worker_id)
            elif isinstance(c, C.SyncWeights):
                self.syncs.append((c.worker_id, c.version))
            elif isinstance(c, C.Drain):
                self.drains.append(c.worker_id)
            elif isinstance(c, C.AdmitGroup):
                for w in c.worker_ids:
                    assert s.worker(w).status == Status.ACTIVE
            elif isinstance(c, C.StartRolloutBatch):
                self.started.update(c.traj_ids)
                self.trajs_seen.extend(c.traj_ids)
            elif isinstance(c, C.OffloadTraining):
                for g in c.gpu_ids:
                    assert g not in self.wanted, f"borrowed {g} that training wants"
        if isinstance(event, E.TrainingWants):
            released = {
                g
                for c in out
                if isinstance(c, C.ReleaseGpus) and c.to == "training"
                for g in c.gpu_ids
            }
            for g in event.gpu_ids:
                assert not s.has_gpu(g), f"{g} still held after TrainingWants"
                assert g in released or g not in held_before, f"{g} not released to training"
                assert event.time_s <= event.deadline_s  # released now, so before the deadline
                if event.time_s >= self.signal_t.get(g, float("-inf")):
                    self.wanted[g] = event.deadline_s
                    self.signal_t[g] = event.time_s
        return out

    def tick(self, dt: float = 1.0) -> float:
        self.t += dt
        return self.t

    # -- GPUs ------------------------------------------------------------------------------
    @rule(ids=st.sets(st.integers(0, 5), min_size=1), window=st.sampled_from([None, 30.0, 900.0]))
    def offer(self, ids: set[int], window: float | None) -> None:
        self.send(E.GpusOffered(self.tick(), tuple(PREEMPTIBLE[i] for i in sorted(ids)), window))

    @rule(ids=st.sets(st.integers(0, 5), min_size=1))
    def reclaim(self, ids: set[int]) -> None:
        t = self.tick()
        self.send(E.ReclaimNotice(t, tuple(f"p{i}" for i in sorted(ids)), t + 30.0))

    @rule(ids=st.sets(st.integers(0, 5), min_size=1))
    def gone(self, ids: set[int]) -> None:
        self.send(E.GpusGone(self.tick(), tuple(f"p{i}" for i in sorted(ids))))

    @rule(ids=st.sets(st.integers(0, 3), min_size=1), window=st.sampled_from([5.0, 100.0, 1e4]))
    def training_idle(self, ids: set[int], window: float) -> None:
        t = self.tick()
        gpus = tuple(f"t{i}" for i in sorted(ids))
        self.send(E.TrainingIdle(t, gpus, t + window))

    @rule(ids=st.sets(st.integers(0, 3), min_size=1), slack=st.sampled_from([0.0, 5.0]))
    def training_wants(self, ids: set[int], slack: float) -> None:
        t = self.tick()
        self.send(E.TrainingWants(t, tuple(f"t{i}" for i in sorted(ids)), t + slack))

    @rule(bump=st.sampled_from([1, 1, 1, 0, -1]))
    def training_step(self, bump: int) -> None:
        self.version = max(0, self.version + bump)
        self.send(E.TrainingStepFinished(self.tick(), self.version))

    # -- workers ---------------------------------------------------------------------------
    @precondition(lambda self: self.inits)
    @rule(i=IDS, fail=st.sampled_from([False, False, False, True]))
    def answer_init(self, i: int, fail: bool) -> None:
        w = self.inits.pop(i % len(self.inits))
        ev = E.WorkerInitFailed(self.tick(), w, "boom") if fail else E.WorkerReady(self.t, w)
        self.send(ev)

    @precondition(lambda self: self.syncs)
    @rule(i=IDS)
    def answer_sync(self, i: int) -> None:
        w, v = self.syncs.pop(i % len(self.syncs))
        self.send(E.WeightsSynced(self.tick(), w, v))

    @rule()
    def cooperate(self) -> None:
        """The world answers everything it was asked for: inits succeed, syncs land."""
        while self.inits:
            self.send(E.WorkerReady(self.tick(0.1), self.inits.pop(0)))
        while self.syncs:
            w, v = self.syncs.pop(0)
            self.send(E.WeightsSynced(self.tick(0.1), w, v))

    @precondition(lambda self: self.drains)
    @rule(i=IDS)
    def answer_drain(self, i: int) -> None:
        self.send(E.WorkerDrained(self.tick(), self.drains.pop(i % len(self.drains))))

    @rule(i=IDS, kind=st.integers(0, 3), v=st.integers(0, 3))
    def nonsense_worker_event(self, i: int, kind: int, v: int) -> None:
        w = self.workers_seen[i % len(self.workers_seen)]
        t = self.tick()
        ev = [
            E.WorkerReady(t, w),
            E.WorkerInitFailed(t, w, "late"),
            E.WeightsSynced(t, w, v),
            E.WorkerDrained(t, w),
        ][kind]
        self.send(ev)

    # -- trajectories ----------------------------------------------------------------------
    def _pick(self, i: int, states: frozenset[TrajState] | None = None) -> str:
        pool = [t.traj_id for t in self.ctl.book if states is None or t.state in states]
        return pool[i % len(pool)] if pool else self.trajs_seen[i % len(self.trajs_seen)]

    @rule(i=IDS)
    def traj_ready(self, i: int) -> None:
        self.send(E.TrajectoryReady(self.tick(), self._pick(i, frozenset({TrajState.ENV}))))

    @rule(i=IDS, right_worker=st.booleans())
    def turn_finished(self, i: int, right_worker: bool) -> None:
        tid = self._pick(i, IN_FLIGHT)
        traj = self.ctl.book.get(tid)
        w = traj.decode_worker if traj and traj.decode_worker and right_worker else "w7"
        self.send(E.TurnFinished(self.tick(), tid, w or "w7"))

    @rule(i=IDS, phase=st.sampled_from(["kv_transfer", "decode"]))
    def request_phase(self, i: int, phase: str) -> None:
        self.send(E.RequestPhase(self.tick(), self._pick(i, IN_FLIGHT), phase))  # type: ignore[arg-type]

    @rule(i=IDS, tokens=st.integers(0, 50))
    def request_interrupted(self, i: int, tokens: int) -> None:
        tid = self._pick(i, IN_FLIGHT)
        traj = self.ctl.book.get(tid)
        w = traj.prefill_worker if traj and traj.prefill_worker else "w3"
        self.send(E.RequestInterrupted(self.tick(), tid, w, tokens))

    @rule(i=IDS)
    def traj_done(self, i: int) -> None:
        self.send(E.TrajectoryDone(self.tick(), self._pick(i, frozenset({TrajState.ENV}))))

    @rule()
    def progress_all(self) -> None:
        """Every trajectory moves on: env steps end, turns in flight finish."""
        for t in list(self.ctl.book):
            if t.state == TrajState.ENV:
                self.send(E.TrajectoryReady(self.tick(0.1), t.traj_id))
            elif t.state in IN_FLIGHT and t.decode_worker:
                self.send(E.TurnFinished(self.tick(0.1), t.traj_id, t.decode_worker))

    @rule(turns=st.integers(0, 3))
    def finish_oldest_batch(self, turns: int) -> None:
        """The oldest batch's trajectories end once they had `turns` turns, then the step."""
        steps = self.ctl.book.steps
        if not steps:
            return
        for t in self.ctl.book.step_trajs(steps[0]):
            if t.state == TrajState.ENV and t.num_turns >= turns:
                self.send(E.TrajectoryDone(self.tick(0.1), t.traj_id))
        self.rollout_step(steps[0])

    @rule(step=st.integers(0, 4))
    def rollout_step(self, step: int) -> None:
        self.send(E.RolloutStepFinished(self.tick(), step))

    @precondition(lambda self: self.sent)
    @rule(i=IDS)
    def replay(self, i: int) -> None:
        """A duplicate (and so late, maybe out of order) copy of an earlier event."""
        self.send(self.sent[i % len(self.sent)])

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def gpus_bound_once_and_book_consistent(self) -> None:
        if not hasattr(self, "ctl"):
            return
        self.ctl.check()  # the full check, whatever the last event was
        s = self.ctl.state
        owners = [g for w in s.workers for g in w.gpu_ids]
        assert len(owners) == len(set(owners))
        book_ids = {t.traj_id for t in self.ctl.book}
        assert book_ids == self.started - self.retired  # none lost, none duplicated
        assert all(t.staleness() <= self.ctl.policy.max_staleness for t in self.ctl.book)
        for g in self.ctl.groups.values():  # no group half-admitted
            assert {s.worker(w).status for w in g.worker_ids} == {Status.INITIALIZING}
        for g, _deadline in self.wanted.items():
            assert not s.has_gpu(g)


TestController = ControllerMachine.TestCase
TestController.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
