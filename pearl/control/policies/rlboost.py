"""`rlboost+`: RLBoost (Wu et al., 2025) as it describes itself, ported to asynchronous
agentic rollout (see docs/baselines.md):

* preemptible instances are admitted as soon as each one is ready and has pulled the latest
  weights by version (one group per worker, no cost gate, no waiting for its peers);
* a preempted instance's responses migrate at token level: the generated prefix is kept and
  the response continues on another instance (here: one full prefill, then decode);
* the reserved (training) GPUs are time-shared for rollout whenever training idles, with a
  per-step generation budget re-tuned from the measured training bubble ("adaptive rollout
  offload", `TurnBudget` below; a policy with `borrow="budgeted"` gets one);
* responses also migrate for continuous load balancing: here at every turn boundary, a
  turn leaves its trajectory's worker when another has fewer requests in flight
  (`sticky_max_imbalance` 0, as `pearl`);
* colocated PD everywhere; no cost gates anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pearl.control import commands as cmd
from pearl.control.policies.base import BorrowMode, Policy
from pearl.control.state import Status

if TYPE_CHECKING:
    from pearl.control.context import ControlContext


@dataclass(frozen=True, slots=True)
class RLBoostPlus(Policy):
    name: str = "rlboost+"
    use_preemptible: bool = True
    gate_expansion: bool = False
    borrow: BorrowMode = "budgeted"
    adapt_pd: bool = False
    modes: tuple[str, ...] = ("colocated",)
    admit_individually: bool = True
    sticky_max_imbalance: int | None = 0


class TurnBudget:
    """RLBoost's adaptive offload: borrowed workers take at most `turns` turns per borrow
    window; once spent they drain and the GPUs go back to training early. The budget is
    re-tuned each window from the measured training bubble: a forced return (training had to
    wait for its GPUs) shrinks it by a quarter; GPUs returned early while training still
    waited for its batch (an unused bubble) grow it in proportion to the unused share of the
    window."""

    def __init__(self, turns: int) -> None:
        if turns < 1:
            raise ValueError("a borrow budget needs at least one turn")
        self.turns = turns
        self.turns_left = turns
        self.started_s: float | None = None
        self.returned_early_s: float | None = None

    @property
    def spent(self) -> bool:
        return self.turns_left <= 0

    # -- the borrow window ---------------------------------------------------------------------
    def on_borrow(self, now_s: float) -> None:
        """A borrow starts: a fresh window with the whole budget."""
        self.started_s = now_s
        self.returned_early_s = None
        self.turns_left = self.turns

    def on_forced_return(self) -> None:
        """Training wanted its GPUs back before the budget was spent: shrink it."""
        self.turns = max(1, (self.turns * 3) // 4)
        self.started_s = None

    def on_batch(self, now_s: float) -> None:
        """A batch is ready for training: if our GPUs came back early, the bubble between
        then and now went unused; grow the budget in proportion."""
        if self.returned_early_s is None:
            return
        started = self.started_s if self.started_s is not None else 0.0
        window = max(1e-9, now_s - started)
        unused = min(1.0, max(0.0, (now_s - self.returned_early_s) / window))
        self.turns = int(self.turns * (1.0 + unused)) + 1
        self.returned_early_s = None
        self.started_s = None

    # -- what the controller asks ------------------------------------------------------------
    def returning_gpus(self, ctx: ControlContext) -> set[str]:
        """Borrowed GPUs on their way back (a spent budget): no re-plan may use them."""
        return set(ctx.borrowed_gpus()) if self.spent else set()

    def allowed(self, ctx: ControlContext) -> frozenset[str] | None:
        """Workers the router may use: all (None), or none of the borrowed ones once spent."""
        if not self.spent:
            return None

        def compute() -> frozenset[str]:
            ov = ctx.borrowed_worker_ids()
            return frozenset(w.worker_id for w in ctx.state.routable() if w.worker_id not in ov)

        return ctx.of_state("budget_allowed", compute)

    def spend(self, ctx: ControlContext, routes: list[cmd.Route]) -> None:
        """Charge the turns routed to borrowed workers; once spent, drain those workers."""
        if routes:
            ov = ctx.borrowed_worker_ids()
            self.turns_left -= sum(1 for r in routes if r.prefill_worker_id in ov)
        if self.spent:
            for w in ctx.borrowed_workers():
                if w.status == Status.ACTIVE:
                    ctx.state = ctx.state.update_worker(w.worker_id, status=Status.DRAINING)
                    ctx.emit(cmd.Drain(w.worker_id))

    def return_early(self, ctx: ControlContext) -> None:
        """Budget spent and every borrowed worker drained: hand the GPUs back now."""
        if not self.spent:
            return
        ov = list(ctx.borrowed_gpus())
        if not ov or any(ctx.state.owner_of(g) for g in ov):
            return
        ctx.emit(cmd.ReleaseGpus(tuple(ov), "training"), cmd.RestoreTraining(tuple(ov)))
        ctx.state = ctx.state.without_gpus(ov)
        self.returned_early_s = ctx.now_s
        ctx.decide(f"budget spent: returned {ov} to training early")
