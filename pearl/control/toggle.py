"""The intra-scale toggle manager: borrow idle training GPUs, return them on time (§4.6).

A part of the controller (see `pearl.control.context`); it plans through the `ElasticScheduler`
and returns GPUs through the `Rebuilder`'s urgent shrink.

* `TrainingIdle`: the GPUs become borrowable until about `idle_until_s`. Borrowing is
  optional: `gated` policies ask the advisor's borrow gate (predicted saving vs activation
  plus return cost), `always`/`budgeted` ones borrow whenever idle. A borrow offloads the
  training state, then adds overlap workers, each admitted once restored and synced (one
  group for them all if the borrow also changes serving workers' roles:
  `ElasticScheduler.execute`).
* `TrainingWants`: returning is mandatory and done within the same `handle` call, so always
  before the deadline: a still-activating borrow group is cancelled; overlap workers are
  interrupted with preservation (their trajectories resume on dedicated or preemptible
  workers with one full prefill) and stopped; the GPUs are released to training and the
  training state restored; the remaining rollout pool is re-planned. Rollout on other GPUs
  never stops for it.
* `budgeted` policies (RLBoost's adaptive offload) borrow under a `TurnBudget`
  (`pearl.control.policies.rlboost`): once spent, the borrowed workers drain and the GPUs
  go back early.
"""

from __future__ import annotations

from collections.abc import Iterable

from pearl.control import commands as cmd
from pearl.control.context import ControlContext
from pearl.control.elastic import ElasticScheduler
from pearl.control.policies.rlboost import TurnBudget
from pearl.control.rebuilder import Rebuilder
from pearl.control.state import Gpu, Zone


class ToggleManager:
    """Borrows and returns training GPUs. `training_gpus` are the GPUs `TrainingIdle` may
    offer; `budget` the turn budget of a `budgeted` policy (None: no budget)."""

    def __init__(
        self,
        ctx: ControlContext,
        scheduler: ElasticScheduler,
        rebuilder: Rebuilder,
        *,
        training_gpus: Iterable[Gpu] = (),
        budget: TurnBudget | None = None,
    ) -> None:
        self.ctx = ctx
        self.scheduler = scheduler
        self.rebuilder = rebuilder
        self.budget = budget
        self.training_gpus = {g.gpu_id: Gpu(g.gpu_id, Zone.OVERLAP, g.node) for g in training_gpus}
        self.idle_until: dict[str, float] = {}
        self.wanted_at: dict[str, float] = {}  # latest TrainingWants per GPU (`ctx.stale`)

    def _training_gpu(self, gpu_id: str) -> Gpu:
        g = self.training_gpus.get(gpu_id)
        return g if g is not None else Gpu(gpu_id, Zone.OVERLAP, "training")

    def on_training_idle(
        self, time_s: float, gpu_ids: tuple[str, ...], idle_until_s: float
    ) -> None:
        c = self.ctx
        if c.policy.borrow == "never":
            c.ignore(f"training idle: policy {c.policy.name} does not borrow")
            return
        stale = [g for g in gpu_ids if c.stale(self.wanted_at, g, time_s, strict=False)]
        if stale:
            c.ignore(f"training idle of {stale} is older than training wanting them")
        for g in gpu_ids:
            if not c.state.has_gpu(g) and g not in stale:
                self.idle_until[g] = idle_until_s
        self.maybe_borrow()

    def maybe_borrow(self) -> None:
        c, sch = self.ctx, self.scheduler
        cands = sorted(g for g, t in self.idle_until.items() if t > c.now_s)
        for g in [g for g, t in self.idle_until.items() if t <= c.now_s]:
            del self.idle_until[g]
        if not cands or c.policy.borrow == "never":
            return
        if not sch.may_start("borrow"):
            return  # reconsidered when the pending group is admitted
        window_s = min(self.idle_until[g] for g in cands) - c.now_s
        pool = sch.pool()
        n_now = sch.budget(pool)
        n_new = (len(pool) + len(cands)) // c.gpus_per_worker
        if n_new <= n_now:
            return
        current = sch.current_config()
        target = c.advisor.choose(n_new, current)
        verdict = c.advisor.borrow(current, target, window_s, max(1, c.book.num_unfinished()))
        if not verdict.admit:
            c.decide(f"decline borrow of {len(cands)} GPU(s): {verdict.reason}")
            return
        new = [self._training_gpu(g) for g in cands]
        before = c.state
        c.state = c.state.with_gpus(new)
        plan = sch.plan(target, pool + cands)
        if plan is not None and not sch.concurrent_plan_ok(plan):
            plan = None  # it would reshape serving workers under a pending group: wait
        added = {gid for a in (plan.adds if plan else ()) for gid in a.gpu_ids}
        used = sorted(added.intersection(cands))  # the plan may also refill free held GPUs
        if plan is None or not used:
            c.state = before
            return
        c.state = c.state.without_gpus(g for g in cands if g not in used)
        for g in used:
            del self.idle_until[g]
        c.emit(cmd.OffloadTraining(tuple(used)))
        c.decide(f"borrow {used}: -> {plan.target} ({verdict.reason})")
        sch.execute(plan, "borrow", urgent=False)
        if self.budget is not None:
            self.budget.on_borrow(c.now_s)

    def on_training_wants(self, time_s: float, gpu_ids: tuple[str, ...], deadline_s: float) -> None:
        c = self.ctx
        for g in gpu_ids:
            self.idle_until.pop(g, None)
            self.wanted_at[g] = max(time_s, self.wanted_at.get(g, float("-inf")))
        held = [g for g in gpu_ids if c.state.has_gpu(g)]
        held = [g for g in held if c.state.gpu(g).zone == Zone.OVERLAP]
        if not held:
            c.ignore(f"training wants GPUs not borrowed: {list(gpu_ids)}")
            return
        if deadline_s < c.now_s:
            c.ignore(f"training deadline {deadline_s:.1f}s already passed; returning now")
        if self.budget is not None:
            self.budget.on_forced_return()
        c.decide(f"return {held} to training (deadline {deadline_s:.1f}s)")
        self.rebuilder.lose_gpus(held, interrupt=True, to="training")
        self.rebuilder.maybe_expand()

    # -- the budget's hooks (no-ops without a budget) -------------------------------------------
    def returning_gpus(self) -> set[str]:
        """Borrowed GPUs on their way back: no re-plan may use them."""
        return set() if self.budget is None else self.budget.returning_gpus(self.ctx)

    def allowed_workers(self) -> frozenset[str] | None:
        """Workers the router may use (None: all)."""
        return None if self.budget is None else self.budget.allowed(self.ctx)

    def after_routing(self, routes: list[cmd.Route]) -> None:
        if self.budget is not None:
            self.budget.spend(self.ctx, routes)

    def after_drain(self) -> None:
        if self.budget is not None:
            self.budget.return_early(self.ctx)

    def on_batch(self) -> None:
        if self.budget is not None:
            self.budget.on_batch(self.ctx.now_s)
