"""The elastic controller: one pure entry point, `handle(event) -> list[Command]` (§4.1).

It holds the unified `ClusterState` (changed only through plans, plus worker status
updates), the `TrajectoryBook` of the current and next rollout batches, and a `Policy` with
its advisor. A world (simulator or Ray runtime) feeds it events and executes the commands
it returns in order; every command's completion comes back as a later event (see
`pearl.control.commands`).

Parts: the elastic scheduler core (`scheduler.py`: plans, groups, worker lifecycle), the
inter-scale rebuilder (`rebuilder.py`), the intra-scale toggle manager (`toggle.py`), and
here the pipeline side: batches, weight versions, routing, re-decisions after each step.

The controller starts on its first event (any kind): it plans workers for free held GPUs
(the initial group) and starts the first rollout batches. Events that make no sense for the
current state are recorded in `ignored` (and logged) and change nothing. Every `handle`
ends by checking the invariants (`check`); a violation raises `ControllerError` (a bug).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.control.book import TrajectoryBook, TrajState
from pearl.control.plan import PDConfig
from pearl.control.policies import get_policy
from pearl.control.policies.base import Advisor, Policy
from pearl.control.profile import HardwarePrior
from pearl.control.router import route_queued
from pearl.control.scheduler import ControllerError, Group
from pearl.control.state import ClusterState, Gpu, Status, Zone
from pearl.control.toggle import ToggleMixin

__all__ = ["Controller", "ControllerError"]


class Controller(ToggleMixin):
    """The sans-IO elastic controller.

    `state` holds the GPUs the rollout starts with (dedicated ones, maybe with workers
    already `active`); free held GPUs get workers on the first event. `batch_size`
    trajectories per rollout step, in GRPO groups of `group_size`. `training_gpus` names the
    training GPUs (zone `overlap`, with their nodes) that `TrainingIdle` may offer.

    Decisions come from `advisor` if given; else from the policy's advisor: with a
    `hardware` prior, the decision engine fed by the runtime tracker with the cost gates
    (`EngineAdvisor`), without one the model-free `HeuristicAdvisor`.
    """

    def __init__(
        self,
        policy: Policy | str,
        *,
        state: ClusterState,
        batch_size: int = 64,
        group_size: int = 8,
        gpus_per_worker: int = 1,
        training_gpus: Iterable[Gpu] = (),
        advisor: Advisor | None = None,
        hardware: HardwarePrior | None = None,
        initial_version: int = 0,
        check_every: int = 1,
    ) -> None:
        self.policy = get_policy(policy) if isinstance(policy, str) else policy
        if check_every < 0:
            raise ValueError("check_every must be >= 0 (0: never check the invariants)")
        self.check_every = check_every
        self._num_handled = 0
        if batch_size < 1 or group_size < 1 or batch_size % group_size:
            raise ValueError("batch_size must be a positive multiple of group_size")
        if gpus_per_worker < 1:
            raise ValueError("gpus_per_worker must be >= 1")
        if advisor is None:
            extra = {} if hardware is None else {"hardware": hardware, "batch_size": batch_size}
            advisor = self.policy.make_advisor(gpus_per_worker=gpus_per_worker, **extra)
        self.advisor = advisor
        self.book = TrajectoryBook(self.policy.max_staleness)
        self.num_groups = batch_size // group_size
        self.group_size = group_size
        self.gpus_per_worker = gpus_per_worker
        self.latest_version = initial_version
        self.next_step = initial_version
        self.now_s = 0.0
        self.groups = {}
        self.offered = {}
        self.offer_window_s = None
        self.idle_until = {}
        self.offered_at = {}
        self.lost_at = {}
        self.wanted_at = {}
        self.restoring_since = {}
        self.training_gpus = {g.gpu_id: Gpu(g.gpu_id, Zone.OVERLAP, g.node) for g in training_gpus}
        self.ignored = []
        self.decisions = []
        self._state = state
        self._out = []
        self._group_seq = 0
        self._redecide_pending = False
        self._started = False
        self.borrow_budget_turns = self.policy.initial_borrow_budget_turns
        self.borrow_turns_left = self.borrow_budget_turns
        self.borrow_started_s = None
        self.returned_early_s = None
        starting = tuple(w.worker_id for w in state.workers_with(statuses=(Status.INITIALIZING,)))
        if starting:  # workers the world is already starting form the initial group
            self.groups["initial-0"] = Group("initial-0", "initial", starting, 0.0)
        self.check()

    @property
    def state(self) -> ClusterState:
        """The current cluster state (immutable; read-only)."""
        return self._state

    # -- the one entry point ---------------------------------------------------------------
    def handle(self, event: Any) -> list[cmd.Command]:
        """Apply `event`; return the commands the world must execute, in order."""
        self._out = []
        time_s = getattr(event, "time_s", None)
        if not isinstance(time_s, (int, float)) or time_s != time_s:  # missing or NaN
            self._ignore(f"not an event (no time): {type(event).__name__}")
            return []
        time_s = float(time_s)
        if time_s > self.now_s:
            self.now_s = time_s
        if not self._started:
            self._started = True
            self._replan("initial", urgent=False)
            self._start_batches()
        self._expire_groups()
        handler = _HANDLERS.get(type(event))
        if handler is None:
            self._ignore(f"unknown event type {type(event).__name__}")
        else:
            handler(self, event)
        routed = self._route()
        self._num_handled += 1
        n = self.check_every
        if n == 1 or (n and self._num_handled % n == 0):
            if type(event) in _TRAJECTORY_EVENTS:  # hot path: check what it touched
                self.check(
                    (event.traj_id, *[r.traj_id for r in routed]) if routed else (event.traj_id,)
                )
            else:
                self.check()
        out, self._out = self._out, []
        return out

    # -- pipeline --------------------------------------------------------------------------
    def _start_batches(self) -> None:
        """Keep up to `max_batches_in_flight` batches within the staleness bound."""
        p = self.policy
        while (
            len(self.book.steps) < p.max_batches_in_flight
            and self.next_step - self.latest_version <= p.max_staleness
        ):
            ids = self.book.start_batch(
                self.next_step, self.num_groups, self.group_size, self.now_s
            )
            self._emit(cmd.StartRolloutBatch(self.next_step, ids))
            self.next_step += 1

    def _route(self) -> list[cmd.Route]:
        if not self.book.has_queued():  # the common case, in O(1)
            self._spend_budget([])  # what routing nothing does (a budgeted borrow may drain)
            return []
        routes = route_queued(
            self.book,
            self._state,
            max_inflight_per_worker=self.policy.max_inflight_per_worker,
            allowed=self._budget_allowed(),
            time_s=self.now_s,
            sticky_max_imbalance=self.policy.sticky_max_imbalance,
        )
        self._emit(*routes)
        self._spend_budget(routes)
        return routes

    def _after_transition(self) -> None:
        if self._redecide_pending:
            self._redecide_pending = False
            self._adapt()
        self._maybe_expand()
        self._maybe_borrow()

    def _adapt(self) -> None:
        """Re-decide the PD config for the current budget (hysteresis in the advisor)."""
        if self.groups and not self.policy.admit_individually:
            self._redecide_pending = True
            return
        pool = self._pool()
        n = self._budget(pool)
        if n < 1:
            return
        current = self.current_config()
        target: PDConfig | None = None
        if current is None or current.num_workers != n:
            target = self.advisor.choose(n, current)
        elif self.policy.adapt_pd:
            target = self.advisor.redecide(n, current)
        if target is not None and target != current:
            self._replan("switch", urgent=False, target=target)

    # -- event handlers --------------------------------------------------------------------
    def _h_offer(self, e: ev.GpusOffered) -> None:
        self._on_offer(e.time_s, e.gpus, e.expected_window_s)

    def _h_reclaim(self, e: ev.ReclaimNotice) -> None:
        self._on_reclaim(e.time_s, tuple(e.gpu_ids), e.deadline_s)
        self._retry_if_stuck()

    def _h_gone(self, e: ev.GpusGone) -> None:
        self._on_gone(e.time_s, tuple(e.gpu_ids))
        self._retry_if_stuck()

    def _h_idle(self, e: ev.TrainingIdle) -> None:
        self._on_training_idle(e.time_s, tuple(e.gpu_ids), e.idle_until_s)

    def _h_wants(self, e: ev.TrainingWants) -> None:
        self._on_training_wants(e.time_s, tuple(e.gpu_ids), e.deadline_s)

    def _h_restored(self, e: ev.TrainingRestored) -> None:
        """A return is over: its duration (RestoreTraining emitted -> restored) is a measured
        deactivation cost."""
        started = [self.restoring_since.pop(g) for g in e.gpu_ids if g in self.restoring_since]
        if not started:
            self._ignore(f"training restored on GPUs not being returned: {list(e.gpu_ids)}")
            return
        cost_s = e.time_s - min(started)
        if cost_s < 0:
            self._ignore(f"training restored {-cost_s:.3f}s before its return began")
            return
        self.advisor.record_switch("return", cost_s, 0.0, borrowed=True)

    def _h_trained(self, e: ev.TrainingStepFinished) -> None:
        if e.version <= self.latest_version:
            self._ignore(f"weights v{e.version} not newer than v{self.latest_version}")
            return
        self.latest_version = e.version
        for w in self._state.workers:
            g = self.group_of(w.worker_id)
            ready = g is not None and w.worker_id in g.ready
            if w.status == Status.ACTIVE or ready:
                self._emit(cmd.SyncWeights(w.worker_id, e.version))
            if g is not None and not self.book.version_admissible(w.weight_version, e.version):
                g.synced.discard(w.worker_id)
        self._start_batches()

    def _h_ready(self, e: ev.WorkerReady) -> None:
        self._on_worker_ready(e.worker_id)

    def _h_failed(self, e: ev.WorkerInitFailed) -> None:
        self._on_init_failed(e.worker_id, e.reason)
        self._retry_if_stuck()

    def _h_drained(self, e: ev.WorkerDrained) -> None:
        self._on_worker_drained(e.worker_id)
        self._maybe_return_early()

    def _h_synced(self, e: ev.WeightsSynced) -> None:
        self._on_weights_synced(e.worker_id, e.version)

    def _h_traj_ready(self, e: ev.TrajectoryReady) -> None:
        if not self.book.mark_ready(e.traj_id, e.time_s):
            self._ignore(f"trajectory {e.traj_id} ready in a state that cannot be")

    def _h_phase(self, e: ev.RequestPhase) -> None:
        phase = TrajState.KV_TRANSFER if e.phase == "kv_transfer" else TrajState.DECODE
        if not self.book.mark_phase(e.traj_id, phase, e.time_s):
            self._ignore(f"phase {e.phase} of {e.traj_id} out of order")

    def _h_turn(self, e: ev.TurnFinished) -> None:
        if not self.book.mark_turn_finished(e.traj_id, e.worker_id, e.time_s):
            self._ignore(f"turn of {e.traj_id} finished on {e.worker_id}, not in flight there")

    def _h_interrupted(self, e: ev.RequestInterrupted) -> None:
        if not self.book.mark_interrupted(e.traj_id, e.worker_id, e.generated_tokens, e.time_s):
            self._ignore(f"interrupt of {e.traj_id} on {e.worker_id}: already handled")

    def _h_done(self, e: ev.TrajectoryDone) -> None:
        if not self.book.mark_done(e.traj_id, e.time_s):
            self._ignore(f"trajectory {e.traj_id} done in a state that cannot be")

    def _h_step(self, e: ev.RolloutStepFinished) -> None:
        if not self.book.retire_batch(e.step):
            self._ignore(f"rollout step {e.step} finished but its batch is not done")
            return
        self.advisor.observe(e.time_s, e.turns, e.worker_steps)
        self._tune_budget_on_batch()
        self._start_batches()
        self._adapt()
        self._maybe_expand()
        self._maybe_borrow()

    def _expire_groups(self) -> None:
        """Cancel groups that never finished starting (a worker that never reports back)."""
        limit = self.policy.group_timeout_s
        if limit is None:
            return
        if not self.groups:  # the common case: nothing starting (what follows is a no-op
            self._retry_if_stuck()  # loop, then the same retry)
            return
        for g in [g for g in self.groups.values() if self.now_s - g.started_s > limit]:
            late = [w for w in g.worker_ids if w not in g.synced]
            self._give_back(self._cancel_group(g, f"not ready after {limit:.0f}s: {late}"))
        self._retry_if_stuck()

    def _retry_if_stuck(self) -> None:
        """Nothing serves any more (e.g. the initial group failed): re-plan at once."""
        if not self.groups and not self._has_serving_workers():
            self._adapt()

    # -- invariants ------------------------------------------------------------------------
    def check(self, traj_ids: Iterable[str] | None = None) -> None:
        """Raise `ControllerError` if any invariant is broken (see docs/architecture.md): the state's
        own invariants hold by construction; here the groups (none half-admitted), the book
        (every trajectory once, in one state, within the staleness bound; with `traj_ids`
        only those, the cheap check after a trajectory event) and their agreement."""
        s = self._state
        try:
            self.book.check(traj_ids)
        except ValueError as err:
            raise ControllerError(str(err)) from err
        in_groups: set[str] = set()
        for g in self.groups.values():
            for wid in g.worker_ids:
                if not s.has_worker(wid) or s.worker(wid).status != Status.INITIALIZING:
                    raise ControllerError(f"group {g.group_id} is half-admitted ({wid})")
                in_groups.add(wid)
        for w in s.workers_with(statuses=(Status.INITIALIZING,)):
            if w.worker_id not in in_groups:
                raise ControllerError(f"initialising worker {w.worker_id} has no group")
        for wid in self.book.loads():
            if not s.has_worker(wid):
                raise ControllerError(f"a trajectory is in flight on missing worker {wid}")
        for gid in self.offered:
            if s.has_gpu(gid):
                raise ControllerError(f"GPU {gid} both held and offered")


_TRAJECTORY_EVENTS = frozenset(
    {
        ev.TrajectoryReady,
        ev.RequestPhase,
        ev.TurnFinished,
        ev.RequestInterrupted,
        ev.TrajectoryDone,
    }
)

_HANDLERS: dict[type, Any] = {
    ev.Started: lambda self, e: None,
    ev.GpusOffered: Controller._h_offer,
    ev.ReclaimNotice: Controller._h_reclaim,
    ev.GpusGone: Controller._h_gone,
    ev.TrainingIdle: Controller._h_idle,
    ev.TrainingWants: Controller._h_wants,
    ev.TrainingRestored: Controller._h_restored,
    ev.TrainingStepFinished: Controller._h_trained,
    ev.WorkerReady: Controller._h_ready,
    ev.WorkerInitFailed: Controller._h_failed,
    ev.WorkerDrained: Controller._h_drained,
    ev.WeightsSynced: Controller._h_synced,
    ev.TrajectoryReady: Controller._h_traj_ready,
    ev.RequestPhase: Controller._h_phase,
    ev.TurnFinished: Controller._h_turn,
    ev.RequestInterrupted: Controller._h_interrupted,
    ev.TrajectoryDone: Controller._h_done,
    ev.RolloutStepFinished: Controller._h_step,
}
