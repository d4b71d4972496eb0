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
  A borrow that changes no serving worker's role is one group per borrowed worker, each
  admitted when it is ready and synced (the training GPUs' workers are kept alive and
  restored one by one, §4.6); a policy with `admit_individually` does so for every group.

`ElasticScheduler` is the part of the controller that owns the pending groups; the rebuilder,
the lender and the controller call it. It reads and changes the shared `ControlContext`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pearl.control import commands as cmd
from pearl.control.context import ControlContext
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
from pearl.control.state import Status, Zone


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


class ElasticScheduler:
    """Plans, groups and the worker lifecycle over the shared context.

    `returning_gpus()` names held GPUs on their way back (no re-plan may use them; the
    lender answers it); `after_transition()` runs what waited for a pending group (the
    controller's re-decisions); both are given by the controller that composes the parts.
    """

    def __init__(
        self,
        ctx: ControlContext,
        *,
        returning_gpus: Callable[[], set[str]],
        after_transition: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.groups: dict[str, Group] = {}
        self._group_seq = 0
        # A re-decision that waits for the pending groups to be admitted (a shrink or a
        # switch planned while they initialise); the controller runs it after admission.
        self.redecide_pending = False
        self._returning_gpus = returning_gpus
        self._after_transition = after_transition
        starting = tuple(
            w.worker_id for w in ctx.state.workers_with(statuses=(Status.INITIALIZING,))
        )
        if starting:  # workers the world is already starting form the initial group
            self.groups["initial-0"] = Group("initial-0", "initial", starting, 0.0)

    # -- the pool ------------------------------------------------------------------------------
    def group_of(self, worker_id: str) -> Group | None:
        for g in self.groups.values():
            if worker_id in g.worker_ids:
                return g
        return None

    def _pending_gpus(self) -> set[str]:
        s = self.ctx.state
        return {
            gid
            for g in self.groups.values()
            for w in g.worker_ids
            if s.has_worker(w)
            for gid in s.worker(w).gpu_ids
        }

    def pool(self) -> list[str]:
        """GPUs a re-plan may use: held, not under a draining worker or a pending group,
        not on their way back."""
        s = self.ctx.state
        busy = self._pending_gpus() | self._returning_gpus()
        for w in s.workers_with(statuses=(Status.DRAINING,)):
            busy.update(w.gpu_ids)
        return [g.gpu_id for g in s.gpus if g.gpu_id not in busy]

    def budget(self, pool: list[str]) -> int:
        """Workers `pool` hosts."""
        return len(pool) // self.ctx.gpus_per_worker

    def current_config(self) -> PDConfig | None:
        """The PD config of the workers a re-plan would consider (active + inactive)."""
        return config_of(self.ctx.state.view(self.pool()))

    # -- planning ----------------------------------------------------------------------------
    def plan(self, target: PDConfig | None, pool: list[str]) -> Plan | None:
        """A plan over `pool` to `target` (shrunk by one worker at a time if it cannot be
        placed, e.g. GPUs split across nodes); None if the pool hosts no worker."""
        c = self.ctx
        view = c.state.view(pool)
        n = self.budget(pool)
        while n >= 1:
            want = target if target is not None and target.num_workers == n else None
            if want is None:
                want = c.advisor.choose(n, config_of(view))
            try:
                return plan_transition(view, want, pool, gpus_per_worker=c.gpus_per_worker)
            except PlanError:
                n -= 1
                target = None
        # No worker fits: remove every worker in the pool.
        ops = tuple(RemoveWorker(w.worker_id) for w in view.workers)
        return Plan(PDConfig.colocated(1), ops) if ops else None

    def replan(self, kind: str, *, urgent: bool, target: PDConfig | None = None) -> None:
        plan = self.plan(target, self.pool())
        if plan is not None and not plan.is_empty:
            self.ctx.decide(f"{kind}: -> {plan.target} ({plan.num_ops} ops)")
            self.execute(plan, kind, urgent=urgent)

    def may_start(self, kind: str) -> bool:
        """Whether a new `kind` ("expand" or "borrow") group may start now. One expansion
        and one borrow may initialise side by side (they add workers on disjoint GPUs, the
        paper's two elastic paths, §4.5 and §4.6); anything else waits for the pending
        groups: a second group of the same kind, a re-plan, or a group whose admission
        will change the roles of serving workers (its plan assumed today's topology)."""
        if self.ctx.policy.admit_individually:
            return True
        return all(
            g.kind in ("expand", "borrow") and g.kind != kind and not g.deferred
            for g in self.groups.values()
        )

    def concurrent_plan_ok(self, plan: Plan) -> bool:
        """A plan made while other groups are pending may only add workers: a role change
        of a serving worker could contradict the pending group's own plan."""
        return not self.groups or (not plan.role_changes and not plan.removes)

    def execute(self, plan: Plan, kind: str, *, urgent: bool) -> Group | None:
        """Carry out `plan` (see module doc). Returns the new group, if any."""
        c = self.ctx
        for op in plan.removes:
            w = c.state.worker(op.worker_id)
            if urgent or w.status == Status.INITIALIZING:
                self.kill_worker(w.worker_id, interrupt=True)
            elif w.status != Status.DRAINING:
                c.state = c.state.update_worker(w.worker_id, status=Status.DRAINING)
                c.emit(cmd.Drain(w.worker_id))
        roles = plan.role_changes
        adds = plan.adds
        defer = bool(adds) and kind in ("expand", "borrow")
        if roles and not defer:
            self._set_roles(roles)
        if not adds:
            return None
        c.state = apply(c.state, adds)
        # A borrow that changes no serving worker's role admits each borrowed worker as soon
        # as it is restored and synced (paper §4.6 keeps its processes alive; each one alone
        # is a complete worker of the target's roles, so no partial topology can show).
        # Expansions stay all-or-nothing (§4.5), and so does any group with deferred roles.
        if c.policy.admit_individually or (kind == "borrow" and not roles):
            groups = [self._new_group(kind, (a,), ()) for a in adds]
            return groups[-1]
        return self._new_group(kind, adds, roles if defer else ())

    def _new_group(
        self, kind: str, adds: tuple[AddWorker, ...], deferred: tuple[SetRole, ...]
    ) -> Group:
        self._group_seq += 1
        gid = f"{kind}-{self._group_seq}"
        g = Group(gid, kind, tuple(a.worker_id for a in adds), self.ctx.now_s, deferred)
        self.groups[gid] = g
        for a in adds:
            self.ctx.emit(cmd.InitWorker(a.worker_id, a.gpu_ids, a.role, gid))
        return g

    def _set_roles(self, roles: tuple[SetRole, ...]) -> None:
        c = self.ctx
        ok = tuple(
            op
            for op in roles
            if c.state.has_worker(op.worker_id)
            and c.state.worker(op.worker_id).status != Status.DRAINING
        )
        c.state = apply(c.state, ok)
        c.emit(*(cmd.ChangeRole(op.worker_id, op.role) for op in ok))

    def kill_worker(self, worker_id: str, *, interrupt: bool) -> None:
        """Remove a worker now: interrupt its requests (preserving progress) and stop it."""
        c = self.ctx
        if interrupt and c.book.num_on_worker(worker_id):
            c.emit(cmd.Interrupt(worker_id))
        c.book.interrupt_workers([worker_id])
        c.book.forget_worker(worker_id)
        c.emit(cmd.StopWorker(worker_id))
        c.state = apply(c.state, (RemoveWorker(worker_id),))

    # -- groups --------------------------------------------------------------------------------
    def _try_admit(self, g: Group) -> None:
        """Admit `g` when every member is ready and synced to an admissible version
        (`TrajectoryBook.version_admissible`)."""
        c = self.ctx
        members = [c.state.worker(w) for w in g.worker_ids]
        if len(g.synced) < len(members):
            return
        if not all(c.book.version_admissible(w.weight_version, c.latest_version) for w in members):
            return
        self._set_roles(g.deferred)
        for w in g.worker_ids:
            c.state = c.state.update_worker(w, status=Status.ACTIVE)
        del self.groups[g.group_id]
        c.emit(cmd.AdmitGroup(g.group_id, g.worker_ids))
        c.decide(f"admit {g.group_id} ({len(g.worker_ids)} workers)")
        if g.kind in ("expand", "borrow"):
            ready_s = g.last_ready_s if g.last_ready_s is not None else c.now_s
            prep_s, finalize_s = ready_s - g.started_s, c.now_s - ready_s
            borrowed = g.kind == "borrow" or bool(c.state.gpus_in(Zone.OVERLAP))
            c.advisor.record_switch(g.kind, prep_s, finalize_s, borrowed=borrowed)
        self._after_transition()

    def cancel_group(
        self, g: Group, reason: str, *, failed: str | None = None, censored: bool = False
    ) -> list[str]:
        """Stop every worker of `g` (except the one that failed); returns the group's GPUs.

        `censored`: the group was cut short by its GPUs leaving, so the switch it was making
        took at least as long as it had run; the advisor hears that lower bound (without
        it, the switches that take longest are the ones never measured)."""
        c = self.ctx
        if censored and g.kind in ("expand", "borrow") and c.now_s > g.started_s:
            borrowed = g.kind == "borrow" or bool(c.state.gpus_in(Zone.OVERLAP))
            c.advisor.record_switch(
                g.kind, c.now_s - g.started_s, 0.0, borrowed=borrowed, censored=True
            )
        gpus: list[str] = []
        for w in g.worker_ids:
            if not c.state.has_worker(w):
                continue
            gpus.extend(c.state.worker(w).gpu_ids)
            if w == failed:
                c.state = apply(c.state, (RemoveWorker(w),))
            else:
                self.kill_worker(w, interrupt=False)
        del self.groups[g.group_id]
        c.decide(f"cancel {g.group_id}: {reason}")
        return gpus

    def give_back(self, gpu_ids: list[str], *, to_provider: frozenset[str] = frozenset()) -> None:
        """GPUs of a cancelled group go back where they came from: preemptible ones to the
        offered pool (or to the provider if listed), overlap ones to training, dedicated
        ones stay held (free)."""
        c = self.ctx
        preempt = [g for g in gpu_ids if c.state.gpu(g).zone == Zone.PREEMPTIBLE]
        overlap = [g for g in gpu_ids if c.state.gpu(g).zone == Zone.OVERLAP]
        release = tuple(g for g in preempt if g in to_provider)
        for g in preempt:
            if g not in to_provider:
                c.offered[g] = c.state.gpu(g)
        if release:
            c.emit(cmd.ReleaseGpus(release, "provider"))
        if overlap:
            c.emit(cmd.ReleaseGpus(tuple(overlap), "training"))
            c.emit(cmd.RestoreTraining(tuple(overlap)))
        c.state = c.state.without_gpus(preempt + overlap)

    def expire(self, limit_s: float) -> None:
        """Cancel groups that never finished starting within `limit_s` (a worker that never
        reports back); their GPUs go back where they came from."""
        now = self.ctx.now_s
        for g in [g for g in self.groups.values() if now - g.started_s > limit_s]:
            late = [w for w in g.worker_ids if w not in g.synced]
            self.give_back(self.cancel_group(g, f"not ready after {limit_s:.0f}s: {late}"))

    # -- worker lifecycle events -------------------------------------------------------------
    def on_worker_ready(self, worker_id: str) -> None:
        g = self.group_of(worker_id)
        if g is None or worker_id in g.ready:
            self.ctx.ignore(f"ready for unknown or already-ready worker {worker_id}")
            return
        g.ready.add(worker_id)
        g.last_ready_s = self.ctx.now_s
        self.ctx.emit(cmd.SyncWeights(worker_id, self.ctx.latest_version))

    def on_init_failed(self, worker_id: str, reason: str) -> None:
        g = self.group_of(worker_id)
        if g is None:
            self.ctx.ignore(f"init failure of unknown worker {worker_id}")
            return
        failed_gpus = frozenset(self.ctx.state.worker(worker_id).gpu_ids)
        gpus = self.cancel_group(g, f"{worker_id} failed to initialise: {reason}", failed=worker_id)
        self.give_back(gpus, to_provider=failed_gpus)

    def on_weights_synced(self, worker_id: str, version: int) -> None:
        c = self.ctx
        if not c.state.has_worker(worker_id):
            c.ignore(f"weights synced on unknown worker {worker_id}")
            return
        w = c.state.worker(worker_id)
        if version > w.weight_version:
            c.state = c.state.update_worker(worker_id, weight_version=version)
        g = self.group_of(worker_id)
        if g is None:
            return
        if worker_id not in g.ready:
            c.ignore(f"weights synced on {worker_id} before it was ready")
            return
        if not c.book.version_admissible(max(version, w.weight_version), c.latest_version):
            return  # a SyncWeights to the latest version is on its way
        # The sync to the latest version goes on after admission.
        g.synced.add(worker_id)
        self._try_admit(g)

    def on_new_version(self, version: int) -> None:
        """New weights exist: every serving or ready-to-sync worker syncs to them; a pending
        group's member synced to a version no longer admissible must sync again."""
        c = self.ctx
        for w in c.state.workers:
            g = self.group_of(w.worker_id)
            ready = g is not None and w.worker_id in g.ready
            if w.status == Status.ACTIVE or ready:
                c.emit(cmd.SyncWeights(w.worker_id, version))
            if g is not None and not c.book.version_admissible(w.weight_version, version):
                g.synced.discard(w.worker_id)

    def on_worker_drained(self, worker_id: str) -> None:
        c = self.ctx
        if not c.state.has_worker(worker_id):
            c.ignore(f"drained: unknown worker {worker_id}")
            return
        if c.state.worker(worker_id).status != Status.DRAINING:
            c.ignore(f"drained: worker {worker_id} was not draining")
            return
        self.kill_worker(worker_id, interrupt=True)
