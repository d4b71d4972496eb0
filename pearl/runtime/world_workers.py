"""The real world's rollout workers: start, activate, sync, role, drain, interrupt, stop.

`RayWorkers` is `RayWorld`'s worker component (the simulator's is `SimWorkers`): it owns
the table of worker actors, the workers starting, and the `ParkingLot`, and executes the
worker commands; the world gives it the config, the engine spec, the event queue (`emit`),
the clock, the run recorder, the seeded RNG, the counters and its task spawner. Workers on training
device slots are borrowed ones (paper §4.6, §5): with `cluster.park_borrowed_workers` a
StopWorker parks them (the process stays; device state is released) and the next
InitWorker on the same slots activates the parked actor under the new worker id, falling
back to a fresh actor when activation fails. The chaos option
`cluster.worker_init_failure_rate` applies to every InitWorker, activation or start.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.runtime.parking import ParkingLot, settled
from pearl.runtime.run_config import RunConfig
from pearl.runtime.worker.api import EngineSpec

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

log = logging.getLogger(__name__)

INIT_TIMEOUT_S = 120.0


class RayWorkers:
    """The worker actors and the worker commands (see the module docstring)."""

    def __init__(
        self,
        *,
        cfg: RunConfig,
        engine_spec: EngineSpec,
        emit: Callable[[Any], None],
        now: Callable[[], float],
        on_record: Callable[[str, Any], None],
        rng: random.Random,
        counters: dict[str, int],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task],
        training_slots: tuple[str, ...] = (),
    ) -> None:
        self.cfg = cfg
        self.engine_spec = engine_spec
        self.emit = emit
        self.now = now
        self.on_record = on_record
        self.rng = rng
        self.counters = counters
        self.spawn = spawn
        self.workers: dict[str, ActorHandle] = {}  # worker id -> its actor handle
        self.starting: set[str] = set()  # InitWorker executed, not ready/failed/stopped yet
        self.slots_of: dict[str, tuple[str, ...]] = {}
        # slot -> the trainer's release call (ObjectRef) a worker there must wait for
        self.device_free: dict[str, ObjectRef] = {}
        self.activating: dict[str, ObjectRef] = {}  # worker id -> its activate_as call in flight
        self.lot = ParkingLot(
            training_slots,
            enabled=cfg.cluster.park_borrowed_workers,
            start=self._start,
            spawn=spawn,
            kill=kill_handle,
            on_record=on_record,
            counters=counters,
        )

    def init(self, c: cmd.InitWorker) -> None:
        self.starting.add(c.worker_id)
        self.slots_of[c.worker_id] = tuple(c.gpu_ids)
        self.spawn(self._init_worker(c))

    async def _init_worker(self, c: cmd.InitWorker) -> None:
        """Activate the worker parked on the slots if there is one, else start a new actor;
        WorkerReady or WorkerInitFailed follows (nothing if it was stopped meanwhile)."""
        if self.rng.random() < self.cfg.cluster.worker_init_failure_rate:
            await asyncio.sleep(0.2)
            self.starting.discard(c.worker_id)
            self.slots_of.pop(c.worker_id, None)
            self.counters["init_failures"] += 1
            self.emit(
                ev.WorkerInitFailed(self.now(), c.worker_id, "injected start failure (chaos)")
            )
            return
        slots = tuple(c.gpu_ids)
        t0 = time.perf_counter()
        await self._device_free(slots)
        t1 = time.perf_counter()
        if c.worker_id not in self.starting:  # stopped while the trainer released
            self._abandoned(c, "the trainer's release", t0, t1, t1)
            return
        if self.lot.owns(slots):
            handle = await self.lot.take(slots)
            t2 = time.perf_counter()
            if c.worker_id not in self.starting:  # stopped while waiting for the slots
                if handle is not None:
                    self.lot.put_back(slots, handle)
                self._abandoned(c, "the slots' park or pre-start", t0, t1, t2)
                return
            waits = {"trainer_release_wait_ms": _ms(t1 - t0), "slot_wait_ms": _ms(t2 - t1)}
            if handle is not None and await self._activate(c, handle, waits):
                return
            if c.worker_id not in self.starting:
                return
        await self._start_fresh(c)

    def _abandoned(self, c: cmd.InitWorker, stage: str, t0: float, t1: float, t2: float) -> None:
        self.on_record(
            "init_abandoned",
            {
                "reason": f"{c.worker_id} stopped while waiting for {stage}",
                "worker": c.worker_id,
                "gpus": list(c.gpu_ids),
                "trainer_release_wait_ms": _ms(t1 - t0),
                "slot_wait_ms": _ms(t2 - t1),
            },
        )

    async def _activate(
        self, c: cmd.InitWorker, handle: Any, waits: dict[str, float] | None = None
    ) -> bool:
        """Unpark `handle` as `c.worker_id`; False: it failed and was killed (start anew)."""
        self.workers[c.worker_id] = handle
        t_call = time.perf_counter()
        ref = handle.activate_as.remote(c.worker_id, c.role)
        self.activating[c.worker_id] = ref  # a stop meanwhile parks only after it
        try:
            ms = await asyncio.wait_for(_aget(ref), INIT_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - fall back to a fresh worker
            log.info("activation of %s failed: %s", c.worker_id, err)
            self.on_record("error", f"activation of {c.worker_id} failed: {err}"[:300])
            if c.worker_id in self.workers:
                self.kill(c.worker_id)
            return False
        finally:
            self.activating.pop(c.worker_id, None)
        waits = {**(waits or {}), "call_ms": _ms(time.perf_counter() - t_call)}
        if c.worker_id not in self.workers:  # stopped while activating: the stop parks it
            self.on_record(
                "init_abandoned",
                {
                    "reason": f"{c.worker_id} stopped while activating",
                    "worker": c.worker_id,
                    "gpus": list(c.gpu_ids),
                    "activation_ms": round(float(ms), 2),
                    **waits,
                },
            )
            return True
        self.starting.discard(c.worker_id)
        self.lot.record_activation(c.worker_id, tuple(c.gpu_ids), str(c.role), ms, waits)
        self.emit(ev.WorkerReady(self.now(), c.worker_id))
        return True

    async def _start_fresh(self, c: cmd.InitWorker) -> None:
        try:
            handle = self._start(c.worker_id, c.role, tuple(c.gpu_ids))
            self.workers[c.worker_id] = handle
            await asyncio.wait_for(_aget(handle.ready.remote()), INIT_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - any start failure cancels the group
            if c.worker_id not in self.workers:
                return  # stopped on purpose while starting (its group was cancelled)
            self.starting.discard(c.worker_id)
            self.slots_of.pop(c.worker_id, None)
            self.counters["init_failures"] += 1
            self.kill(c.worker_id)
            self.emit(
                ev.WorkerInitFailed(self.now(), c.worker_id, f"{type(err).__name__}: {err}"[:200])
            )
            return
        if c.worker_id not in self.workers:
            return  # stopped while its engine was being built
        self.starting.discard(c.worker_id)
        self.emit(ev.WorkerReady(self.now(), c.worker_id))

    def _start(
        self, worker_id: str, role: Any, slots: tuple[str, ...], *, released: bool = False
    ) -> Any:
        """Start a worker actor; `released`: its engine allocates nothing on the device
        until activated (a worker pre-started on a training device the trainer holds)."""
        from pearl.runtime.worker.rollout_worker import start_worker

        spec = replace(self.engine_spec, start_released=True) if released else self.engine_spec
        return start_worker(
            worker_id,
            role,
            slots,
            spec,
            use_cuda=self.cfg.cluster.use_cuda,
            transport=self.cfg.cluster.kv_transport,
        )

    async def _device_free(self, slots: tuple[str, ...]) -> None:
        """On CUDA devices, wait until the trainer has moved its state off `slots` (its
        release call). CPU slots share host memory, so nothing waits there: the trainer's
        release queues behind its checkpoint save and took ~3 s in the demo, as long as a
        whole borrow window."""
        refs = {id(r): r for g in slots if (r := self.device_free.pop(g, None)) is not None}
        if not self.cfg.cluster.use_cuda:
            return
        for ref in refs.values():
            try:
                await asyncio.wait_for(_aget(ref), INIT_TIMEOUT_S)
            except Exception as err:  # noqa: BLE001 - a failed release frees nothing more
                log.info("trainer release failed: %s", err)

    def prestart_parked(self) -> int:
        """Start one parked worker per `gpus_per_worker` training slots (run start, when the
        policy may borrow): the first borrow is then an activation. Returns how many."""
        if not self.lot.enabled:
            return 0
        k = self.cfg.cluster.gpus_per_worker
        slots = sorted(self.lot.training_slots, key=_slot_key)
        groups = [tuple(slots[i : i + k]) for i in range(0, len(slots) - k + 1, k)]
        for g in groups:
            self.lot.prestart(g)
        return len(groups)

    def parks_pending(self, slots: tuple[str, ...]) -> list[asyncio.Future]:
        """Parks (and pre-starts) still holding device state on any of `slots`."""
        return self.lot.waiting(tuple(slots))

    def sync_weights(self, c: cmd.SyncWeights) -> None:
        async def run() -> None:
            h = self.workers.get(c.worker_id)
            if h is None:
                return
            try:
                version = await _aget(h.sync_weights.remote(c.version))
            except Exception as err:  # noqa: BLE001 - its node is gone: GpusGone follows
                log.info("sync of %s failed: %s", c.worker_id, err)
                return
            if self.workers.get(c.worker_id) is h:  # not stopped meanwhile (the book has
                # dropped a stopped worker: its sync would be an event about no worker)
                self.emit(ev.WeightsSynced(self.now(), c.worker_id, version))

        self.spawn(run())

    def change_role(self, c: cmd.ChangeRole) -> None:
        h = self.workers.get(c.worker_id)
        if h is None:
            return
        pending = self.activating.get(c.worker_id)
        if pending is None:
            h.set_role.remote(c.role.value)
            return

        async def after_activation() -> None:  # activate_as sets the role it was given
            await settled(pending)
            if self.workers.get(c.worker_id) is h and h is not None:
                h.set_role.remote(c.role.value)

        self.spawn(after_activation())

    def drain(self, c: cmd.Drain) -> None:
        async def run() -> None:
            h = self.workers.get(c.worker_id)
            if h is not None:
                try:
                    await _aget(h.drain.remote())
                except Exception:  # noqa: BLE001 - a dead worker holds nothing
                    pass
            self.emit(ev.WorkerDrained(self.now(), c.worker_id))

        self.spawn(run())

    def interrupt(self, c: cmd.Interrupt) -> None:
        h = self.workers.get(c.worker_id)
        if h is not None:  # in-flight turns come back interrupted through their own calls
            h.interrupt.remote()

    def stop(self, c: cmd.StopWorker) -> None:
        """A worker on training slots is parked (the process stays, §4.6); others end."""
        self.starting.discard(c.worker_id)
        slots = self.slots_of.pop(c.worker_id, ())
        h = self.workers.get(c.worker_id)
        if h is not None and self.lot.owns(slots):
            del self.workers[c.worker_id]
            # an async actor may run calls out of order: park after a pending activation
            after = self.activating.pop(c.worker_id, None)
            reason = f"{c.worker_id} stopped: slots to training"
            self.lot.park(c.worker_id, h, slots, reason=reason, after=after)
            return
        self.kill(c.worker_id)

    def kill(self, worker_id: str) -> None:
        h = self.workers.pop(worker_id, None)
        if h is not None:
            kill_handle(h)


async def _aget(ref: Any) -> Any:
    return await ref


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


def kill_handle(handle: Any) -> None:
    import ray

    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # noqa: BLE001 - already dead with its node
        pass


def _slot_key(slot: str) -> tuple[str, int]:
    """`t10` after `t9`: sort slot ids by prefix, then number."""
    head = slot.rstrip("0123456789")
    tail = slot[len(head) :]
    return head, int(tail) if tail else -1
