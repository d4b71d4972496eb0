"""Training devices lent to rollout and given back (paper §4.6): the real world's training
component (`RayWorld.training`; the simulator's is its `Trainer`).

It executes the controller's OffloadTraining, ReleaseGpus(to="training") and
RestoreTraining against the trainer actor:

* OffloadTraining: the trainer releases its device state; on CUDA devices a rollout worker
  on those slots waits for that call (`RayWorkers.device_free`) before it starts or is
  activated (CPU slots share host memory: no wait).
* ReleaseGpus + RestoreTraining: a borrowed worker on the slots was just parked
  (`pearl.runtime.parking`) and may still hold device state; the trainer restores only
  after those parks have finished, and the return is noted (on time or late) then. With no
  park pending both happen at once. When the trainer's restore call returns, a
  `TrainingRestored` event tells the controller how long the return took.

Training itself (when a batch is trained, and asking for the devices back before it) is the
driver's `TrainingPipeline`; it reads `lent` and calls `ask_back`, and hears of the last
device coming back through `on_returned`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.control.notes import BORROW_VERBS, RETURN_VERBS

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle


class _Slots(Protocol):
    """What lending needs of the worker component (`RayWorkers`)."""

    device_free: dict[str, ObjectRef]

    def parks_pending(self, slots: tuple[str, ...]) -> list[asyncio.Future]: ...


class TrainingLending:
    """The trainer's devices as rollout borrows them. `trainer` is the trainer actor's
    handle; `note(kind, reason, **detail)` records a run event; `last_decision(verbs)` is
    the controller's latest decision starting with one of `verbs` (the reason noted)."""

    def __init__(
        self,
        *,
        trainer: ActorHandle,
        slots: _Slots,
        emit: Callable[[Any], None],
        now: Callable[[], float],
        note: Callable[..., None],
        last_decision: Callable[[tuple[str, ...]], str],
        on_returned: Callable[[], None],
    ) -> None:
        self.trainer = trainer
        self.slots = slots
        self.emit = emit
        self.now = now
        self.note = note
        self.last_decision = last_decision
        self.on_returned = on_returned
        self.lent: set[str] = set()
        self.wants_deadline: float | None = None
        self.late_returns = 0
        self.restore_deferred: set[str] = set()  # slots whose restore `_return_after_parks` does

    # -- commands ------------------------------------------------------------------------------
    def offload(self, c: cmd.OffloadTraining) -> None:
        self.lent |= set(c.gpu_ids)
        released: ObjectRef = self.trainer.release.remote()
        for g in c.gpu_ids:  # a borrowed worker there starts once the trainer is off
            self.slots.device_free[g] = released
        self.note("borrow", self.last_decision(BORROW_VERBS), gpus=list(c.gpu_ids))

    def restore(self, c: cmd.RestoreTraining) -> None:
        if not self.restore_deferred.intersection(c.gpu_ids):
            self._restore_trainer(c.gpu_ids)
        self.restore_deferred -= set(c.gpu_ids)

    def release(self, c: cmd.ReleaseGpus) -> None:
        """Borrowed devices go back to training (`c.to == "training"`)."""
        parks = self.slots.parks_pending(c.gpu_ids)
        reason = self.last_decision(RETURN_VERBS) or "borrow window over"
        if parks:  # the parked workers must free the devices before training has them
            self.restore_deferred |= set(c.gpu_ids)
            asyncio.get_running_loop().create_task(
                self._return_after_parks(c.gpu_ids, parks, reason)
            )
        else:
            self._returned(c.gpu_ids, reason)

    # -- what the pipeline asks ------------------------------------------------------------------
    def ask_back(self, grace_s: float) -> None:
        """Training needs its devices: ask for the lent ones, once, with a deadline."""
        if self.lent and self.wants_deadline is None:
            self.wants_deadline = self.now() + grace_s
            self.emit(ev.TrainingWants(self.now(), tuple(sorted(self.lent)), self.wants_deadline))

    # -- returns -------------------------------------------------------------------------------
    def _returned(self, gpu_ids: tuple[str, ...], reason: str) -> None:
        """Training devices are back: note the return (on time?) and train if it waited."""
        self.lent -= set(gpu_ids)
        on_time = self.wants_deadline is None or self.now() <= self.wants_deadline
        self.late_returns += 0 if on_time else 1
        self.note("return", reason, gpus=list(gpu_ids), on_time=on_time)
        if not self.lent:
            self.wants_deadline = None
            self.on_returned()

    async def _return_after_parks(
        self, gpu_ids: tuple[str, ...], parks: list[asyncio.Future], reason: str
    ) -> None:
        """Return `gpu_ids` once the workers parked there released their device state; the
        trainer's restore call goes out first, so it precedes any training call."""
        await asyncio.wait(parks)
        self._restore_trainer(gpu_ids)
        self._returned(gpu_ids, reason)

    def _restore_trainer(self, gpu_ids: tuple[str, ...]) -> None:
        """Ask the trainer to restore its device state; when it has, tell the controller
        (`TrainingRestored`: it measures the return's cost from it)."""
        done: ObjectRef = self.trainer.restore.remote()

        async def report() -> None:
            try:
                await done
            except Exception as err:  # noqa: BLE001 - the trainer's own failure surfaces on its next call
                self.note("restore_failed", f"trainer restore failed: {err}", gpus=list(gpu_ids))
                return
            self.emit(ev.TrainingRestored(self.now(), tuple(gpu_ids)))

        asyncio.get_running_loop().create_task(report())
