"""The inter-scale cluster rebuilder: preemptible GPUs come and go (paper §4.5).

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
from pearl.control.plan import config_of
from pearl.control.scheduler import SchedulerCore
from pearl.control.state import Gpu, Status, Zone


class RebuilderMixin(SchedulerCore):
    def _on_offer(self, time_s: float, gpus: tuple[Gpu, ...], window_s: float | None) -> None:
        if not self.policy.use_preemptible:
            self._ignore(f"offer of {len(gpus)} GPU(s): policy {self.policy.name} is not elastic")
            return
        new = [
            g
            for g in gpus
            if not self._state.has_gpu(g.gpu_id)
            and g.gpu_id not in self.offered
            and not self._stale(self.lost_at, g.gpu_id, time_s, strict=False)
        ]
        if not new:
            self._ignore("offer of GPUs already held, offered, or taken back since")
            return
        for g in new:
            self.offered[g.gpu_id] = g
            self.offered_at[g.gpu_id] = time_s
        self.offer_window_s = window_s
        self._maybe_expand()

    def _maybe_expand(self) -> None:
        """Expand onto the offered pool if the gate admits it and nothing else is pending."""
        if not self.offered or not self.policy.use_preemptible:
            return
        if not self._may_start("expand"):
            return  # reconsidered when the pending group is admitted
        pool = self._pool()
        n_now = self._budget(pool)
        new = list(self.offered.values())
        n_new = (len(pool) + len(new)) // self.gpus_per_worker
        if n_new <= n_now:
            return
        current = self.current_config()
        target = self.advisor.choose(n_new, current)
        # The gate weighs what the offered GPUs add for as long as they stay, so it compares
        # pools without borrowed training GPUs: those go back before the next update, and
        # counting them made a borrow in progress decline every expansion (§4.5).
        own = [g for g in pool if self._state.gpu(g).zone != Zone.OVERLAP]
        if len(own) < len(pool):
            own_now = config_of(self._state.view(own))
            own_target = self.advisor.choose((len(own) + len(new)) // self.gpus_per_worker, own_now)
            verdict = self.advisor.expansion(own_now, own_target, self.offer_window_s)
        else:
            verdict = self.advisor.expansion(current, target, self.offer_window_s)
        if not verdict.admit:
            self._decide(f"decline expansion to {target}: {verdict.reason}")
            return
        self._state = self._state.with_gpus(new)
        for g in new:
            del self.offered[g.gpu_id]
        pool = pool + [g.gpu_id for g in new]
        plan = self._plan(target, pool)
        if plan is not None and not self._concurrent_plan_ok(plan):
            plan = None  # it would reshape serving workers under a pending group: wait
        if plan is not None and plan.adds:
            self._decide(f"expand: -> {plan.target} ({verdict.reason})")
            self._execute(plan, "expand", urgent=False)
        used = {gid for a in (plan.adds if plan else ()) for gid in a.gpu_ids}
        unused = [g for g in new if g.gpu_id not in used]
        for g in unused:  # not placeable now: back to the pool
            self.offered[g.gpu_id] = g
        self._state = self._state.without_gpus(g.gpu_id for g in unused)

    def _lose_gpus(
        self,
        gpu_ids: list[str],
        *,
        interrupt: bool,
        to: Literal["provider", "training"] | None,
    ) -> None:
        """Urgent shrink: cancel what depends on `gpu_ids`, stop their workers, release."""
        lost = frozenset(gpu_ids)
        for g in list(self.groups.values()):
            touches = any(
                gid in lost
                for w in g.worker_ids
                if self._state.has_worker(w)
                for gid in self._state.worker(w).gpu_ids
            )
            if touches or g.deferred:
                gpus = self._cancel_group(g, f"{sorted(lost)} leaving", censored=True)
                self._give_back([x for x in gpus if x not in lost])
        for w in list(self._state.workers):
            if lost.intersection(w.gpu_ids):
                self._kill_worker(w.worker_id, interrupt=interrupt)
        if to is not None:
            self._emit(cmd.ReleaseGpus(tuple(gpu_ids), to))
            if to == "training":
                self._emit(cmd.RestoreTraining(tuple(gpu_ids)))
        self._state = self._state.without_gpus(gpu_ids)
        self._replan("shrink", urgent=False)  # the urgent part is done; survivors drain
        if self.groups:  # planned without the pending groups: look again once they join
            self._redecide_pending = True

    def _current_lease(self, time_s: float, gpu_ids: tuple[str, ...]) -> tuple[str, ...]:
        """The GPUs an event at `time_s` can be about: not offered again since."""
        fresh = tuple(
            g for g in gpu_ids if not self._stale(self.offered_at, g, time_s, strict=True)
        )
        for g in fresh:
            self.offered.pop(g, None)
            self.lost_at[g] = max(time_s, self.lost_at.get(g, float("-inf")))
        return fresh

    def _on_reclaim(self, time_s: float, gpu_ids: tuple[str, ...], deadline_s: float) -> None:
        gpu_ids = self._current_lease(time_s, gpu_ids)
        held = [g for g in gpu_ids if self._provider_gpu(g)]
        if not held:
            self._ignore(f"reclaim of GPUs not held: {list(gpu_ids)}")
            return
        self._decide(f"reclaim {held} (deadline {deadline_s:.1f}s)")
        self._lose_gpus(held, interrupt=True, to="provider")
        self._maybe_expand()

    def _on_gone(self, time_s: float, gpu_ids: tuple[str, ...]) -> None:
        gpu_ids = self._current_lease(time_s, gpu_ids)
        held = [g for g in gpu_ids if self._provider_gpu(g)]
        if not held:
            self._ignore(f"GPUs gone that were not held: {list(gpu_ids)}")
            return
        self._decide(f"GPUs gone without release: {held}")
        self._lose_gpus(held, interrupt=False, to=None)
        self._maybe_expand()

    def _provider_gpu(self, gpu_id: str) -> bool:
        """Held and not a borrowed training GPU (those only go back to training)."""
        return self._state.has_gpu(gpu_id) and self._state.gpu(gpu_id).zone != Zone.OVERLAP

    def _has_serving_workers(self) -> bool:
        return self._of_state(
            "has_serving", lambda: bool(self._state.workers_with(statuses=(Status.ACTIVE,)))
        )
