"""The runtime driver: the shared controller driving real Ray actors (docs/architecture.md).

The loop is the simulator's (`pearl.world.loop.drive`), on a `WallClock`: take the next
world event and hand it to the `Dispatcher` (`pearl.world.dispatch`, the simulator's step
too), which gives it to the controller and executes the commands it returns; each
command's completion is a later event.
Around it the driver plays the availability trace on a local multi-node Ray cluster,
schedules the trainer (asynchronous GRPO with bounded staleness; its idle windows are
offered to the controller for borrowing and its devices are always returned before it
trains), records everything in the run directory and checkpoints after every step.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.control.state import Gpu, Zone
from pearl.errors import InputError
from pearl.runtime.control_setup import build_controller, configured_policy
from pearl.runtime.lending import TrainingLending
from pearl.runtime.pipeline import TrainingPipeline, checkpoint_dir, load_checkpoint
from pearl.runtime.run_config import RunConfig, dump_run_config
from pearl.runtime.run_log import RunLog
from pearl.runtime.snapshots import REGISTRY_NAME as REGISTRY
from pearl.runtime.trace_player import TracePlayer, load_node_actions
from pearl.runtime.trainer.grpo_trainer import GrpoConfig
from pearl.runtime.trajectory import RuntimeTrajectory
from pearl.runtime.wall_clock import WallClock
from pearl.world.dispatch import Dispatcher
from pearl.world.loop import drive

SHUTDOWN_GRACE_S = 5.0  # how long cancelled tasks get to clean up before Ray stops


def run(
    cfg: RunConfig,
    *,
    out_dir: Path,
    resume: bool = False,
    live: bool = True,
    config_dir: Path | None = None,
) -> dict[str, Any]:
    """Run (or resume) a whole training run; returns its summary (also in metrics.json)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    driver = RunDriver(cfg, Path(out_dir), resume=resume, live=live, config_dir=config_dir)
    return asyncio.run(driver.main())


class RunDriver:
    """One run: the controller, the `RayWorld` it commands, and the driver's own components,
    the `TrainingPipeline` (batches to the trainer), the `TracePlayer` (the availability
    trace on the local cluster), built in `_run` once Ray is up, and the `RunLog` (what the
    run directory records as the run goes)."""

    def __init__(
        self, cfg: RunConfig, out_dir: Path, *, resume: bool, live: bool, config_dir: Path | None
    ) -> None:
        self.cfg = cfg
        self.out_dir = out_dir
        self.resume = resume
        self.live_enabled = live
        self.config_dir = config_dir
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.t0 = time.monotonic()
        self.time_offset_s = 0.0
        self.training_gpus = tuple(
            Gpu(f"t{i}", Zone.OVERLAP, "training") for i in range(cfg.cluster.num_training_gpus)
        )

    # -- clock and events -----------------------------------------------------------------
    def now(self) -> float:
        return self.time_offset_s + time.monotonic() - self.t0

    def emit(self, event: Any) -> None:
        self.queue.put_nowait(event)

    # -- set-up ---------------------------------------------------------------------------
    async def main(self) -> dict[str, Any]:
        from pearl.report.rundir import METRICS_FILE, RunRecorder

        cfg = self.cfg
        # bad input is refused before anything is started or written
        self.node_actions = load_node_actions(cfg, self.config_dir)
        if cfg.model.checkpoint_dir is not None:  # config.json and the weights' headers
            from pearl.runtime.engine.checkpoint import check_checkpoint

            check_checkpoint(cfg.model.checkpoint_dir)
        ckpt = load_checkpoint(self.out_dir) if self.resume else None
        if ckpt is not None and int(ckpt["trained_steps"]) >= cfg.trainer.num_steps:
            # a finished run: resuming would train nothing and overwrite its summary, so
            # its summary is the answer (one killed after its last step, before its
            # summary was written, does go on: that ends the run and writes the summary)
            kept = _finished_summary(self.out_dir / METRICS_FILE)
            if kept is not None:
                done = int(ckpt["trained_steps"])
                kept["note"] = (
                    f"the run had already trained all {done} steps: nothing was run or "
                    f"changed; --steps N with N > {done} trains further"
                )
                return kept
        self.recorder = RunRecorder(self.out_dir, dump_run_config(cfg), resume=self.resume)
        self.run_log = RunLog(self.recorder, self.now)
        self._start_ray()
        try:
            return await self._run(ckpt)
        finally:
            await self._shutdown()

    def _start_ray(self) -> None:
        from pearl.runtime.local_cluster import LocalCluster, connect

        cfg = self.cfg.cluster
        self.cluster = None
        if cfg.address is None:
            self.cluster = LocalCluster(head_cpus=2)
            self.cluster.add_node(
                "dedicated", Zone.DEDICATED, [f"d{i}" for i in range(cfg.num_dedicated_gpus)]
            )
            self.cluster.add_node("training", Zone.OVERLAP, [g.gpu_id for g in self.training_gpus])
            self.cluster.connect(namespace=f"pearl-{os.getpid()}")
        else:
            connect(cfg.address, namespace=f"pearl-{os.getpid()}")

    async def _run(self, ckpt: dict[str, Any] | None) -> dict[str, Any]:

        from pearl.runtime.engine import ByteTokenizer, ModelConfig
        from pearl.runtime.live import LiveView
        from pearl.runtime.snapshots import get_registry
        from pearl.runtime.trainer.actor import start_trainer
        from pearl.runtime.worker.api import EngineSpec
        from pearl.runtime.world import RayWorld

        cfg = self.cfg
        model_cfg = None
        if cfg.model.checkpoint_dir is None:
            model_cfg = ModelConfig.tiny(**cfg.model.tiny_overrides)
        self.registry = get_registry(name=REGISTRY, keep=cfg.rollout.max_staleness + 3)
        tcfg = GrpoConfig(
            lr=cfg.trainer.lr,
            clip_eps=cfg.trainer.clip_eps,
            kl_coef=cfg.trainer.kl_coef,
            micro_batch_size=cfg.trainer.micro_batch_size,
        )
        self.trainer = start_trainer(
            {"num_cpus": 0, "resources": {"pearl_zone_overlap": 0.001}},
            model_cfg,
            tcfg,
            init_seed=cfg.model.init_seed,
            checkpoint_dir=cfg.model.checkpoint_dir,
            registry_name=REGISTRY,
            pad_id=ByteTokenizer().pad_token_id,
            torch_threads=cfg.engine.torch_threads,
        )
        version, trained_steps, step_metrics, expected_rollout_s = 0, 0, [], 30.0
        if ckpt is not None:
            trainer_file = checkpoint_dir(self.out_dir) / ckpt["trainer_file"]
            version = await _aget(self.trainer.load.remote(str(trainer_file)))
            if version != int(ckpt["version"]):  # a pair a crash tore (before 2026-12-07)
                raise InputError(
                    str(trainer_file),
                    f"holds weight version {version}, driver.json version {ckpt['version']}",
                    field="version",
                )
            trained_steps = int(ckpt["trained_steps"])
            step_metrics = list(ckpt["step_metrics"])
            expected_rollout_s = float(ckpt["expected_rollout_s"])
            self.time_offset_s = float(ckpt["time_s"])
            self.run_log.note(
                "resume",
                f"run resumed from its checkpoint after step {trained_steps} (version {version})",
            )
        version = await _aget(self.trainer.publish.remote())
        spec = EngineSpec(
            model_config=model_cfg,
            checkpoint_dir=cfg.model.checkpoint_dir,
            seed=cfg.model.init_seed,  # the trainer's initial weights are version 0 too
            num_kv_blocks=cfg.engine.num_kv_blocks,
            block_size=cfg.engine.block_size,
            max_num_batched_tokens=cfg.engine.max_num_batched_tokens,
            max_num_seqs=cfg.engine.max_num_seqs,
            max_model_len=cfg.rollout.max_context_tokens + cfg.rollout.max_new_tokens,
            torch_threads=cfg.engine.torch_threads,
            backend=cfg.engine.backend,
            kv_cache_bytes=cfg.engine.kv_cache_mb << 20,
        )
        trainer = self.trainer
        self.world = RayWorld(
            cfg,
            spec,
            emit=self.emit,
            now=self.now,
            on_record=self.run_log.record,
            training_slots=tuple(g.gpu_id for g in self.training_gpus),
            training=lambda pool: TrainingLending(
                trainer=trainer,
                slots=pool,
                emit=self.emit,
                now=self.now,
                note=self.run_log.note,
                last_decision=self.run_log.last_decision,
                on_returned=lambda: self.pipeline.maybe_train(),
            ),
        )
        assert self.world.training is not None
        self.lending = self.world.training
        if ckpt is not None:
            self.world.trajectories.restored_done = {
                d["traj_id"]: RuntimeTrajectory.from_json(d) for d in ckpt["done_trajectories"]
            }
        policy = configured_policy(cfg)
        if policy.borrow != "never":  # overlap workers exist from the start, parked (§5)
            self.world.pool.prestart_parked()
        self.controller, self.switch_costs = build_controller(
            cfg, policy, model_cfg, self.training_gpus, version
        )
        self.run_log.attach(self.controller)
        # the step the simulator's driver repeats too: event -> controller -> commands -> world
        self.dispatcher = Dispatcher(
            self.world,
            self.controller,
            self.now,
            keep_history=False,
            keep_commands=False,
            before_execute=self._before_execute,
        )
        self.pipeline = TrainingPipeline(
            cfg=cfg,
            out_dir=self.out_dir,
            world=self.world,
            lending=self.lending,
            trainer=trainer,
            controller=self.controller,
            recorder=self.recorder,
            emit=self.emit,
            now=self.now,
            training_gpus=self.training_gpus,
            version=version,
            trained_steps=trained_steps,
            step_metrics=step_metrics,
            expected_rollout_s=expected_rollout_s,
        )
        due = [a for a in self.node_actions if a.at_s >= self.time_offset_s]
        self.player = None
        if due:
            assert self.cluster is not None  # a trace plays only on a local cluster
            self.player = TracePlayer(
                due, cluster=self.cluster, emit=self.emit, now=self.now, note=self.run_log.note
            )
        pump = asyncio.get_running_loop().create_task(self.world.trajectories.pump_env())
        self.t0 = time.monotonic()  # the run's clock starts when the cluster is up
        self.run_log.start()
        self.emit(ev.Started(self.now()))
        self.pipeline.offer_training_idle()
        with LiveView(enabled=self.live_enabled) as self.live:
            try:
                await self._loop()
                lent = self.lending.lent
                if lent:  # the run is over: borrowed training devices go back too
                    deadline = self.now() + self.cfg.trainer.return_grace_s
                    self.lending.wants_deadline = deadline
                    self._handle(ev.TrainingWants(self.now(), tuple(sorted(lent)), deadline))
                    while lent and self.now() < deadline:  # parks finish, returns noted
                        await asyncio.sleep(0.05)
                await self.pipeline.checkpointed()  # the last step's checkpoint is whole
            finally:
                pump.cancel()
        return self._finish()

    # -- the loop ---------------------------------------------------------------------------
    async def _loop(self) -> None:
        """The one driver loop of both worlds (`pearl.world.loop.drive`) on the wall clock."""
        clock = WallClock(
            self.queue, self.now, self.player, stale=self.world.trajectories.flights.is_stale
        )
        loop = asyncio.get_running_loop().create_task(
            drive(
                clock, self._handle, done=lambda: self.pipeline.done, after_step=self._refresh_live
            )
        )
        failure = self.pipeline.failure
        waiters: set[asyncio.Future[Any]] = {loop, failure}
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if failure.done():  # the trainer died or a checkpoint could not be written
            loop.cancel()
            raise failure.result()
        await loop

    def _handle(self, event: Any) -> None:
        before = self.controller.state
        self.dispatcher.handle(event)
        after = self.controller.state
        self.run_log.after_event(before, after)
        if isinstance(event, ev.TrajectoryDone):
            self.pipeline.on_trajectory_done(event)

    def _before_execute(self, c: Any) -> None:
        """The driver's own bookkeeping of a command, just before the world executes it."""
        self.run_log.before_command(c)
        if isinstance(c, cmd.StartRolloutBatch):
            self.pipeline.on_batch_started(c.step)

    # -- live view and the end -------------------------------------------------------------------
    def _refresh_live(self) -> None:
        state = self.controller.state
        by: dict[str, dict[str, int]] = {}
        for g in state.gpus:
            kind, _ = state.condition(g.gpu_id)
            by.setdefault(g.zone.value, {}).setdefault(kind, 0)
            by[g.zone.value][kind] += 1
        p = self.pipeline
        done = sum(1 for t in self.world.trajs.values() if t.done and t.step == p.version)
        last = p.step_metrics[-1]["reward_mean"] if p.step_metrics else None
        self.live.update(
            step=p.trained_steps,
            num_steps=self.cfg.trainer.num_steps,
            reward=last,
            trajectories_done=done,
            batch_size=self.cfg.rollout.batch_size,
            gpus_by_zone_role=by,
            last_decision=self.run_log.last_decision(None),
            events=self.run_log.recent[-5:],
        )

    def _finish(self) -> dict[str, Any]:
        p = self.pipeline
        rewards = [m["reward_mean"] for m in p.step_metrics]
        k = max(1, len(rewards) // 5)
        summary = {
            "steps": len(p.step_metrics),
            "final_version": p.version,
            "reward_first_fifth": sum(rewards[:k]) / k if rewards else None,
            "reward_last_fifth": sum(rewards[-k:]) / k if rewards else None,
            "wall_s": self.now(),
            "late_returns": self.lending.late_returns,
            "truncated_trajectories": sum(
                int(m.get("truncated_trajectories") or 0) for m in p.step_metrics
            ),
            "counters": dict(self.world.counters),
            "ignored_events": len(self.controller.ignored),
            "stale_turn_events": self.world.trajectories.flights.num_stale,
            "commands_by_kind": dict(self.dispatcher.log.commands_by_kind),
            **self.switch_costs.summary(),
        }
        summary["report"] = str(self.recorder.finish(summary))
        return summary

    async def _shutdown(self) -> None:
        import ray

        # Cancel this run's other tasks and let their clean-up finish while Ray is still
        # up: a Ray call after ray.shutdown() would quietly start (or join) another Ray,
        # and the next run in this process would then fail to connect.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        if others:
            await asyncio.wait(others, timeout=SHUTDOWN_GRACE_S)
        world = getattr(self, "world", None)
        if world is not None:
            await world.shutdown()
        if self.cluster is not None:
            self.cluster.shutdown()
        elif ray.is_initialized():
            ray.shutdown()


def _finished_summary(path: Path) -> dict[str, Any] | None:
    """The summary a finished run wrote in metrics.json; None if there is none to read."""
    try:
        summary = json.loads(path.read_text())["summary"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return summary if isinstance(summary, dict) else None


async def _aget(ref: Any) -> Any:
    return await ref
