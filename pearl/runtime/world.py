"""The real world on Ray: executes the controller's commands on actors (docs/architecture.md).

`RayWorld` owns the environment pool and three components, and `execute` maps each command
to the component that carries it out (one `CommandTable`, `pearl.world.contract`):

* `pool`, the workers (`pearl.runtime.world_workers.RayWorkers`, as the simulator's
  `SimWorkers`): start, activate a parked worker, sync, role, drain, interrupt, stop or
  park (parked workers on training slots in `pearl.runtime.parking`);
* `trajectories` (`pearl.runtime.world_trajectories.RayTrajectories`, as the simulator's
  `pearl.sim.rollout`): StartRolloutBatch and Route, the token-level record of every
  trajectory, the turns on the worker actors and the environment's answers;
* `training` (`pearl.runtime.lending.TrainingLending`, as the simulator's `Trainer`):
  OffloadTraining, ReleaseGpus to training, RestoreTraining.

Each command starts asynchronous work whose completion is put on the event queue as a
controller event (see `pearl.control.commands` for the pairing). The driver
(`pearl.runtime.driver`) pops events, hands them to the controller and passes the commands
back here, so the world never decides anything itself.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from pearl.control import commands as cmd
from pearl.envs.pool import EnvPool
from pearl.runtime.lending import TrainingLending
from pearl.runtime.run_config import RunConfig
from pearl.runtime.worker.api import (
    EngineSpec,
)
from pearl.runtime.world_trajectories import RayTrajectories
from pearl.runtime.world_workers import RayWorkers
from pearl.world.contract import CommandTable

log = logging.getLogger(__name__)


class RayWorld:
    """Executes commands; `emit(event)` feeds the driver's queue. See the module docstring."""

    def __init__(
        self,
        cfg: RunConfig,
        engine_spec: EngineSpec,
        *,
        emit: Callable[[Any], None],
        now: Callable[[], float],
        on_record: Callable[[str, Any], None],
        training_slots: tuple[str, ...] = (),
        training: Callable[[RayWorkers], TrainingLending] | None = None,
    ) -> None:
        self.cfg = cfg
        self.engine_spec = engine_spec
        self.emit = emit
        self.now = now
        self.on_record = on_record  # (kind, payload) for the run recorder
        self.rng = random.Random(cfg.seed)
        self.env = EnvPool(
            cfg.env.name,
            cfg.env.num_hosts,
            backend="ray" if cfg.env.use_ray else "thread",
            env_kwargs=dict(cfg.env.kwargs),
        )
        self.tasks: set[asyncio.Task] = set()
        self.counters = {
            "interrupts": 0,
            "resumes": 0,
            "init_failures": 0,
            "turns": 0,
            "kv_handoffs": 0,  # turns whose KV crossed from a prefill to a decode worker
            "parks": 0,
            "activations": 0,
        }
        self.pool = RayWorkers(
            cfg=cfg,
            engine_spec=engine_spec,
            emit=emit,
            now=now,
            on_record=on_record,
            rng=self.rng,
            counters=self.counters,
            spawn=self.spawn,
            training_slots=training_slots,
        )
        self.workers = self.pool.workers  # the actor table the turns read
        self.trajectories = RayTrajectories(
            cfg=cfg,
            env=self.env,
            workers=self.workers,
            emit=emit,
            now=now,
            on_record=on_record,
            counters=self.counters,
            spawn=self.spawn,
            rng=self.rng,
        )
        self.trajs = self.trajectories.trajs  # the table the pipeline reads
        self._execute = CommandTable(
            {
                cmd.InitWorker: self.pool.init,
                cmd.SyncWeights: self.pool.sync_weights,
                cmd.ChangeRole: self.pool.change_role,
                cmd.Drain: self.pool.drain,
                cmd.Interrupt: self.pool.interrupt,
                cmd.StopWorker: self.pool.stop,
                # Admission is the controller's: its workers are already up and synced, and
                # they serve from the first turn routed to them.
                cmd.AdmitGroup: lambda c: None,
                cmd.StartRolloutBatch: self.trajectories.start_batch,
                cmd.Route: self.trajectories.route,
                cmd.ReleaseGpus: self._release_gpus,
            }
        )
        # The training component, built over the worker component (a borrowed worker waits
        # for the trainer's release on its slots); a world without one (tests) refuses the
        # training commands.
        self.training = None if training is None else training(self.pool)
        if self.training is not None:
            self._execute.add(cmd.OffloadTraining, self.training.offload)
            self._execute.add(cmd.RestoreTraining, self.training.restore)

    # -- plumbing ------------------------------------------------------------------------
    def spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("world task failed", exc_info=task.exception())
            self.on_record("error", repr(task.exception()))

    # -- commands ------------------------------------------------------------------------
    def execute(self, c: Any) -> None:
        if isinstance(c, cmd.Interrupt | cmd.StopWorker):  # the book has interrupted them
            self.trajectories.flights.cancel_on(c.worker_id)
        self._execute(c)

    def _release_gpus(self, c: cmd.ReleaseGpus) -> None:
        """GPUs leave rollout. To training: the training component takes them back. To the
        provider: nothing to do here; the workers there were stopped, and the node goes
        when the provider (or, locally, the trace player) removes it."""
        if c.to == "training":
            if self.training is None:
                raise TypeError(f"{c!r}: this world has no training component")
            self.training.release(c)

    async def drain_telemetry(self) -> tuple[list[Any], list[Any]]:
        """Per-worker step records since the last call (turn records come with results)."""
        steps: list[Any] = []
        for h in list(self.workers.values()):
            try:
                _, ws = await asyncio.wait_for(_aget(h.telemetry.remote()), 5.0)
                steps.extend(ws)
            except Exception:  # noqa: BLE001 - a dead or busy worker reports nothing
                continue
        return [], [*self.pool.lot.take_steps(), *steps]

    async def shutdown(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        for wid in list(self.workers):
            self.pool.kill(wid)
        self.pool.lot.kill_all()
        self.env.shutdown()


async def _aget(ref: Any) -> Any:
    return await ref
