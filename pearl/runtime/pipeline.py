"""The training side of the runtime driver: rollout steps in, GRPO steps out (paper §4.6, §5).

A mixin of `Driver` (pearl/runtime/driver.py), split out to keep each module small. When
every trajectory of a batch is done it reports the step to the controller, trains it once
the borrowed training devices are back (asking for them with a deadline when needed),
publishes the new weights, checkpoints, and offers the trainer's next idle window.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pearl.control import events as ev
from pearl.control.plan import config_of
from pearl.control.state import Gpu, Status
from pearl.runtime.checkpoint import read_checkpoint, write_checkpoint
from pearl.runtime.run_config import RunConfig
from pearl.runtime.trajectory import RuntimeTrajectory


class TrainingPipeline:
    """Attributes are set by `Driver.__init__` and `Driver._run`."""

    cfg: RunConfig
    out_dir: Path
    world: Any
    trainer: Any
    controller: Any
    recorder: Any
    training_gpus: tuple[Gpu, ...]
    lent: set[str]
    wants_deadline: float | None
    trained_steps: int
    version: int
    ready_steps: dict[int, tuple[list[RuntimeTrajectory], list[Any]]]
    step_started: dict[int, float]
    step_makespan: dict[int, float]
    step_predicted: dict[int, float | None]
    step_metrics: list[dict[str, Any]]
    training: bool
    expected_rollout_s: float

    def now(self) -> float:
        raise NotImplementedError

    def emit(self, event: Any) -> None:
        raise NotImplementedError

    def _maybe_step_done(self, event: ev.TrajectoryDone) -> None:
        traj = self.world.trajs.get(event.traj_id)
        if traj is None:
            return
        step = traj.step
        trajs = self.world.step_trajs(step)
        if len(trajs) < self.cfg.rollout.batch_size or not all(t.done for t in trajs):
            return
        trajs, records = self.world.pop_step(step)
        makespan = self.now() - self.step_started.get(step, self.now())
        self.expected_rollout_s = 0.7 * self.expected_rollout_s + 0.3 * makespan
        self.ready_steps[step] = (trajs, records)
        self.step_makespan[step] = makespan
        loop = asyncio.get_running_loop()
        loop.create_task(self._publish_step(step, records))
        self._maybe_train()

    async def _publish_step(self, step: int, records: list[Any]) -> None:
        _, worker_steps = await self.world.drain_telemetry()
        self.recorder.record_telemetry([*records, *worker_steps])
        self.emit(ev.RolloutStepFinished(self.now(), step, tuple(records), tuple(worker_steps)))

    def _maybe_train(self) -> None:
        step = self.trained_steps_first_step()
        if (
            self.training
            or step not in self.ready_steps
            or self.trained_steps >= self.cfg.trainer.num_steps
        ):
            return
        if self.lent:
            if self.wants_deadline is None:
                self.wants_deadline = self.now() + self.cfg.trainer.return_grace_s
                self.emit(
                    ev.TrainingWants(self.now(), tuple(sorted(self.lent)), self.wants_deadline)
                )
            return
        self.training = True
        asyncio.get_running_loop().create_task(self._train(step))

    def trained_steps_first_step(self) -> int:
        return self.version  # batch k is trained into version k + 1

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
        self._save_checkpoint()
        self.training = False
        self.emit(ev.TrainingStepFinished(self.now(), self.version))
        self._offer_training_idle()
        self._maybe_train()

    def _predict_makespan(self) -> float | None:
        """The decision engine's makespan for one batch on the current active config."""
        from pearl.control.makespan import predict

        profile = getattr(self.controller.advisor, "profile", None)
        config = config_of(self.controller.state, (Status.ACTIVE,))
        if profile is None or config is None:
            return None
        p = predict(
            config,
            profile,
            self.cfg.rollout.batch_size,
            num_gpus_per_worker=self.cfg.cluster.gpus_per_worker,
        )
        return p.makespan_s if p.feasible else None

    def _offer_training_idle(self) -> None:
        if self.trained_steps >= self.cfg.trainer.num_steps:
            return
        free = tuple(g.gpu_id for g in self.training_gpus if g.gpu_id not in self.lent)
        if free:
            self.emit(ev.TrainingIdle(self.now(), free, self.now() + self.expected_rollout_s))

    # -- checkpoints ---------------------------------------------------------------------------
    def _ckpt_dir(self) -> Path:
        return self.out_dir / "checkpoint"

    def _save_checkpoint(self) -> None:
        d = self._ckpt_dir()
        d.mkdir(parents=True, exist_ok=True)
        self.trainer.save.remote(str(d / "trainer.pt"))
        done = [t.to_json() for t in self.world.trajs.values() if t.done and t.step >= self.version]
        doc = {
            "trained_steps": self.trained_steps,
            "version": self.version,
            "time_s": self.now(),
            "expected_rollout_s": self.expected_rollout_s,
            "step_metrics": self.step_metrics,
            "done_trajectories": done,
        }
        write_checkpoint(d, doc)

    def _load_checkpoint(self) -> dict[str, Any] | None:
        return read_checkpoint(self._ckpt_dir())


async def _aget(ref: Any) -> Any:
    return await ref
