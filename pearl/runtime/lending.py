"""Training devices lent to rollout and given back (paper §4.6), for the runtime driver.

A mixin of `Driver` (pearl/runtime/driver.py), split out to keep each module small. It
executes the controller's OffloadTraining, ReleaseGpus(to="training") and RestoreTraining:

* OffloadTraining: the trainer releases its device state; on CUDA devices a rollout worker
  on those slots waits for that call (`world.device_free`) before it starts or is
  activated (CPU slots share host memory: no wait).
* ReleaseGpus + RestoreTraining: a borrowed worker on the slots was just parked
  (`pearl.runtime.parking`) and may still hold device state; the trainer restores only
  after those parks have finished, and the return is noted (on time or late) then. With no
  park pending both happen at once, as before. When the trainer's restore call returns, a
  `TrainingRestored` event tells the controller how long the return took.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pearl.control import commands as cmd
from pearl.control import events as ev


class Lending:
    """Attributes are set by `Driver.__init__` and `Driver._run`."""

    world: Any
    trainer: Any
    lent: set[str]
    wants_deadline: float | None
    late_returns: int
    restore_deferred: set[str]  # slots whose restore `_return_after_parks` does

    def now(self) -> float:
        raise NotImplementedError

    def emit(self, event: Any) -> None:
        raise NotImplementedError

    def note(self, kind: str, reason: str, **detail: Any) -> None:
        raise NotImplementedError

    def _last_decision(self, word: str) -> str:
        raise NotImplementedError

    def _maybe_train(self) -> None:
        raise NotImplementedError

    def _lend(self, c: cmd.OffloadTraining | cmd.RestoreTraining | cmd.ReleaseGpus) -> None:
        if isinstance(c, cmd.OffloadTraining):
            self.lent |= set(c.gpu_ids)
            released = self.trainer.release.remote()
            for g in c.gpu_ids:  # a borrowed worker there starts once the trainer is off
                self.world.device_free[g] = released
            self.note("borrow", self._last_decision("borrow"), gpus=list(c.gpu_ids))
        elif isinstance(c, cmd.RestoreTraining):
            if not self.restore_deferred.intersection(c.gpu_ids):
                self._restore_trainer(c.gpu_ids)
            self.restore_deferred -= set(c.gpu_ids)
        elif c.to == "training":
            parks = self.world.parks_pending(c.gpu_ids)
            reason = self._last_decision("return") or "borrow window over"
            if parks:  # the parked workers must free the devices before training has them
                self.restore_deferred |= set(c.gpu_ids)
                asyncio.get_running_loop().create_task(
                    self._return_after_parks(c.gpu_ids, parks, reason)
                )
            else:
                self._returned(c.gpu_ids, reason)

    def _returned(self, gpu_ids: tuple[str, ...], reason: str) -> None:
        """Training devices are back: note the return (on time?) and train if it waited."""
        self.lent -= set(gpu_ids)
        on_time = self.wants_deadline is None or self.now() <= self.wants_deadline
        self.late_returns += 0 if on_time else 1
        self.note("return", reason, gpus=list(gpu_ids), on_time=on_time)
        if not self.lent:
            self.wants_deadline = None
            self._maybe_train()

    async def _return_after_parks(
        self, gpu_ids: tuple[str, ...], parks: list[asyncio.Task], reason: str
    ) -> None:
        """Return `gpu_ids` once the workers parked there released their device state; the
        trainer's restore call goes out first, so it precedes any training call."""
        await asyncio.wait(parks)
        self._restore_trainer(gpu_ids)
        self._returned(gpu_ids, reason)

    def _restore_trainer(self, gpu_ids: tuple[str, ...]) -> None:
        """Ask the trainer to restore its device state; when it has, tell the controller
        (`TrainingRestored`: it measures the return's cost from it)."""
        done = self.trainer.restore.remote()

        async def report() -> None:
            try:
                await done
            except Exception as err:  # noqa: BLE001 - the trainer's own failure surfaces on its next call
                self.note("restore_failed", f"trainer restore failed: {err}", gpus=list(gpu_ids))
                return
            self.emit(ev.TrainingRestored(self.now(), tuple(gpu_ids)))

        asyncio.get_running_loop().create_task(report())
