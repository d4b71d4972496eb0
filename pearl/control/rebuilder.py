"""The inter-scale cluster rebuilder: preemptible GPUs come and go (paper §4.5).

A part of the controller (see `pearl.control.context`); it plans through the `ElasticScheduler`.

* An offer is optional: the GPUs wait in the offered pool until the expansion gate admits
  them (and no other transition is pending). Admitted GPUs get workers initialised in the
  background in one group; the group is admitted atomically after weight sync.
* A reclaim notice is urgent: pending groups that touch the GPUs (or whose deferred role
  changes assumed the old budget) are cancelled; the affected workers are interrupted with
  preservation and stopped; the GPUs are released synchronously; the rest is re-planned for
  the smaller budget while unaffected workers keep serving.
* GPUs gone without (or after) notice: the same, without an interrupt (the workers died;
  their trajectories resume elsewhere with a full prefill) and without a release.
"""

from __future__ import annotations

from typing import Literal

from pearl.control import commands as cmd
from pearl.control.context import ControlContext
from pearl.control.elastic import ElasticScheduler
from pearl.control.plan import config_of
from pearl.control.state import Gpu, Zone


class Rebuilder:
    """Offers, reclaims and GPUs gone; also the urgent shrink the lender's returns use."""

    def __init__(self, ctx: ControlContext, scheduler: ElasticScheduler) -> None:
        self.ctx = ctx
        self.scheduler = scheduler
        self.offer_window_s: float | None = None
        # Latest event time per GPU, to tell a late duplicate from news (`ctx.stale`).
        self.offered_at: dict[str, float] = {}
        self.lost_at: dict[str, float] = {}

    def on_offer(self, time_s: float, gpus: tuple[Gpu, ...], window_s: float | None) -> None:
        c = self.ctx
        if not c.policy.use_preemptible:
            c.ignore(f"offer of {len(gpus)} GPU(s): policy {c.policy.name} is not elastic")
            return
        new = [
            g
            for g in gpus
            if not c.state.has_gpu(g.gpu_id)
            and g.gpu_id not in c.offered
            and not c.stale(self.lost_at, g.gpu_id, time_s, strict=False)
        ]
        if not new:
            c.ignore("offer of GPUs already held, offered, or taken back since")
            return
        for g in new:
            c.offered[g.gpu_id] = g
            self.offered_at[g.gpu_id] = time_s
        self.offer_window_s = window_s
        self.maybe_expand()

    def maybe_expand(self) -> None:
        """Expand onto the offered pool if the gate admits it and nothing else is pending."""
        c, sch = self.ctx, self.scheduler
        if not c.offered or not c.policy.use_preemptible:
            return
        if not sch.may_start("expand"):
            return  # reconsidered when the pending group is admitted
        pool = sch.pool()
        n_now = sch.budget(pool)
        new = list(c.offered.values())
        n_new = (len(pool) + len(new)) // c.gpus_per_worker
        if n_new <= n_now:
            return
        current = sch.current_config()
        target = c.advisor.choose(n_new, current)
        # The gate weighs what the offered GPUs add for as long as they stay, so it compares
        # pools without borrowed training GPUs: those go back before the next update, and
        # counting them made a borrow in progress decline every expansion (§4.5).
        own = [g for g in pool if c.state.gpu(g).zone != Zone.OVERLAP]
        if len(own) < len(pool):
            own_now = config_of(c.state.view(own))
            own_target = c.advisor.choose((len(own) + len(new)) // c.gpus_per_worker, own_now)
            verdict = c.advisor.expansion(own_now, own_target, self.offer_window_s)
        else:
            verdict = c.advisor.expansion(current, target, self.offer_window_s)
        if not verdict.admit:
            c.decide(f"decline expansion to {target}: {verdict.reason}")
            return
        c.state = c.state.with_gpus(new)
        for g in new:
            del c.offered[g.gpu_id]
        pool = pool + [g.gpu_id for g in new]
        plan = sch.plan(target, pool)
        if plan is not None and not sch.concurrent_plan_ok(plan):
            plan = None  # it would reshape serving workers under a pending group: wait
        if plan is not None and plan.adds:
            c.decide(f"expand: -> {plan.target} ({verdict.reason})")
            sch.execute(plan, "expand", urgent=False)
        used = {gid for a in (plan.adds if plan else ()) for gid in a.gpu_ids}
        unused = [g for g in new if g.gpu_id not in used]
        for g in unused:  # not placeable now: back to the pool
            c.offered[g.gpu_id] = g
        c.state = c.state.without_gpus(g.gpu_id for g in unused)

    def lose_gpus(
        self,
        gpu_ids: list[str],
        *,
        interrupt: bool,
        to: Literal["provider", "training"] | None,
    ) -> None:
        """Urgent shrink: cancel what depends on `gpu_ids`, stop their workers, release."""
        c, sch = self.ctx, self.scheduler
        lost = frozenset(gpu_ids)
        for g in list(sch.groups.values()):
            touches = any(
                gid in lost
                for w in g.worker_ids
                if c.state.has_worker(w)
                for gid in c.state.worker(w).gpu_ids
            )
            if touches or g.deferred:
                gpus = sch.cancel_group(g, f"{sorted(lost)} leaving", censored=True)
                sch.give_back([x for x in gpus if x not in lost])
        for w in list(c.state.workers):
            if lost.intersection(w.gpu_ids):
                sch.kill_worker(w.worker_id, interrupt=interrupt)
        if to is not None:
            c.emit(cmd.ReleaseGpus(tuple(gpu_ids), to))
            if to == "training":
                c.emit(cmd.RestoreTraining(tuple(gpu_ids)))
        c.state = c.state.without_gpus(gpu_ids)
        sch.replan("shrink", urgent=False)  # the urgent part is done; survivors drain
        if sch.groups:  # planned without the pending groups: look again once they join
            sch.redecide_pending = True

    def _current_lease(self, time_s: float, gpu_ids: tuple[str, ...]) -> tuple[str, ...]:
        """The GPUs an event at `time_s` can be about: not offered again since."""
        c = self.ctx
        fresh = tuple(g for g in gpu_ids if not c.stale(self.offered_at, g, time_s, strict=True))
        for g in fresh:
            c.offered.pop(g, None)
            self.lost_at[g] = max(time_s, self.lost_at.get(g, float("-inf")))
        return fresh

    def on_reclaim(self, time_s: float, gpu_ids: tuple[str, ...], deadline_s: float) -> None:
        gpu_ids = self._current_lease(time_s, gpu_ids)
        held = [g for g in gpu_ids if self._provider_gpu(g)]
        if not held:
            self.ctx.ignore(f"reclaim of GPUs not held: {list(gpu_ids)}")
            return
        self.ctx.decide(f"reclaim {held} (deadline {deadline_s:.1f}s)")
        self.lose_gpus(held, interrupt=True, to="provider")
        self.maybe_expand()

    def on_gone(self, time_s: float, gpu_ids: tuple[str, ...]) -> None:
        gpu_ids = self._current_lease(time_s, gpu_ids)
        held = [g for g in gpu_ids if self._provider_gpu(g)]
        if not held:
            self.ctx.ignore(f"GPUs gone that were not held: {list(gpu_ids)}")
            return
        self.ctx.decide(f"GPUs gone without release: {held}")
        self.lose_gpus(held, interrupt=False, to=None)
        self.maybe_expand()

    def _provider_gpu(self, gpu_id: str) -> bool:
        """Held and not a borrowed training GPU (those only go back to training)."""
        s = self.ctx.state
        return s.has_gpu(gpu_id) and s.gpu(gpu_id).zone != Zone.OVERLAP
