"""The intra-scale toggle manager: borrow idle training GPUs, return them on time (§4.6).

* `TrainingIdle`: the GPUs become borrowable until about `idle_until_s`. Borrowing is
  optional: `gated` policies ask the advisor's borrow gate (predicted saving vs activation
  plus return cost), `always`/`budgeted` ones borrow whenever idle. A borrow offloads the
  training state, then adds overlap workers in one group (admitted after weight sync).
* `TrainingWants`: returning is mandatory and done within the same `handle` call, so always
  before the deadline: a still-activating borrow group is cancelled; overlap workers are
  interrupted with preservation (their trajectories resume on dedicated or preemptible
  workers with one full prefill) and stopped; the GPUs are released to training and the
  training state restored; the remaining rollout pool is re-planned. Rollout on other GPUs
  never stops for it.
* `budgeted` (RLBoost's adaptive offload, ported): borrowed workers take at most a budget of
  turns per borrow window; once spent they drain and the GPUs go back early. The budget is
  re-tuned each window from the measured training bubble: a forced return (training had to
  wait for its GPUs) shrinks it, GPUs returned early while training still waited for its
  batch (an unused bubble) grow it in proportion to the unused share of the window.
"""

from __future__ import annotations

from pearl.control import commands as cmd
from pearl.control.rebuilder import RebuilderMixin
from pearl.control.state import Gpu, Status, Worker, Zone


class ToggleMixin(RebuilderMixin):
    borrow_budget_turns: int
    borrow_turns_left: int
    borrow_started_s: float | None
    returned_early_s: float | None

    def _training_gpu(self, gpu_id: str) -> Gpu:
        g = self.training_gpus.get(gpu_id)
        return g if g is not None else Gpu(gpu_id, Zone.OVERLAP, "training")

    def borrowed_gpus(self) -> tuple[str, ...]:
        return self._of_state("borrowed_gpus", lambda: self._state.gpus_in(Zone.OVERLAP))

    def _borrowed_workers(self) -> tuple[Worker, ...]:
        def compute() -> tuple[Worker, ...]:
            ov = set(self.borrowed_gpus())
            return tuple(w for w in self._state.workers if ov.intersection(w.gpu_ids))

        return self._of_state("borrowed_workers", compute)

    def _borrowed_worker_ids(self) -> frozenset[str]:
        return self._of_state(
            "borrowed_worker_ids", lambda: frozenset(w.worker_id for w in self._borrowed_workers())
        )

    def _on_training_idle(
        self, time_s: float, gpu_ids: tuple[str, ...], idle_until_s: float
    ) -> None:
        if self.policy.borrow == "never":
            self._ignore(f"training idle: policy {self.policy.name} does not borrow")
            return
        stale = [g for g in gpu_ids if self._stale(self.wanted_at, g, time_s, strict=False)]
        if stale:
            self._ignore(f"training idle of {stale} is older than training wanting them")
        for g in gpu_ids:
            if not self._state.has_gpu(g) and g not in stale:
                self.idle_until[g] = idle_until_s
        self._maybe_borrow()

    def _maybe_borrow(self) -> None:
        cands = sorted(g for g, t in self.idle_until.items() if t > self.now_s)
        for g in [g for g, t in self.idle_until.items() if t <= self.now_s]:
            del self.idle_until[g]
        if not cands or self.policy.borrow == "never":
            return
        if not self._may_start("borrow"):
            return  # reconsidered when the pending group is admitted
        window_s = min(self.idle_until[g] for g in cands) - self.now_s
        pool = self._pool()
        n_now = self._budget(pool)
        n_new = (len(pool) + len(cands)) // self.gpus_per_worker
        if n_new <= n_now:
            return
        current = self.current_config()
        target = self.advisor.choose(n_new, current)
        verdict = self.advisor.borrow(current, target, window_s)
        if not verdict.admit:
            self._decide(f"decline borrow of {len(cands)} GPU(s): {verdict.reason}")
            return
        new = [self._training_gpu(g) for g in cands]
        before = self._state
        self._state = self._state.with_gpus(new)
        plan = self._plan(target, pool + cands)
        if plan is not None and not self._concurrent_plan_ok(plan):
            plan = None  # it would reshape serving workers under a pending group: wait
        added = {gid for a in (plan.adds if plan else ()) for gid in a.gpu_ids}
        used = sorted(added.intersection(cands))  # the plan may also refill free held GPUs
        if plan is None or not used:
            self._state = before
            return
        self._state = self._state.without_gpus(g for g in cands if g not in used)
        for g in used:
            del self.idle_until[g]
        self._emit(cmd.OffloadTraining(tuple(used)))
        self._decide(f"borrow {used}: -> {plan.target} ({verdict.reason})")
        self._execute(plan, "borrow", urgent=False)
        self.borrow_started_s = self.now_s
        self.returned_early_s = None
        self.borrow_turns_left = self.borrow_budget_turns

    def _on_training_wants(
        self, time_s: float, gpu_ids: tuple[str, ...], deadline_s: float
    ) -> None:
        for g in gpu_ids:
            self.idle_until.pop(g, None)
            self.wanted_at[g] = max(time_s, self.wanted_at.get(g, float("-inf")))
        held = [g for g in gpu_ids if self._state.has_gpu(g)]
        held = [g for g in held if self._state.gpu(g).zone == Zone.OVERLAP]
        if not held:
            self._ignore(f"training wants GPUs not borrowed: {list(gpu_ids)}")
            return
        if deadline_s < self.now_s:
            self._ignore(f"training deadline {deadline_s:.1f}s already passed; returning now")
        if self.policy.borrow == "budgeted":
            self.borrow_budget_turns = max(1, (self.borrow_budget_turns * 3) // 4)
        self._decide(f"return {held} to training (deadline {deadline_s:.1f}s)")
        self.borrow_started_s = None
        self._lose_gpus(held, interrupt=True, to="training")
        self._maybe_expand()

    # -- budgeted borrowing (rlboost+) ---------------------------------------------------------
    def _returning_gpus(self) -> set[str]:
        if self.policy.borrow != "budgeted" or self.borrow_turns_left > 0:
            return set()
        return set(self.borrowed_gpus())

    def _budget_allowed(self) -> frozenset[str] | None:
        """Workers the router may use: all, or none of the borrowed ones once spent."""
        if self.policy.borrow != "budgeted" or self.borrow_turns_left > 0:
            return None

        def compute() -> frozenset[str]:
            ov = self._borrowed_worker_ids()
            return frozenset(w.worker_id for w in self._state.routable() if w.worker_id not in ov)

        return self._of_state("budget_allowed", compute)

    def _spend_budget(self, routes: list[cmd.Route]) -> None:
        if self.policy.borrow != "budgeted":
            return
        if routes:
            ov = self._borrowed_worker_ids()
            self.borrow_turns_left -= sum(1 for r in routes if r.prefill_worker_id in ov)
        if self.borrow_turns_left <= 0:
            for w in self._borrowed_workers():
                if w.status == Status.ACTIVE:
                    self._state = self._state.update_worker(w.worker_id, status=Status.DRAINING)
                    self._emit(cmd.Drain(w.worker_id))

    def _maybe_return_early(self) -> None:
        """Budget spent and every borrowed worker drained: hand the GPUs back now."""
        if self.policy.borrow != "budgeted" or self.borrow_turns_left > 0:
            return
        ov = list(self.borrowed_gpus())
        if not ov or any(self._state.owner_of(g) for g in ov):
            return
        self._emit(cmd.ReleaseGpus(tuple(ov), "training"), cmd.RestoreTraining(tuple(ov)))
        self._state = self._state.without_gpus(ov)
        self.returned_early_s = self.now_s
        self._decide(f"budget spent: returned {ov} to training early")

    def _tune_budget_on_batch(self) -> None:
        """A batch is ready for training: if our GPUs came back early, the bubble between
        then and now went unused; grow the budget in proportion."""
        if self.policy.borrow != "budgeted" or self.returned_early_s is None:
            return
        started = self.borrow_started_s if self.borrow_started_s is not None else 0.0
        window = max(1e-9, self.now_s - started)
        unused = min(1.0, max(0.0, (self.now_s - self.returned_early_s) / window))
        self.borrow_budget_turns = int(self.borrow_budget_turns * (1.0 + unused)) + 1
        self.returned_early_s = None
        self.borrow_started_s = None
