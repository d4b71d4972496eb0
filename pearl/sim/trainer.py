"""The simulated trainer: asynchronous GRPO steps on the training GPUs (paper §3, §4.6).

The trainer consumes rollout batches in step order. Step `k` trains on batch `k` and
publishes weight version `k + 1`. A step starts when its batch is ready *and* every training
GPU is home (none lent to rollout, none still being returned). Its duration comes from the
tokens in the batch (`step_time_s`).

While it waits for a batch the trainer is idle, and says so (`on_idle(gpu_ids,
idle_until_s)`, with a predicted end of the idle window) so that the controller may borrow
its GPUs. When a batch is ready while GPUs are lent, it asks for them back
(`on_wants(gpu_ids, deadline_s)`): returning them is mandatory; the step starts as soon as
the last one is restored. Lending happens only while idle (`offload` during a step is
refused and returns False).

The trainer never reads a clock of its own: `core.now_s` is the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pearl.sim.config import CostConfig, TrainerConfig
from pearl.sim.core import PRIO_TRAINER, EventCore


@dataclass(frozen=True, slots=True)
class TrainingStep:
    """One finished step: [start_s, end_s) on the training GPUs."""

    step: int
    start_s: float
    end_s: float
    num_tokens: int


@dataclass(frozen=True, slots=True)
class TrainerCallbacks:
    on_idle: Callable[[tuple[str, ...], float], None]
    on_wants: Callable[[tuple[str, ...], float], None]
    on_step_finished: Callable[[int], None]
    on_restored: Callable[[tuple[str, ...]], None] = lambda gpu_ids: None


def step_time_s(
    cfg: TrainerConfig,
    *,
    num_tokens: int,
    active_params: float,
    num_gpus: int,
    peak_flops_per_s: float,
) -> float:
    """Seconds for one training step over `num_tokens` tokens (see TrainerConfig)."""
    flops = cfg.flops_per_token_factor * active_params * num_tokens
    return cfg.overhead_s + flops / (num_gpus * peak_flops_per_s * cfg.mfu)


class Trainer:
    """State: `version`, ready batches, lent GPUs, and the history of steps."""

    def __init__(
        self,
        core: EventCore,
        cfg: TrainerConfig,
        costs: CostConfig,
        *,
        gpu_ids: tuple[str, ...],
        active_params: float,
        peak_flops_per_s: float,
        callbacks: TrainerCallbacks,
        expected_ready_s: Callable[[], float],
    ) -> None:
        self.core = core
        self.cfg = cfg
        self.costs = costs
        self.gpu_ids = gpu_ids
        self.active_params = active_params
        self.peak_flops_per_s = peak_flops_per_s
        self.cb = callbacks
        self.expected_ready_s = expected_ready_s
        self.version = 0
        self.next_step = 0
        self.ready: dict[int, int] = {}  # step -> tokens in its batch
        self.training = False
        self.lent: set[str] = set()
        self.returning: set[str] = set()
        self.wants_sent = False
        self.steps: list[TrainingStep] = []
        self._start_s = 0.0
        self.wait_for_gpus_s = 0.0  # time a ready step waited for lent GPUs
        self._wait_since: float | None = None

    # -- queries ------------------------------------------------------------------------
    @property
    def home(self) -> bool:
        return not self.lent and not self.returning

    def step_time_s(self, num_tokens: int) -> float:
        return step_time_s(
            self.cfg,
            num_tokens=num_tokens,
            active_params=self.active_params,
            num_gpus=len(self.gpu_ids),
            peak_flops_per_s=self.peak_flops_per_s,
        )

    def busy_s(self, until_s: float) -> float:
        """Seconds spent training in [0, until_s]."""
        done = sum(min(s.end_s, until_s) - s.start_s for s in self.steps if s.start_s < until_s)
        if self.training and self._start_s < until_s:
            done += until_s - self._start_s
        return done

    # -- inputs -----------------------------------------------------------------------------
    def start(self) -> None:
        """At time 0 the trainer waits for batch 0: announce the idle window."""
        self.cb.on_idle(self.gpu_ids, self.expected_ready_s())

    def batch_ready(self, step: int, num_tokens: int) -> None:
        """Rollout batch `step` is complete with `num_tokens` tokens to train on."""
        if step < self.next_step or step in self.ready:
            return
        self.ready[step] = num_tokens
        self._try_start()

    def offload(self, gpu_ids: tuple[str, ...]) -> bool:
        """Lend idle training GPUs to rollout; refused (False) during a step."""
        ids = tuple(g for g in gpu_ids if g in self.gpu_ids and g not in self.lent)
        if self.training:
            return False
        self.lent.update(ids)
        self.returning.difference_update(ids)
        return True

    def restore(self, gpu_ids: tuple[str, ...]) -> float:
        """Take lent GPUs back; returns when they are home (deactivation cost, seeded)."""
        ids = tuple(g for g in gpu_ids if g in self.lent)
        if not ids:
            return self.core.now_s
        self.lent.difference_update(ids)
        self.returning.update(ids)
        c = self.costs.borrow_deactivation_s
        done_s = self.core.now_s + self.core.uniform(c.low_s, c.high_s)
        self.core.schedule(done_s, lambda: self._restored(ids), PRIO_TRAINER)
        return done_s

    # -- internals ----------------------------------------------------------------------
    def _restored(self, ids: tuple[str, ...]) -> None:
        self.returning.difference_update(ids)
        self.cb.on_restored(ids)
        self._try_start()

    def _try_start(self) -> None:
        if self.training or self.next_step not in self.ready:
            return
        if not self.home:
            if self._wait_since is None:
                self._wait_since = self.core.now_s
            if self.lent and not self.wants_sent:
                self.wants_sent = True
                deadline = self.core.now_s + self.costs.borrow_deactivation_s.high_s
                self.cb.on_wants(tuple(sorted(self.lent)), deadline)
            return
        if self._wait_since is not None:
            self.wait_for_gpus_s += self.core.now_s - self._wait_since
            self._wait_since = None
        self.wants_sent = False
        tokens = self.ready.pop(self.next_step)
        self.training = True
        self._start_s = self.core.now_s
        step = self.next_step
        self.core.after(self.step_time_s(tokens), lambda: self._finish(step, tokens), PRIO_TRAINER)

    def _finish(self, step: int, tokens: int) -> None:
        self.training = False
        self.steps.append(TrainingStep(step, self._start_s, self.core.now_s, tokens))
        self.next_step = step + 1
        self.version = step + 1
        self.cb.on_step_finished(self.version)
        self._try_start()
        if not self.training:
            self.cb.on_idle(self.gpu_ids, max(self.core.now_s, self.expected_ready_s()))
