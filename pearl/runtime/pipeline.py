"""The training side of the runtime driver: rollout steps in, GRPO steps out (paper §4.6, §5).

`TrainingPipeline` is a component of the `Driver` (pearl/runtime/driver.py). When every
trajectory of a batch is done it reports the step to the controller, trains it once the
borrowed training devices are back (asking for them with a deadline through the world's
training component, `TrainingLending`), publishes the new weights, checkpoints, and offers
the trainer's next idle window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pearl.control import events as ev
from pearl.control.controller import Controller
from pearl.control.plan import config_of
from pearl.control.state import Gpu, Status
from pearl.report.rundir import RunRecorder
from pearl.runtime.lending import TrainingLending
from pearl.runtime.run_checkpoint import (
    prune_trainer_files,
    read_checkpoint,
    trainer_file_name,
    write_checkpoint,
)
from pearl.runtime.run_config import RunConfig
from pearl.runtime.trajectory import RuntimeTrajectory

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from pearl.runtime.world import RayWorld


def checkpoint_dir(out_dir: Path) -> Path:
    """Where a run directory keeps its checkpoint."""
    return out_dir / "checkpoint"


def load_checkpoint(out_dir: Path) -> dict[str, Any] | None:
    """The driver's checkpoint of the run in `out_dir` (None: there is none)."""
    return read_checkpoint(checkpoint_dir(out_dir))


class TrainingPipeline:
    """Batches to the trainer and new weights back. `version`, `trained_steps`,
    `step_metrics` and `expected_rollout_s` start from a checkpoint on resume."""

    def __init__(
        self,
        *,
        cfg: RunConfig,
        out_dir: Path,
        world: RayWorld,
        lending: TrainingLending,
        trainer: ActorHandle,
        controller: Controller,
        recorder: RunRecorder,
        emit: Callable[[Any], None],
        now: Callable[[], float],
        training_gpus: tuple[Gpu, ...],
        version: int,
        trained_steps: int = 0,
        step_metrics: Iterable[dict[str, Any]] = (),
        expected_rollout_s: float = 30.0,
    ) -> None:
        self.cfg = cfg
        self.out_dir = out_dir
        self.world = world
        self.lending = lending
        self.trainer = trainer
        self.controller = controller
        self.recorder = recorder
        self.emit = emit
        self.now = now
        self.training_gpus = training_gpus
        self.version = version
        self.trained_steps = trained_steps
        self.step_metrics: list[dict[str, Any]] = list(step_metrics)
        self.expected_rollout_s = expected_rollout_s
        self.ready_steps: dict[int, tuple[list[RuntimeTrajectory], list[Any]]] = {}
        self.step_started: dict[int, float] = {}
        self.step_makespan: dict[int, float] = {}
        self.step_predicted: dict[int, float | None] = {}
        self.training = False
        self._checkpointing: asyncio.Task[None] | None = None  # the last checkpoint's write
        # the first failure of a training-side task (the trainer died, a write failed): the
        # run cannot go on, and the driver stops with it
        self.failure: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    @property
    def done(self) -> bool:
        return self.trained_steps >= self.cfg.trainer.num_steps

    def on_batch_started(self, step: int) -> None:
        """A rollout batch starts: its start time, and what the engine predicts for it."""
        self.step_started.setdefault(step, self.now())
        self.step_predicted.setdefault(step, self.controller.predicted_batch_makespan_s())

    def on_trajectory_done(self, event: ev.TrajectoryDone) -> None:
        traj = self.world.trajs.get(event.traj_id)
        if traj is None:
            return
        step = traj.step
        trajs = self.world.trajectories.step_trajs(step)
        if len(trajs) < self.cfg.rollout.batch_size or not all(t.done for t in trajs):
            return
        trajs, records = self.world.trajectories.pop_step(step)
        makespan = self.now() - self.step_started.get(step, self.now())
        self.expected_rollout_s = 0.7 * self.expected_rollout_s + 0.3 * makespan
        self.ready_steps[step] = (trajs, records)
        self.step_makespan[step] = makespan
        self._spawn(self._publish_step(step, records))
        self.maybe_train()

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        """A training-side task whose failure stops the run (`failure`)."""
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None or self.failure.done():
            return
        self.failure.set_result(task.exception())  # type: ignore[arg-type]

    async def _publish_step(self, step: int, records: list[Any]) -> None:
        _, worker_steps = await self.world.drain_telemetry()
        self.recorder.record_telemetry([*records, *worker_steps])
        self.emit(ev.RolloutStepFinished(self.now(), step, tuple(records), tuple(worker_steps)))

    def maybe_train(self) -> None:
        step = self.version  # batch k is trained into version k + 1
        if self.training or step not in self.ready_steps or self.done:
            return
        if self.lending.lent:
            self.lending.ask_back(self.cfg.trainer.return_grace_s)
            return
        self.training = True
        self._spawn(self._train(step))

    async def _train(self, step: int) -> None:
        trajs, _ = self.ready_steps.pop(step)
        samples = [t.to_sample() for t in trajs]
        t0 = self.now()
        metrics = await _aget(self.trainer.train.remote(samples))
        self.version = int(metrics["version"])
        self.trained_steps += 1
        row = {
            "step": step,
            "version": self.version,
            "reward_mean": metrics["reward_mean"],
            "trajectories": len(trajs),
            "rollout_makespan_s": self.step_makespan.get(step),
            "predicted_makespan_s": self.step_predicted.get(step),
            "train_time_s": self.now() - t0,
            "generated_tokens": sum(sum(t.response_mask) for t in trajs),
            "interrupted_trajectories": sum(1 for t in trajs if t.num_interrupts),
            # ended at rollout.max_context_tokens before their task did
            "truncated_trajectories": sum(1 for t in trajs if t.truncated),
            "min_segment_version": min(
                (t.min_version for t in trajs if t.min_version is not None), default=None
            ),
            "trajectory_ids": [t.traj_id for t in trajs],
            "t_s": self.now(),
        }
        active = config_of(self.controller.state, (Status.ACTIVE,))
        row["config"] = None if active is None else str(active)
        self.step_metrics.append(row)
        self.recorder.record_step(step, row)
        profile = getattr(self.controller.advisor, "profile", None)
        if profile is not None:  # `pearl decide --profile RUN/profile.json` replays a decision
            self.recorder.write_profile(profile.to_json())
        self.save_checkpoint()
        self.training = False
        self.emit(ev.TrainingStepFinished(self.now(), self.version))
        self.offer_training_idle()
        self.maybe_train()

    def offer_training_idle(self) -> None:
        if self.done:
            return
        lent = self.lending.lent
        free = tuple(g.gpu_id for g in self.training_gpus if g.gpu_id not in lent)
        if free:
            self.emit(ev.TrainingIdle(self.now(), free, self.now() + self.expected_rollout_s))

    def save_checkpoint(self) -> None:
        """The trainer writes this version's file; driver.json, naming it, is written once
        the file is whole and after the previous checkpoint's, then older trainer files go
        (`pearl.runtime.run_checkpoint`). Training goes on meanwhile."""
        d = checkpoint_dir(self.out_dir)
        d.mkdir(parents=True, exist_ok=True)
        doc_version = self.version
        name = trainer_file_name(doc_version)
        saved: Any = self.trainer.save.remote(str(d / name))
        done = [t.to_json() for t in self.world.trajs.values() if t.done and t.step >= self.version]
        doc = {
            "trained_steps": self.trained_steps,
            "version": doc_version,
            "time_s": self.now(),
            "expected_rollout_s": self.expected_rollout_s,
            "step_metrics": list(self.step_metrics),
            "done_trajectories": done,
            "trainer_file": name,
        }
        previous = self._checkpointing

        async def commit() -> None:
            if previous is not None:
                await previous
            await _aget(saved)
            write_checkpoint(d, doc)
            prune_trainer_files(d, doc_version)

        self._checkpointing = self._spawn(commit())

    async def checkpointed(self) -> None:
        """Wait until the last checkpoint is written (the end of a run)."""
        if self._checkpointing is not None:
            await self._checkpointing


async def _aget(ref: Any) -> Any:
    return await ref
