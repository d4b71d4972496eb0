"""Control calls of a rollout worker: role, drain, interrupt, device state, weights, parking.

`WorkerControl` is the part of `RolloutWorker` (pearl/runtime/worker/rollout_worker.py) that carries out
the control calls over the worker's shared `WorkerCore`, answering aborted turns through
the `StepLoop`; the actor forwards each call to it. Every call that touches the
engine takes the worker's lock, so it runs between two engine steps (paper §4.4: role
changes in place; §4.5: interrupt with preservation; §4.6: release/restore of device state
while the process stays; §5: background weight pull; §4.6/§5: overlap workers are kept
alive across handoffs, parked with their device state released and activated again under
a new worker id).
"""

from __future__ import annotations

import asyncio
import time

from pearl.control.state import Role
from pearl.runtime.engine import RequestRejected
from pearl.runtime.snapshots import Snapshot, fetch_weights
from pearl.runtime.worker.api import INTERRUPTED, TurnResult
from pearl.runtime.worker.loop import StepLoop, WorkerCore


class WorkerControl:
    """The control calls (see the module doc)."""

    def __init__(self, core: WorkerCore, loop: StepLoop) -> None:
        self.core = core
        self.loop = loop

    async def set_role(self, role: Role | str) -> float:
        """Change the role in place; returns the time it took in ms. See the module doc."""
        t0 = time.perf_counter()
        async with self.core.lock:
            self.core.role = Role(role)
        return (time.perf_counter() - t0) * 1000.0

    async def drain(self) -> int:
        """Stop admitting; return when every turn in flight is answered (how many were)."""
        self.core.accepting = False
        waiting = [live.done for live in self.core.live.values() if live.done is not None]
        if waiting:
            await asyncio.gather(*waiting)
        return len(waiting)

    def activate(self) -> None:
        self.core.accepting = True

    async def interrupt(self, request_ids: tuple[str, ...] | None = None) -> list[TurnResult]:
        """Abort turns in flight (all by default), keeping what each generated."""
        return await self.abort(request_ids, INTERRUPTED)

    async def abort(self, request_ids: tuple[str, ...] | None, reason: str) -> list[TurnResult]:
        async with self.core.lock:
            return self._abort_locked(request_ids, reason)

    def _abort_locked(self, request_ids: tuple[str, ...] | None, reason: str) -> list[TurnResult]:
        results: list[TurnResult] = []
        for rid in list(self.core.live if request_ids is None else request_ids):
            live = self.core.live.get(rid)
            if live is None:
                continue
            try:
                out = self.core.engine.abort(rid)
                tokens, logprobs = out.output_token_ids, out.output_logprobs
                cached = out.num_cached_prefix_tokens
            except RequestRejected:  # not in the engine (any more)
                tokens, logprobs, cached = (), (), 0
            self.loop.finish(live, tokens, logprobs, reason, cached=cached)
            assert live.done is not None  # every live turn has its future (admission)
            results.append(live.done.result())
        return results

    async def release(self) -> list[TurnResult]:
        """Free device state (weights and KV); live turns are interrupted and returned."""
        async with self.core.lock:  # one hold: no turn can slip in between abort and release
            results = self._abort_locked(None, INTERRUPTED)
            await asyncio.to_thread(self.core.engine.release)
        return results

    async def restore(self) -> float:
        """Rebuild device state; returns the time it took in ms."""
        t0 = time.perf_counter()
        async with self.core.lock:
            await asyncio.to_thread(self.core.engine.restore)
        return (time.perf_counter() - t0) * 1000.0

    async def park(self) -> float:
        """Park the worker: stop admitting, interrupt every turn in flight (each caller gets
        its `interrupted` result with everything generated so far, as with `interrupt()`),
        free device state (weights and KV); the process stays alive and keeps the weights
        off the device. Returns the time it took in ms. Idempotent."""
        t0 = time.perf_counter()
        self.core.accepting = False
        self.core.parked = True
        async with self.core.lock:  # one hold: no turn can slip in between abort and release
            self._abort_locked(None, INTERRUPTED)
            await asyncio.to_thread(self.core.engine.release)
        return (time.perf_counter() - t0) * 1000.0

    async def activate_as(self, worker_id: str, role: Role | str) -> float:
        """Unpark under a new identity: take `worker_id` and `role` (results and telemetry
        records from now on carry the new id), restore device state and admit again.
        The weights are those kept at park (or loaded since): the caller syncs them to the
        current version afterwards. Returns the time it took in ms."""
        t0 = time.perf_counter()
        async with self.core.lock:
            await asyncio.to_thread(self.core.engine.restore)
            self.core.worker_id = worker_id
            self.core.sink.worker_id = worker_id
            self.core.role = Role(role)
            self.core.parked = False
            self.core.accepting = True
        return (time.perf_counter() - t0) * 1000.0

    async def sync_weights(self, target: int | Snapshot) -> int:
        """Pull weight version `target` (a version in the registry, or a `Snapshot`) in the
        background and install it between two engine steps; returns the version now loaded."""
        snap = target if isinstance(target, Snapshot) else await self._lookup(target)
        if snap.version == self.core.engine.weight_version:
            return snap.version
        self.core.syncing = snap.version
        try:
            weights = await asyncio.to_thread(fetch_weights, snap)
            async with self.core.lock:
                # Two syncs in flight fetch concurrently; the older one can reach the lock
                # last. Weights only move forward: never install over a newer version.
                if snap.version > self.core.engine.weight_version:
                    await asyncio.to_thread(self.core.engine.load_weights, weights, snap.version)
        finally:
            self.core.syncing = None
        return self.core.engine.weight_version

    async def warm_up(self) -> float:
        """Pay the one-time cost of a process's first weight sync ahead of time: registry
        lookup, first object-store fetch, first weight install (the engine's first
        `load_weights` costs seconds on a small machine, later ones milliseconds). Installs
        the newest published snapshot unless the engine already holds a newer version
        (works parked: the weights then wait off the device); with no snapshot it
        reinstalls the loaded weights. A pre-started worker does it once parked, so that
        its first activation syncs fast. Returns the time it took in ms."""
        import ray

        t0 = time.perf_counter()
        try:
            registry = ray.get_actor(self.core.registry_name)
        except ValueError:  # no registry (yet): only the install is warmed up
            registry = None
        snap = await registry.latest.remote() if registry is not None else None
        weights = await asyncio.to_thread(fetch_weights, snap) if snap is not None else None
        engine = self.core.engine
        async with self.core.lock:
            if snap is not None and weights is not None and snap.version >= engine.weight_version:
                await asyncio.to_thread(engine.load_weights, weights, snap.version)
            elif snap is None and not engine.is_released and hasattr(engine, "state_dict"):
                await asyncio.to_thread(
                    lambda: engine.load_weights(engine.state_dict(), engine.weight_version)
                )
        return (time.perf_counter() - t0) * 1000.0

    async def sync_latest(self) -> int:
        """Pull the newest published version (a new worker does this before admission)."""
        import ray

        registry = ray.get_actor(self.core.registry_name)
        snap = await registry.latest.remote()
        if snap is None:
            return self.core.engine.weight_version
        return await self.sync_weights(snap)

    async def _lookup(self, version: int) -> Snapshot:
        import ray

        registry = ray.get_actor(self.core.registry_name)
        return await registry.get.remote(version)

    def stop(self) -> None:
        import ray

        ray.actor.exit_actor()
