"""The simulated world: GPUs, rollout workers, trajectories, environments and the trainer.

It executes the controller's commands (contract B) and emits events back, through an
outbox the driver empties after every heap entry (`take_outbox`). Physics comes from
`pearl.sim.physics.inference` (one `InferenceWorker` per rollout worker) and `pearl.sim.physics.iteration`
(KV transfer); the trajectories from `pearl.sim.trajectories`; the trainer from
`pearl.sim.trainer`; preemptible GPUs from trace playback (`pearl.sim.playback`). The
world is composed of components with the same names as the runtime world's: `workers`
(`pearl.sim.world_workers.SimWorkers`: start, weight sync, role, drain, interrupt, stop),
`trainer` (`pearl.sim.trainer`) and the trajectories (`pearl.sim.rollout`); `execute`
maps each command to the component that carries it out.

A turn's path (paper §2, §4.1): `Route` -> prefill on the prefill worker (colocated: prefill
and decode there) -> [KV transfer -> decode on the decode worker] -> `TurnFinished` ->
environment step -> `TrajectoryReady` (or `TrajectoryDone` after the last turn). When all
trajectories of a rollout step are done: `RolloutStepFinished` with telemetry, and the
trainer gets the batch.

Reconfiguration costs (paper Table 3) are drawn from the config, seeded: a worker on a
preemptible GPU takes `expansion_prep_s` to become ready and `expansion_final_s` for its
first weight sync; a worker on a borrowed training GPU takes `borrow_activation_s`; giving
training GPUs back takes `borrow_deactivation_s` (in the trainer). Workers created at time 0
(the reserved pool) start warm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.state import Gpu, Zone
from pearl.sim.config import SimConfig
from pearl.sim.core import (
    PRIO_DEFAULT,
    PRIO_GPU_GONE,
    PRIO_NOTICE,
    PRIO_OFFER,
    PRIO_PHYSICS,
    EventCore,
    Handle,
)
from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.playback import TraceAction
from pearl.sim.rollout import (
    StepRun,
    TrajRun,
    decode_started,
    interrupt_worker,
    on_completion,
    route,
    start_batch,
)
from pearl.sim.telemetry_out import worker_step_record
from pearl.sim.trainer import Trainer, TrainerCallbacks
from pearl.sim.trajectories import TrajectorySampler, step_sampler
from pearl.sim.world_workers import SimWorker, SimWorkers
from pearl.specs.hardware import get_gpu, get_model
from pearl.specs.workload import WorkloadSpec
from pearl.world.contract import CommandTable


@dataclass
class WorldStats:
    """Counters for the run summary."""

    trajectories_done: int = 0
    trajectory_tokens: int = 0
    decode_tokens: int = 0
    prefill_tokens: int = 0
    cached_prefix_tokens: int = 0
    interrupted_requests: int = 0
    reclaims: int = 0  # reclaim events that hit GPUs the policy had workers on
    bounced_routes: int = 0  # routes to a worker that was gone or not ready: handed back
    init_failures: int = 0
    makespans_s: list[float] = field(default_factory=list)
    gpu_s_by_zone: dict[str, float] = field(default_factory=dict)
    worker_gpu_s_by_zone: dict[str, float] = field(default_factory=dict)


class SimWorld:
    """See the module docstring. `actions` is the trace timeline (empty for a static budget)."""

    def __init__(
        self,
        cfg: SimConfig,
        actions: list[TraceAction],
        *,
        borrowing: bool,
        phase_events: bool = False,
    ) -> None:
        self.cfg = cfg
        self.core = EventCore(cfg.seed)
        self.model = get_model(cfg.cluster.model)
        self.gpu_spec = get_gpu(cfg.cluster.gpu)
        self.engine_config = cfg.engine.worker_config()
        # `RequestPhase` events (a turn's KV moving, its decode begun): optional in the
        # contract and changing no decision, so off by default (they cost wake-ups)
        self.phase_events = phase_events
        if phase_events:
            self.engine_config = replace(self.engine_config, report_decode_starts=True)
        self.workload = WorkloadSpec.model_validate(
            {**cfg.rollout.workload, "context_cap_tokens": cfg.rollout.max_context_tokens}
        )
        self.actions = actions
        self.borrowing = borrowing
        self.outbox: list = []
        self.gpus: dict[str, Gpu] = {}
        self.gpu_since: dict[str, float] = {}
        self.trajs: dict[str, TrajRun] = {}
        self.by_key: dict[int, TrajRun] = {}
        self.steps: dict[int, StepRun] = {}
        self.stats = WorldStats()
        # per-request run events (interrupt, resume) as `pearl run` notes them:
        # (t_s, kind, reason, detail), for the run directory (`telemetry_out.write_run_dir`)
        self.request_events: list[tuple[float, str, str, dict[str, Any]]] = []
        self._hw: dict[int, WorkerHardware] = {}
        self._next_key = 0
        self._last_makespan_s = 216.0
        self.finished_turns: list = []
        self.step_end_times_s: list[float] = []
        # step -> (its StartRolloutBatch, its last trajectory done): the makespan as
        # `pearl run` measures it, for the run directory's steps.jsonl
        self.step_spans_s: dict[int, tuple[float, float]] = {}
        self.traj_done_times_s: list[float] = []
        self._reclaimed: set[str] = set()
        self.finished_worker_steps: list = []
        n_dedicated = cfg.trace.static_gpus or cfg.cluster.num_dedicated_gpus
        per_node = cfg.cluster.gpus_per_node
        # reserved rollout and training GPUs fill servers in index order; each preemptible
        # GPU comes on a server of its own (`_apply_trace`)
        self.dedicated = tuple(
            Gpu(f"r{i}", Zone.DEDICATED, node=f"rollout{i // per_node}") for i in range(n_dedicated)
        )
        self.training_gpus = tuple(
            Gpu(f"t{i}", Zone.OVERLAP, node=f"train{i // per_node}")
            for i in range(cfg.cluster.num_training_gpus)
        )
        self._training_gpu = {g.gpu_id: g for g in self.training_gpus}
        self.trainer = Trainer(
            self.core,
            cfg.trainer,
            cfg.costs,
            gpu_ids=tuple(g.gpu_id for g in self.training_gpus),
            active_params=float(self.model.active_params),
            peak_flops_per_s=self.gpu_spec.flops_per_s,
            callbacks=TrainerCallbacks(
                on_idle=self._on_training_idle,
                on_wants=lambda ids, d: self.emit(E.TrainingWants(self.core.now_s, ids, d)),
                on_step_finished=lambda v: self.emit(E.TrainingStepFinished(self.core.now_s, v)),
                on_restored=lambda ids: self.emit(E.TrainingRestored(self.core.now_s, ids)),
            ),
            expected_ready_s=self._expected_batch_ready_s,
        )
        self.pool = SimWorkers(
            cfg=cfg,
            core=self.core,
            gpus=self.gpus,
            trainer=self.trainer,
            stats=self.stats,
            engine_config=self.engine_config,
            emit=self.emit,
            hardware=self._hardware,
            interrupt=lambda w, preserve: interrupt_worker(self, w, preserve=preserve),
        )
        self.workers = self.pool.workers  # the table rollout.py reads (the pool's own)
        self._execute = CommandTable(
            {
                C.InitWorker: self.pool.init,
                C.SyncWeights: self.pool.sync_weights,
                C.ChangeRole: self.pool.change_role,
                C.Drain: self.pool.drain,
                C.Interrupt: self.pool.interrupt,
                C.StopWorker: self.pool.stop,
                C.AdmitGroup: lambda c: None,  # routing is the controller's state
                C.ReleaseGpus: self._release_gpus,
                C.OffloadTraining: self._offload_training,
                C.RestoreTraining: self._restore_training,
                C.StartRolloutBatch: lambda c: start_batch(self, c),
                C.Route: lambda c: route(self, c),
            }
        )

    # -- driver interface ---------------------------------------------------------------
    def emit(self, event: object) -> None:
        self.outbox.append(event)

    def take_outbox(self) -> list:
        out = self.outbox
        if out:
            self.outbox = []
        return out

    def start(self) -> None:
        """Time 0: the controller starts, the trace is scheduled, training waits for batch 0."""
        for g in self.dedicated:
            self._add_gpu(g)
        # The controller already holds the reserved GPUs (its initial state) and starts on
        # its first event, `Started` (an empty offer where the controller predates it).
        started = getattr(E, "Started", None)
        self.emit(started(0.0) if started is not None else E.GpusOffered(0.0, (), None))
        for a in self.actions:
            prio = {"gone": PRIO_GPU_GONE, "notice": PRIO_NOTICE, "offer": PRIO_OFFER}[a.kind]
            self.core.schedule(a.time_s, self._trace_action(a), prio)
        self.trainer.start()

    # -- trace and trainer ----------------------------------------------------------------
    def _trace_action(self, a: TraceAction) -> Callable[[], None]:
        def run() -> None:
            now = self.core.now_s
            if a.kind == "offer":
                self._reclaimed -= set(a.gpu_ids)
                gpus = tuple(Gpu(g, Zone.PREEMPTIBLE, node=f"spot-{g}") for g in a.gpu_ids)
                for g in gpus:
                    self._add_gpu(g)
                self.emit(E.GpusOffered(now, gpus, a.expected_window_s))
            elif a.kind == "notice":
                assert a.deadline_s is not None
                self._count_reclaim(a.gpu_ids)
                self.emit(E.ReclaimNotice(now, a.gpu_ids, a.deadline_s))
            else:
                self._count_reclaim(a.gpu_ids)
                # The controller hears of the loss first, then of each request it cut short.
                self.emit(E.GpusGone(now, a.gpu_ids))
                self._gpus_gone(a.gpu_ids)

        return run

    def _count_reclaim(self, gpu_ids: tuple[str, ...]) -> None:
        """A reclaim counts once, and only if the policy has workers on those GPUs."""
        ids = set(gpu_ids) - self._reclaimed
        if ids and any(ids & set(w.gpu_ids) for w in self.workers.values()):
            self.stats.reclaims += 1
        self._reclaimed |= set(gpu_ids)

    def _on_training_idle(self, ids: tuple[str, ...], idle_until_s: float) -> None:
        if self.borrowing:
            self.emit(E.TrainingIdle(self.core.now_s, ids, idle_until_s))

    def _expected_batch_ready_s(self) -> float:
        """When the oldest unfinished rollout step should be done (last makespan as guide)."""
        open_steps = [s for s in self.steps.values() if s.num_done < len(s.traj_ids)]
        if not open_steps:
            return self.core.now_s + self._last_makespan_s
        start = min(s.start_s for s in open_steps)
        return max(self.core.now_s, start + self._last_makespan_s)

    # -- GPUs -------------------------------------------------------------------------------
    def _add_gpu(self, g: Gpu) -> None:
        self.gpus[g.gpu_id] = g
        self.gpu_since[g.gpu_id] = self.core.now_s

    def _drop_gpu(self, gpu_id: str) -> None:
        g = self.gpus.pop(gpu_id, None)
        if g is not None:
            zone = g.zone.value
            held = self.core.now_s - self.gpu_since.pop(gpu_id)
            self.stats.gpu_s_by_zone[zone] = self.stats.gpu_s_by_zone.get(zone, 0.0) + held

    def _gpus_gone(self, gpu_ids: tuple[str, ...]) -> None:
        """The provider took GPUs: workers on them die; their turns lose unsaved progress."""
        for w in self.pool.on_gpus(gpu_ids):
            self.pool.kill(w, preserve=False)
        for g in gpu_ids:
            self._drop_gpu(g)

    # -- commands -------------------------------------------------------------------------
    def execute(self, cmd: object) -> None:
        """Carry out one command; its completion comes back as a later event."""
        if type(cmd) is C.Route:  # the hot path: most commands are routes
            route(self, cmd)
            return
        self._execute(cmd)

    def _hardware(self, tp: int) -> WorkerHardware:
        if tp not in self._hw:
            self._hw[tp] = self.cfg.worker_hardware(tp)
        return self._hw[tp]

    def _release_gpus(self, cmd: C.ReleaseGpus) -> None:
        for w in self.pool.on_gpus(cmd.gpu_ids):
            self.pool.kill(w, preserve=True)
        if cmd.to == "provider":
            for g in cmd.gpu_ids:
                if g in self.gpus and self.gpus[g].zone == Zone.PREEMPTIBLE:
                    self._drop_gpu(g)

    def _offload_training(self, cmd: C.OffloadTraining) -> None:
        now = self.core.now_s
        if self.trainer.offload(tuple(cmd.gpu_ids)):
            for g in cmd.gpu_ids:
                if g not in self.gpus:
                    self.gpus[g] = self._training_gpu[g]
                    self.gpu_since[g] = now

    def _restore_training(self, cmd: C.RestoreTraining) -> None:
        ids = tuple(g for g in cmd.gpu_ids if g in self.trainer.lent)
        for w in self.pool.on_gpus(ids):
            self.pool.kill(w, preserve=True)
        for g in ids:
            self._drop_gpu(g)
        self.trainer.restore(ids)

    # -- workers: physics driving -----------------------------------------------------------
    def touch(self, w: SimWorker) -> None:
        """Reschedule the worker's next physics boundary after any change to it."""
        if w.handle is not None:
            w.handle.cancel()
            w.handle = None
        t = w.engine.next_change_time_s()
        if t != float("inf"):
            w.handle = self.core.schedule(
                max(t, self.core.now_s), lambda: self._advance(w), PRIO_PHYSICS
            )

    def _advance(self, w: SimWorker) -> None:
        w.handle = None
        if self.workers.get(w.worker_id) is not w:
            return
        for c in w.engine.advance(self.core.now_s):
            on_completion(self, w, c)
        if self.phase_events:
            for key, _ in w.engine.pop_decode_starts():
                decode_started(self, w, key)
        self.touch(w)
        self.pool.check_drained(w)

    def finish(self, until_s: float) -> None:
        """Close the books at `until_s` (GPU-seconds of GPUs and workers still alive)."""
        self.core.now_s = max(self.core.now_s, until_s)
        for w in list(self.workers.values()):
            zone = w.zone.value
            held = (until_s - w.born_s) * len(w.gpu_ids)
            self.stats.worker_gpu_s_by_zone[zone] = (
                self.stats.worker_gpu_s_by_zone.get(zone, 0.0) + held
            )
        for g in list(self.gpus):
            self._drop_gpu(g)

    # -- helpers for pearl.sim.rollout ------------------------------------------------------
    def new_key(self) -> int:
        self._next_key += 1
        return self._next_key

    def schedule(self, delay_s: float, fn: Callable[[], None], prio: int = PRIO_DEFAULT) -> Handle:
        return self.core.after(delay_s, fn, prio)

    def sampler_for(self, step: int) -> TrajectorySampler:
        """The same trajectories for the same (seed, step) whatever the policy."""
        return step_sampler(self.workload, self.cfg.seed, step)

    def hardware_of(self, w: SimWorker) -> WorkerHardware:
        return self._hardware(len(w.gpu_ids))

    def same_node(self, a: SimWorker, b: SimWorker) -> bool:
        """Whether every GPU of workers `a` and `b` is on one server (KV moves over NVLink)."""
        nodes = {self.gpus[g].node for g in (*a.gpu_ids, *b.gpu_ids) if g in self.gpus}
        return len(nodes) == 1

    def step_finished(self, s: StepRun) -> None:
        """Every trajectory of rollout step `s` is done: telemetry out, batch to the trainer."""
        now = self.core.now_s
        makespan = now - s.start_s
        self._last_makespan_s = makespan
        self.stats.makespans_s.append(makespan)
        self.step_end_times_s.append(now)
        self.step_spans_s[s.step] = (s.start_s, now)
        worker_steps = []
        for w in self.workers.values():
            rec = worker_step_record(w.engine.take_stats(now), s.step, w.engine.kv_capacity_tokens)
            if rec is not None:
                worker_steps.append(rec)
        self.finished_turns.extend(s.turns)
        self.finished_worker_steps.extend(worker_steps)
        self.emit(E.RolloutStepFinished(now, s.step, tuple(s.turns), tuple(worker_steps)))
        s.turns = []
        self.trainer.batch_ready(s.step, s.num_tokens)
