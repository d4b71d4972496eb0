"""The simulated world's rollout workers: start, weight sync, role, drain, interrupt, stop.

`SimWorkers` is the world's worker component: it owns the worker table and executes the
worker commands; the world (pearl/sim/world.py) gives it the event core, config, GPU
table, trainer and stats it reads, and three callables (emit an event, the hardware of a
tensor-parallel degree, interrupt a worker's requests). `SimWorker` (a worker's engine,
GPUs and lifecycle flags) lives here too. Start-up and first-sync delays are the
reconfiguration costs of the world's docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.state import Gpu, Role, Zone
from pearl.sim.config import SimConfig
from pearl.sim.core import PRIO_COMPLETION, EventCore, Handle
from pearl.sim.physics.inference import InferenceWorker
from pearl.sim.physics.inference_types import WorkerConfig
from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.trainer import Trainer

if TYPE_CHECKING:
    from pearl.sim.world import WorldStats


@dataclass(eq=False)
class SimWorker:
    """A rollout worker of the world: its engine, GPUs and lifecycle."""

    worker_id: str
    gpu_ids: tuple[str, ...]
    zone: Zone
    engine: InferenceWorker
    group_id: str
    born_s: float
    ready: bool = False
    synced_once: bool = False
    draining: bool = False
    version: int = -1
    handle: Handle | None = None
    pending_role: Role | None = None  # a role change waiting for the worker to empty
    incoming: set[str] = field(default_factory=set)  # trajectories in KV transfer to it


class SimWorkers:
    """The worker table and the worker commands (see the module docstring)."""

    def __init__(
        self,
        *,
        cfg: SimConfig,
        core: EventCore,
        gpus: dict[str, Gpu],
        trainer: Trainer,
        stats: WorldStats,
        engine_config: WorkerConfig,
        emit: Callable[[object], None],
        hardware: Callable[[int], WorkerHardware],
        interrupt: Callable[[SimWorker, bool], None],
    ) -> None:
        self.cfg = cfg
        self.core = core
        self.gpus = gpus
        self.trainer = trainer
        self.stats = stats
        self.engine_config = engine_config
        self.emit = emit
        self._hardware = hardware
        self._interrupt = interrupt
        self.workers: dict[str, SimWorker] = {}

    def on_gpus(self, gpu_ids: Iterable[str]) -> list[SimWorker]:
        """The workers on any of `gpu_ids`."""
        ids = set(gpu_ids)
        return [w for w in self.workers.values() if ids & set(w.gpu_ids)]

    def init(self, cmd: C.InitWorker) -> None:
        now = self.core.now_s
        missing = [g for g in cmd.gpu_ids if g not in self.gpus]
        lent = self.trainer.lent
        on_training = [g for g in cmd.gpu_ids if g in self.trainer.gpu_ids]
        if on_training and any(g not in lent for g in on_training):
            missing += [g for g in on_training if g not in lent]
        if missing or cmd.worker_id in self.workers:
            why = "GPU not available: " + ",".join(missing) if missing else "duplicate worker id"
            self.core.after(0.0, lambda: self._init_failed(cmd.worker_id, why), PRIO_COMPLETION)
            return
        zone = Zone.OVERLAP if on_training else self.gpus[cmd.gpu_ids[0]].zone
        engine = InferenceWorker(
            cmd.worker_id,
            self._hardware(len(cmd.gpu_ids)),
            cmd.role,
            self.engine_config,
            now_s=now,
        )
        w = SimWorker(cmd.worker_id, tuple(cmd.gpu_ids), zone, engine, cmd.group_id, now)
        self.workers[w.worker_id] = w
        costs = self.cfg.costs
        if zone == Zone.OVERLAP:  # a borrow always pays its activation, even at time 0
            delay = self.core.uniform(
                costs.borrow_activation_s.low_s, costs.borrow_activation_s.high_s
            )
        elif now == 0.0:  # the pool the segment starts with is up already
            delay = 0.0
        else:
            delay = self.core.uniform(costs.expansion_prep_s.low_s, costs.expansion_prep_s.high_s)
        fails = costs.init_failure_prob > 0 and self.core.rng.random() < costs.init_failure_prob
        self.core.after(delay, lambda: self._init_done(w, fails), PRIO_COMPLETION)

    def _init_failed(self, worker_id: str, reason: str) -> None:
        self.stats.init_failures += 1
        self.emit(E.WorkerInitFailed(self.core.now_s, worker_id, reason))

    def _init_done(self, w: SimWorker, fails: bool) -> None:
        if self.workers.get(w.worker_id) is not w:
            return  # stopped meanwhile
        if fails:
            self.remove(w)
            self._init_failed(w.worker_id, "initialisation failed")
            return
        w.ready = True
        self.emit(E.WorkerReady(self.core.now_s, w.worker_id))

    def sync_weights(self, cmd: C.SyncWeights) -> None:
        w = self.workers.get(cmd.worker_id)
        if w is None:
            return
        costs, now = self.cfg.costs, self.core.now_s
        if not w.synced_once:
            w.synced_once = True
            if w.born_s == 0.0 or w.zone == Zone.OVERLAP:
                delay = 0.0  # warm start / weights already on the training GPUs
            else:
                r = costs.expansion_final_s
                delay = self.core.uniform(r.low_s, r.high_s)
        else:
            r = self.cfg.trainer.weight_sync_s
            delay = self.core.uniform(r.low_s, r.high_s)
        version = min(cmd.version, self.trainer.version)

        def done() -> None:
            if self.workers.get(w.worker_id) is w:
                w.version = max(w.version, version)
                self.emit(E.WeightsSynced(self.core.now_s, w.worker_id, version))

        self.core.schedule(now + delay, done, PRIO_COMPLETION)

    def change_role(self, cmd: C.ChangeRole) -> None:
        w = self.workers.get(cmd.worker_id)
        if w is None:
            return
        w.pending_role = None
        if w.engine.role == cmd.role:
            return
        if w.engine.num_in_flight or w.incoming:
            # Requests in flight finish where they are; the role applies once it is empty.
            w.pending_role = cmd.role
            return
        w.engine.set_role(cmd.role)

    def drain(self, cmd: C.Drain) -> None:
        w = self.workers.get(cmd.worker_id)
        if w is None:
            return
        w.draining = True
        self.check_drained(w)

    def interrupt(self, cmd: C.Interrupt) -> None:
        w = self.workers.get(cmd.worker_id)
        if w is not None:
            self._interrupt(w, True)

    def stop(self, cmd: C.StopWorker) -> None:
        w = self.workers.get(cmd.worker_id)
        if w is not None:
            self.kill(w, preserve=True)

    def check_drained(self, w: SimWorker) -> None:
        if w.draining and not w.engine.num_in_flight and not w.incoming:
            w.draining = False
            self.emit(E.WorkerDrained(self.core.now_s, w.worker_id))
        if w.pending_role is not None and not w.engine.num_in_flight and not w.incoming:
            w.engine.set_role(w.pending_role)
            w.pending_role = None

    def kill(self, w: SimWorker, *, preserve: bool) -> None:
        self._interrupt(w, preserve)
        self.remove(w)

    def remove(self, w: SimWorker) -> None:
        if w.handle is not None:
            w.handle.cancel()
        self.workers.pop(w.worker_id, None)
        zone = w.zone.value
        held = (self.core.now_s - w.born_s) * len(w.gpu_ids)
        self.stats.worker_gpu_s_by_zone[zone] = (
            self.stats.worker_gpu_s_by_zone.get(zone, 0.0) + held
        )
