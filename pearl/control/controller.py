"""The elastic controller: one pure entry point, `handle(event) -> list[Command]` (§4.1).

It holds the unified `ClusterState` (changed only through plans, plus worker status
updates), the `TrajectoryBook` of the current and next rollout batches, and a `Policy` with
its advisor. A world (simulator or Ray runtime) feeds it events and executes the commands
it returns in order; every command's completion comes back as a later event (see
`pearl.control.commands`).

It is composed of parts over one shared `ControlContext` (`context.py`): the `ElasticScheduler`
(`elastic.py`: plans, groups, worker lifecycle), the inter-scale `Rebuilder`
(`rebuilder.py`), the intra-scale `ToggleManager` (`toggle.py`, with a policy's borrow
budget), and here the pipeline side: batches, weight versions, routing, re-decisions after
each step, and the table of which part handles each event.

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
from pearl.control.context import ControlContext
from pearl.control.elastic import ControllerError, ElasticScheduler, Group
from pearl.control.invariants import check_invariants
from pearl.control.notes import ControlNote
from pearl.control.plan import PDConfig, config_of
from pearl.control.policies import borrow_budget, get_policy
from pearl.control.policies.base import Advisor, Policy
from pearl.control.profile import HardwarePrior
from pearl.control.rebuilder import Rebuilder
from pearl.control.router import route_queued
from pearl.control.state import ClusterState, Gpu, Status
from pearl.control.toggle import ToggleManager

__all__ = ["Controller", "ControllerError"]


class Controller:
    """The sans-IO elastic controller.

    `state` holds the GPUs the rollout starts with (dedicated ones, maybe with workers
    already `active`); free held GPUs get workers on the first event. `batch_size`
    trajectories per rollout step, in GRPO groups of `group_size`. `training_gpus` names the
    training GPUs (zone `overlap`, with their nodes) that `TrainingIdle` may offer.

    Decisions come from `advisor` if given; else from the policy's advisor: with a
    `hardware` prior, the decision engine fed by the runtime tracker with the cost gates
    (`EngineAdvisor`), without one the model-free `HeuristicAdvisor`.

    `check_every`: check the invariants after every n-th event (1: every event, the default;
    0: never; long simulations use a larger n).
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
        policy = get_policy(policy) if isinstance(policy, str) else policy
        if check_every < 0:
            raise ValueError("check_every must be >= 0 (0: never check the invariants)")
        if batch_size < 1 or group_size < 1 or batch_size % group_size:
            raise ValueError("batch_size must be a positive multiple of group_size")
        if gpus_per_worker < 1:
            raise ValueError("gpus_per_worker must be >= 1")
        if advisor is None:
            extra = {} if hardware is None else {"hardware": hardware, "batch_size": batch_size}
            advisor = policy.make_advisor(gpus_per_worker=gpus_per_worker, **extra)
        self.check_every = check_every
        self._num_handled = 0
        self.num_groups = batch_size // group_size
        self.group_size = group_size
        self.next_step = initial_version
        self._started = False
        self.ctx = ControlContext(
            policy=policy,
            advisor=advisor,
            state=state,
            gpus_per_worker=gpus_per_worker,
            latest_version=initial_version,
        )
        # The parts, each over the one context; the scheduler's two hooks are the toggle
        # manager's returning GPUs and the re-decisions after a group's admission.
        self.scheduler = ElasticScheduler(
            self.ctx,
            returning_gpus=lambda: self.toggle.returning_gpus(),
            after_transition=self._after_transition,
        )
        self.rebuilder = Rebuilder(self.ctx, self.scheduler)
        self.toggle = ToggleManager(
            self.ctx,
            self.scheduler,
            self.rebuilder,
            training_gpus=training_gpus,
            budget=borrow_budget(policy),
        )
        self.check()

    # -- read-only views -------------------------------------------------------------------
    @property
    def state(self) -> ClusterState:
        """The current cluster state (immutable)."""
        return self.ctx.state

    @property
    def policy(self) -> Policy:
        return self.ctx.policy

    @property
    def advisor(self) -> Advisor:
        return self.ctx.advisor

    @property
    def book(self) -> TrajectoryBook:
        return self.ctx.book

    @property
    def latest_version(self) -> int:
        return self.ctx.latest_version

    @property
    def now_s(self) -> float:
        return self.ctx.now_s

    @property
    def groups(self) -> dict[str, Group]:
        """Pending groups (initialising workers), by id."""
        return self.scheduler.groups

    @property
    def offered(self) -> dict[str, Gpu]:
        """Preemptible GPUs offered and not held."""
        return self.ctx.offered

    @property
    def notes(self) -> list[ControlNote]:
        """Decisions and ignored events in the order they happened (`pearl.control.notes`);
        what a run directory's decisions.jsonl records."""
        return self.ctx.notes

    @property
    def ignored(self) -> list[str]:
        """Events that made no sense for the state they met, one line each."""
        return self.ctx.ignored

    @property
    def decisions(self) -> list[str]:
        """Every decision taken, one line each."""
        return self.ctx.decisions

    def predicted_batch_makespan_s(self) -> float | None:
        """The advisor's makespan for one rollout batch on the active config (None before
        any worker is active, or from an advisor without a model: the baselines'). Both
        worlds record it as a step's `predicted_makespan_s` when the batch starts."""
        config = config_of(self.ctx.state, (Status.ACTIVE,))
        return None if config is None else self.ctx.advisor.predicted_makespan_s(config)

    # -- the one entry point ---------------------------------------------------------------
    def handle(self, event: Any) -> list[cmd.Command]:
        """Apply `event`; return the commands the world must execute, in order."""
        c = self.ctx
        c.out = []
        time_s = getattr(event, "time_s", None)
        if not isinstance(time_s, (int, float)) or time_s != time_s:  # missing or NaN
            c.ignore(f"not an event (no time): {type(event).__name__}")
            return []
        time_s = float(time_s)
        if time_s > c.now_s:
            c.now_s = time_s
        if not self._started:
            self._started = True
            self.scheduler.replan("initial", urgent=False)
            self._start_batches()
        self._expire_groups()
        handler = _HANDLERS.get(type(event))
        if handler is None:
            c.ignore(f"unknown event type {type(event).__name__}")
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
        out, c.out = c.out, []
        return out

    # -- pipeline --------------------------------------------------------------------------
    def _start_batches(self) -> None:
        """Keep up to `max_batches_in_flight` batches within the staleness bound."""
        c = self.ctx
        p = c.policy
        while (
            len(c.book.steps) < p.max_batches_in_flight
            and self.next_step - c.latest_version <= p.max_staleness
        ):
            ids = c.book.start_batch(self.next_step, self.num_groups, self.group_size, c.now_s)
            c.emit(cmd.StartRolloutBatch(self.next_step, ids))
            self.next_step += 1

    def _route(self) -> list[cmd.Route]:
        c = self.ctx
        if not c.book.has_queued():  # the common case, in O(1)
            self.toggle.after_routing([])  # what routing nothing does (a budget may drain)
            return []
        routes = route_queued(
            c.book,
            c.state,
            max_inflight_per_worker=c.policy.max_inflight_per_worker,
            allowed=self.toggle.allowed_workers(),
            time_s=c.now_s,
            sticky_max_imbalance=c.policy.sticky_max_imbalance,
        )
        c.emit(*routes)
        self.toggle.after_routing(routes)
        return routes

    def _after_transition(self) -> None:
        """A group was admitted: run what waited for it."""
        if self.scheduler.redecide_pending:
            self.scheduler.redecide_pending = False
            self._adapt()
        self.rebuilder.maybe_expand()
        self.toggle.maybe_borrow()

    def _adapt(self) -> None:
        """Re-decide the PD config for the current budget (hysteresis in the advisor)."""
        c, sch = self.ctx, self.scheduler
        if sch.groups and not c.policy.admit_individually:
            sch.redecide_pending = True
            return
        pool = sch.pool()
        n = sch.budget(pool)
        if n < 1:
            return
        current = sch.current_config()
        target: PDConfig | None = None
        if current is None or current.num_workers != n:
            target = c.advisor.choose(n, current)
        elif c.policy.adapt_pd:
            target = c.advisor.redecide(n, current)
        if target is not None and target != current:
            sch.replan("switch", urgent=False, target=target)

    def _expire_groups(self) -> None:
        """Cancel groups that never finished starting (a worker that never reports back)."""
        limit = self.ctx.policy.group_timeout_s
        if limit is not None and self.scheduler.groups:
            self.scheduler.expire(limit)
        if limit is not None:
            self._retry_if_stuck()

    def _retry_if_stuck(self) -> None:
        """Nothing serves any more (e.g. the initial group failed): re-plan at once."""
        if not self.scheduler.groups and not self.ctx.has_serving_workers():
            self._adapt()

    # -- event handlers --------------------------------------------------------------------
    def _h_offer(self, e: ev.GpusOffered) -> None:
        self.rebuilder.on_offer(e.time_s, e.gpus, e.expected_window_s)

    def _h_reclaim(self, e: ev.ReclaimNotice) -> None:
        self.rebuilder.on_reclaim(e.time_s, tuple(e.gpu_ids), e.deadline_s)
        self._retry_if_stuck()

    def _h_gone(self, e: ev.GpusGone) -> None:
        self.rebuilder.on_gone(e.time_s, tuple(e.gpu_ids))
        self._retry_if_stuck()

    def _h_idle(self, e: ev.TrainingIdle) -> None:
        self.toggle.on_training_idle(e.time_s, tuple(e.gpu_ids), e.idle_until_s)

    def _h_wants(self, e: ev.TrainingWants) -> None:
        self.toggle.on_training_wants(e.time_s, tuple(e.gpu_ids), e.deadline_s)

    def _h_restored(self, e: ev.TrainingRestored) -> None:
        """A return is over: its duration (RestoreTraining emitted -> restored) is a measured
        deactivation cost."""
        c = self.ctx
        started = [c.restoring_since.pop(g) for g in e.gpu_ids if g in c.restoring_since]
        if not started:
            c.ignore(f"training restored on GPUs not being returned: {list(e.gpu_ids)}")
            return
        cost_s = e.time_s - min(started)
        if cost_s < 0:
            c.ignore(f"training restored {-cost_s:.3f}s before its return began")
            return
        c.advisor.record_switch("return", cost_s, 0.0, borrowed=True)

    def _h_trained(self, e: ev.TrainingStepFinished) -> None:
        c = self.ctx
        if e.version <= c.latest_version:
            c.ignore(f"weights v{e.version} not newer than v{c.latest_version}")
            return
        c.latest_version = e.version
        self.scheduler.on_new_version(e.version)
        self._start_batches()

    def _h_ready(self, e: ev.WorkerReady) -> None:
        self.scheduler.on_worker_ready(e.worker_id)

    def _h_failed(self, e: ev.WorkerInitFailed) -> None:
        self.scheduler.on_init_failed(e.worker_id, e.reason)
        self._retry_if_stuck()

    def _h_drained(self, e: ev.WorkerDrained) -> None:
        self.scheduler.on_worker_drained(e.worker_id)
        self.toggle.after_drain()

    def _h_synced(self, e: ev.WeightsSynced) -> None:
        self.scheduler.on_weights_synced(e.worker_id, e.version)

    def _h_traj_ready(self, e: ev.TrajectoryReady) -> None:
        if not self.ctx.book.mark_ready(e.traj_id, e.time_s):
            self.ctx.ignore(f"trajectory {e.traj_id} ready in a state that cannot be")

    def _h_phase(self, e: ev.RequestPhase) -> None:
        phase = TrajState.KV_TRANSFER if e.phase == "kv_transfer" else TrajState.DECODE
        if not self.ctx.book.mark_phase(e.traj_id, phase, e.time_s):
            self.ctx.ignore(f"phase {e.phase} of {e.traj_id} out of order")

    def _h_turn(self, e: ev.TurnFinished) -> None:
        if not self.ctx.book.mark_turn_finished(e.traj_id, e.worker_id, e.time_s):
            self.ctx.ignore(f"turn of {e.traj_id} finished on {e.worker_id}, not in flight there")

    def _h_interrupted(self, e: ev.RequestInterrupted) -> None:
        book = self.ctx.book
        if book.mark_interrupted(e.traj_id, e.worker_id, e.generated_tokens, e.time_s):
            return
        if book.interruption_counted(e.traj_id, e.worker_id):
            self.ctx.confirmed_interrupts += 1  # expected: the book counted it at once
            return
        self.ctx.ignore(f"interrupt of {e.traj_id} on {e.worker_id}: not in flight there")

    def _h_done(self, e: ev.TrajectoryDone) -> None:
        if not self.ctx.book.mark_done(e.traj_id, e.time_s):
            self.ctx.ignore(f"trajectory {e.traj_id} done in a state that cannot be")

    def _h_step(self, e: ev.RolloutStepFinished) -> None:
        c = self.ctx
        if not c.book.retire_batch(e.step):
            c.ignore(f"rollout step {e.step} finished but its batch is not done")
            return
        c.advisor.observe(e.time_s, e.turns, e.worker_steps)
        self.toggle.on_batch()
        self._start_batches()
        self._adapt()
        self.rebuilder.maybe_expand()
        self.toggle.maybe_borrow()

    # -- invariants ------------------------------------------------------------------------
    def check(self, traj_ids: Iterable[str] | None = None) -> None:
        """Raise `ControllerError` if any invariant is broken (`pearl.control.invariants`);
        with `traj_ids` the book checks only those trajectories."""
        check_invariants(self.ctx, self.scheduler.groups, traj_ids)


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
