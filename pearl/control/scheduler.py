"""The elastic scheduler's core: plans, groups and the worker lifecycle (paper §4.1.2, §4.4).

Every membership or role change goes through a `Plan` (`plan_transition` + `apply`):

* removals: urgent ones (GPUs leaving) interrupt the worker's requests, keeping each
  trajectory's generated prefix and environment progress, and stop it at once; graceful
  ones drain it first (`draining` serves nothing new; removed on `WorkerDrained`);
* role changes: at once, except in an expansion or borrow, where they wait for the new
  group and happen with its admission (no partial topology is ever routable);
* additions: new workers `initializing` in a *group*; each gets `SyncWeights` to the latest
  version once ready; the group is admitted (all `active` at once, with its deferred role
  changes) only when every member is ready and synced. Any failure cancels the group.

`SchedulerCore` holds the controller's data; the rebuilder, the toggle manager and the
controller add event handlers on top of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pearl.control import commands as cmd
from pearl.control.book import TrajectoryBook
from pearl.control.plan import (
    AddWorker,
    PDConfig,
    Plan,
    PlanError,
    RemoveWorker,
    SetRole,
    apply,
    config_of,
    plan_transition,
)
from pearl.control.policies.base import Advisor, Policy
from pearl.control.state import ClusterState, Gpu, Status, Zone

log = logging.getLogger("pearl.control")
_T = TypeVar("_T")


class ControllerError(RuntimeError):
    """A controller invariant broke (a bug, never a bad event)."""


@dataclass(slots=True)
class Group:
    """Workers started together and admitted together (all-or-nothing, paper §4.5)."""

    group_id: str
    kind: str  # initial | expand | borrow | replan
    worker_ids: tuple[str, ...]
    started_s: float
    deferred: tuple[SetRole, ...] = ()
    ready: set[str] = field(default_factory=set)
    synced: set[str] = field(default_factory=set)  # ready and synced to the latest version
    last_ready_s: float | None = None


class SchedulerCore:
    """Shared data and the plan/group machinery. Subclasses add event handlers."""

    policy: Policy
    advisor: Advisor
    book: TrajectoryBook
    gpus_per_worker: int
    latest_version: int
    now_s: float
    groups: dict[str, Group]
    offered: dict[str, Gpu]
    offer_window_s: float | None
    idle_until: dict[str, float]
    # Latest event time per GPU, to tell a late duplicate from news (see `_stale`).
    offered_at: dict[str, float]
    lost_at: dict[str, float]
    wanted_at: dict[str, float]
    restoring_since: dict[str, float]  # GPU -> when its RestoreTraining was emitted
    training_gpus: dict[str, Gpu]
    ignored: list[str]
    decisions: list[str]
    _state: ClusterState
    _out: list[cmd.Command]
    _group_seq: int
    _redecide_pending: bool

    # Derived views of `_state` (read every event: which GPUs are borrowed, who serves);
    # states are immutable, so they are memoised per state object (see `_of_state`).
    _memo_state: ClusterState | None = None
    _memo: dict[str, Any]

    # -- small helpers ---------------------------------------------------------------------
    def _of_state(self, key: str, compute: Callable[[], _T]) -> _T:
        """`compute()` for the current state, memoised until `_state` is replaced. `compute`
        must be a pure function of `_state` (states are immutable; identity is the key)."""
        if self._memo_state is not self._state:
            self._memo_state = self._state
            self._memo = {}
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = compute()
            return value

    def _emit(self, *commands: cmd.Command) -> None:
        self._out.extend(commands)
        for c in commands:
            if isinstance(c, cmd.RestoreTraining):  # its TrainingRestored measures the return
                for g in c.gpu_ids:
                    self.restoring_since[g] = self.now_s

    def _ignore(self, why: str) -> None:
        self.ignored.append(f"t={self.now_s:.3f}: {why}")
        log.info("ignored: %s", why)

    def _decide(self, what: str) -> None:
        self.decisions.append(f"t={self.now_s:.3f}: {what}")
        log.info("decision: %s", what)

    @staticmethod
    def _stale(seen: dict[str, float], gpu_id: str, time_s: float, *, strict: bool) -> bool:
        """Is an event at `time_s` about `gpu_id` older than the last opposite event?"""
        last = seen.get(gpu_id, float("-inf"))
        return time_s < last if strict else time_s <= last

    def group_of(self, worker_id: str) -> Group | None:
        for g in self.groups.values():
            if worker_id in g.worker_ids:
                return g
        return None

    def _pending_gpus(self) -> set[str]:
        return {
            gid
            for g in self.groups.values()
            for w in g.worker_ids
            if self._state.has_worker(w)
            for gid in self._state.worker(w).gpu_ids
        }

    def _pool(self) -> list[str]:
        """GPUs a re-plan may use: held, not under a draining worker or a pending group."""
        busy = self._pending_gpus() | self._returning_gpus()
        for w in self._state.workers_with(statuses=(Status.DRAINING,)):
            busy.update(w.gpu_ids)
        return [g.gpu_id for g in self._state.gpus if g.gpu_id not in busy]

    def _returning_gpus(self) -> set[str]:
        """Held GPUs on their way back (hook; the toggle manager overrides it)."""
        return set()

    def _budget(self, pool: list[str]) -> int:
        return len(pool) // self.gpus_per_worker

    def current_config(self) -> PDConfig | None:
        """The PD config of the workers a re-plan would consider (active + inactive)."""
        return config_of(self._state.view(self._pool()))

    # -- planning ----------------------------------------------------------------------------
    def _plan(self, target: PDConfig | None, pool: list[str]) -> Plan | None:
        """A plan over `pool` to `target` (shrunk by one worker at a time if it cannot be
        placed, e.g. GPUs split across nodes); None if the pool hosts no worker."""
        view = self._state.view(pool)
        n = self._budget(pool)
        while n >= 1:
            want = target if target is not None and target.num_workers == n else None
            if want is None:
                want = self.advisor.choose(n, config_of(view))
            try:
                return plan_transition(view, want, pool, gpus_per_worker=self.gpus_per_worker)
            except PlanError:
                n -= 1
                target = None
        # No worker fits: remove every worker in the pool.
        ops = tuple(RemoveWorker(w.worker_id) for w in view.workers)
        return Plan(PDConfig.colocated(1), ops) if ops else None

    def _replan(self, kind: str, *, urgent: bool, target: PDConfig | None = None) -> None:
        plan = self._plan(target, self._pool())
        if plan is not None and not plan.is_empty:
            self._decide(f"{kind}: -> {plan.target} ({plan.num_ops} ops)")
            self._execute(plan, kind, urgent=urgent)

    def _may_start(self, kind: str) -> bool:
        """Whether a new `kind` ("expand" or "borrow") group may start now. One expansion
        and one borrow may initialise side by side (they add workers on disjoint GPUs, the
        paper's two elastic paths, §4.5 and §4.6); anything else waits for the pending
        groups: a second group of the same kind, a re-plan, or a group whose admission
        will change the roles of serving workers (its plan assumed today's topology)."""
        if self.policy.admit_individually:
            return True
        return all(
            g.kind in ("expand", "borrow") and g.kind != kind and not g.deferred
            for g in self.groups.values()
        )

    def _concurrent_plan_ok(self, plan: Plan) -> bool:
        """A plan made while other groups are pending may only add workers: a role change
        of a serving worker could contradict the pending group's own plan."""
        return not self.groups or (not plan.role_changes and not plan.removes)

    def _execute(self, plan: Plan, kind: str, *, urgent: bool) -> Group | None:
        """Carry out `plan` (see module doc). Returns the new group, if any."""
        for op in plan.removes:
            w = self._state.worker(op.worker_id)
            if urgent or w.status == Status.INITIALIZING:
                self._kill_worker(w.worker_id, interrupt=True)
            elif w.status != Status.DRAINING:
                self._state = self._state.update_worker(w.worker_id, status=Status.DRAINING)
                self._emit(cmd.Drain(w.worker_id))
        roles = plan.role_changes
        adds = plan.adds
        defer = bool(adds) and kind in ("expand", "borrow")
        if roles and not defer:
            self._set_roles(roles)
        if not adds:
            return None
        self._state = apply(self._state, adds)
        if self.policy.admit_individually:
            groups = [self._new_group(kind, (a,), ()) for a in adds]
            return groups[-1]
        return self._new_group(kind, adds, roles if defer else ())

    def _new_group(
        self, kind: str, adds: tuple[AddWorker, ...], deferred: tuple[SetRole, ...]
    ) -> Group:
        self._group_seq += 1
        gid = f"{kind}-{self._group_seq}"
        g = Group(gid, kind, tuple(a.worker_id for a in adds), self.now_s, deferred)
        self.groups[gid] = g
        for a in adds:
            self._emit(cmd.InitWorker(a.worker_id, a.gpu_ids, a.role, gid))
        return g

    def _set_roles(self, roles: tuple[SetRole, ...]) -> None:
        ok = tuple(
            op
            for op in roles
            if self._state.has_worker(op.worker_id)
            and self._state.worker(op.worker_id).status != Status.DRAINING
        )
        self._state = apply(self._state, ok)
        self._emit(*(cmd.ChangeRole(op.worker_id, op.role) for op in ok))

    def _kill_worker(self, worker_id: str, *, interrupt: bool) -> None:
        """Remove a worker now: interrupt its requests (preserving progress) and stop it."""
        if interrupt and self.book.num_on_worker(worker_id):
            self._emit(cmd.Interrupt(worker_id))
        self.book.interrupt_workers([worker_id])
        self.book.forget_worker(worker_id)
        self._emit(cmd.StopWorker(worker_id))
        self._state = apply(self._state, (RemoveWorker(worker_id),))

    # -- groups --------------------------------------------------------------------------------
    def _try_admit(self, g: Group) -> None:
        """Admit `g` when every member is ready and synced to an admissible version
        (`TrajectoryBook.version_admissible`)."""
        members = [self._state.worker(w) for w in g.worker_ids]
        if len(g.synced) < len(members):
            return
        if not all(
            self.book.version_admissible(w.weight_version, self.latest_version) for w in members
        ):
            return
        self._set_roles(g.deferred)
        for w in g.worker_ids:
            self._state = self._state.update_worker(w, status=Status.ACTIVE)
        del self.groups[g.group_id]
        self._emit(cmd.AdmitGroup(g.group_id, g.worker_ids))
        self._decide(f"admit {g.group_id} ({len(g.worker_ids)} workers)")
        if g.kind in ("expand", "borrow"):
            ready_s = g.last_ready_s if g.last_ready_s is not None else self.now_s
            prep_s, finalize_s = ready_s - g.started_s, self.now_s - ready_s
            borrowed = g.kind == "borrow" or bool(self._state.gpus_in(Zone.OVERLAP))
            self.advisor.record_switch(g.kind, prep_s, finalize_s, borrowed=borrowed)
        self._after_transition()

    def _cancel_group(
        self, g: Group, reason: str, *, failed: str | None = None, censored: bool = False
    ) -> list[str]:
        """Stop every worker of `g` (except the one that failed); returns the group's GPUs.

        `censored`: the group was cut short by its GPUs leaving, so the switch it was making
        took at least as long as it had run; the advisor hears that lower bound (without
        it, the switches that take longest are the ones never measured)."""
        if censored and g.kind in ("expand", "borrow") and self.now_s > g.started_s:
            borrowed = g.kind == "borrow" or bool(self._state.gpus_in(Zone.OVERLAP))
            self.advisor.record_switch(
                g.kind, self.now_s - g.started_s, 0.0, borrowed=borrowed, censored=True
            )
        gpus: list[str] = []
        for w in g.worker_ids:
            if not self._state.has_worker(w):
                continue
            gpus.extend(self._state.worker(w).gpu_ids)
            if w == failed:
                self._state = apply(self._state, (RemoveWorker(w),))
            else:
                self._kill_worker(w, interrupt=False)
        del self.groups[g.group_id]
        self._decide(f"cancel {g.group_id}: {reason}")
        return gpus

    def _give_back(self, gpu_ids: list[str], *, to_provider: frozenset[str] = frozenset()) -> None:
        """GPUs of a cancelled group go back where they came from: preemptible ones to the
        offered pool (or to the provider if listed), overlap ones to training, dedicated
        ones stay held (free)."""
        preempt = [g for g in gpu_ids if self._state.gpu(g).zone == Zone.PREEMPTIBLE]
        overlap = [g for g in gpu_ids if self._state.gpu(g).zone == Zone.OVERLAP]
        release = tuple(g for g in preempt if g in to_provider)
        for g in preempt:
            if g not in to_provider:
                self.offered[g] = self._state.gpu(g)
        if release:
            self._emit(cmd.ReleaseGpus(release, "provider"))
        if overlap:
            self._emit(cmd.ReleaseGpus(tuple(overlap), "training"))
            self._emit(cmd.RestoreTraining(tuple(overlap)))
        self._state = self._state.without_gpus(preempt + overlap)

    def _after_transition(self) -> None:
        """Hook: run what waited for a pending group (overridden by the controller)."""

    # -- worker lifecycle events -------------------------------------------------------------
    def _on_worker_ready(self, worker_id: str) -> None:
        g = self.group_of(worker_id)
        if g is None or worker_id in g.ready:
            self._ignore(f"ready for unknown or already-ready worker {worker_id}")
            return
        g.ready.add(worker_id)
        g.last_ready_s = self.now_s
        self._emit(cmd.SyncWeights(worker_id, self.latest_version))

    def _on_init_failed(self, worker_id: str, reason: str) -> None:
        g = self.group_of(worker_id)
        if g is None:
            self._ignore(f"init failure of unknown worker {worker_id}")
            return
        failed_gpus = frozenset(self._state.worker(worker_id).gpu_ids)
        gpus = self._cancel_group(
            g, f"{worker_id} failed to initialise: {reason}", failed=worker_id
        )
        self._give_back(gpus, to_provider=failed_gpus)

    def _on_weights_synced(self, worker_id: str, version: int) -> None:
        if not self._state.has_worker(worker_id):
            self._ignore(f"weights synced on unknown worker {worker_id}")
            return
        w = self._state.worker(worker_id)
        if version > w.weight_version:
            self._state = self._state.update_worker(worker_id, weight_version=version)
        g = self.group_of(worker_id)
        if g is None:
            return
        if worker_id not in g.ready:
            self._ignore(f"weights synced on {worker_id} before it was ready")
            return
        if not self.book.version_admissible(max(version, w.weight_version), self.latest_version):
            return  # a SyncWeights to the latest version is on its way
        # The sync to the latest version goes on after admission.
        g.synced.add(worker_id)
        self._try_admit(g)

    def _on_worker_drained(self, worker_id: str) -> None:
        if not self._state.has_worker(worker_id):
            self._ignore(f"drained: unknown worker {worker_id}")
            return
        if self._state.worker(worker_id).status != Status.DRAINING:
            self._ignore(f"drained: worker {worker_id} was not draining")
            return
        self._kill_worker(worker_id, interrupt=True)
