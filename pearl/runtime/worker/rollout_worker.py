"""Rollout worker: a Ray actor that runs one engine on one device slot (paper §4.4-§4.6, §5).

The worker serves turns in its role:

* `colocated`: `serve(request)` runs the whole turn (prefill then decode);
* `prefill`: `prefill(request)` runs the prompt, samples the first token, exports the KV
  through the transport and returns a `PrefillResult` with the handle;
* `decode`: `serve(request, prefill_result)` imports the KV and generates the rest.

`serve` is a streaming generator: each engine step's new tokens go to the caller at once,
so when the worker's node is taken away the caller still holds every token generated so far
(`collect_turn`). `generate` is the same without streaming.

Control calls are served while a batch is being generated: the engine steps in a thread,
one at a time under an `asyncio.Lock`, and every call that touches the engine takes that
lock between two steps. So:

* `set_role(role)` changes the role in place (no restart). Turns already admitted finish
  under the role they were admitted with; new requests are checked against the new role.
* `drain()` stops admissions and returns when no turn is left; `activate()` admits again.
* `interrupt()` aborts every turn in flight; each caller gets an `interrupted` result with
  everything generated so far (token ids and logprobs), and so does the return value.
* `release()` / `restore()` free and rebuild device state (weights and KV) while the
  process stays alive (intra-scale borrowing, paper §4.6); release interrupts live turns.
* `park()` interrupts live turns, releases device state and refuses requests while the
  process stays alive; `activate_as(worker_id, role)` restores device state under a new
  worker id and role and admits again (borrowed training devices, paper §4.6, §5).
* `sync_weights(version_or_snapshot)` pulls a weight snapshot from the object store in the
  background (serving continues) and installs it between two steps.

Bad requests (too long for the context limit, wrong role, worker draining, parked or released)
get an error result; they never crash the actor. Telemetry (`TurnRecord` per finished or
interrupted turn, `WorkerStepRecord` per engine step) is collected with `telemetry()`.

The actor is composed of parts over one `WorkerCore` (`pearl.runtime.worker.loop`): this
module holds admission and the serving calls; the `StepLoop` (`pearl.runtime.worker.loop`)
steps the engine and answers turns; `WorkerControl` (`pearl.runtime.worker.control`)
carries out the control calls, which the actor forwards to it (a Ray actor's remote calls
are its own methods).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

from pearl.control.state import Role
from pearl.runtime.engine import RequestRejected
from pearl.runtime.snapshots import REGISTRY_NAME, Snapshot
from pearl.runtime.topology import current_node_id, worker_options
from pearl.runtime.transport.by_name import get_transport
from pearl.runtime.transport.kv_transfer import KVLostError, Transport
from pearl.runtime.worker.api import (
    ERROR,
    INTERRUPTED,
    KV_LOST,
    EngineSpec,
    PrefillResult,
    TokenChunk,
    TurnRequest,
    TurnResult,
    WorkerStatus,
)
from pearl.runtime.worker.control import WorkerControl
from pearl.runtime.worker.loop import LiveTurn, StepLoop, WorkerCore
from pearl.runtime.worker.telemetry_sink import StepProbe, TelemetrySink


class RolloutWorker:
    """The actor class; create it with `start_worker` (or `ray.remote(RolloutWorker)`)."""

    def __init__(
        self,
        worker_id: str,
        role: Role | str,
        engine: EngineSpec | None = None,
        *,
        transport: str = "object_store",
        registry_name: str = REGISTRY_NAME,
        step_every: int = 1,
    ) -> None:
        t0 = time.perf_counter()
        built = (engine or EngineSpec()).build()
        self._engine_build_s = time.perf_counter() - t0
        self.core = WorkerCore(
            worker_id=worker_id,
            role=Role(role),
            engine=built,
            transport=get_transport(transport),
            probe=StepProbe(built),
            sink=TelemetrySink(
                worker_id, step_every=step_every, kv_capacity_tokens=_kv_capacity(built)
            ),
            registry_name=registry_name,
        )
        self.loop = StepLoop(self.core)
        self.control = WorkerControl(self.core, self.loop)

    @property
    def transport(self) -> Transport:
        return self.core.transport

    @transport.setter
    def transport(self, transport: Transport) -> None:  # tests share one in-process transport
        self.core.transport = transport

    # -- status -------------------------------------------------------------------------
    def ready(self) -> WorkerStatus:
        """Answers once the engine is built: a worker start is done when this returns."""
        return self.status()

    def status(self) -> WorkerStatus:
        c = self.core
        return WorkerStatus(
            worker_id=c.worker_id,
            role=c.role.value,
            accepting=c.accepting,
            num_running=len(c.live),
            weight_version=c.engine.weight_version,
            released=c.engine.is_released,
            parked=c.parked,
            pid=os.getpid(),
            node_id=current_node_id(),
            num_engine_steps=c.sink.num_steps,
            syncing_version=c.syncing,
            engine_build_s=self._engine_build_s,
            backend=c.engine.capabilities.name,
        )

    def telemetry(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(TurnRecords, WorkerStepRecords) since the last call."""
        return self.core.sink.drain()

    # -- control calls (carried out by `WorkerControl`) -------------------------------------
    async def set_role(self, role: Role | str) -> float:
        return await self.control.set_role(role)

    async def drain(self) -> int:
        return await self.control.drain()

    def activate(self) -> None:
        self.control.activate()

    async def interrupt(self, request_ids: tuple[str, ...] | None = None) -> list[TurnResult]:
        return await self.control.interrupt(request_ids)

    async def release(self) -> list[TurnResult]:
        return await self.control.release()

    async def restore(self) -> float:
        return await self.control.restore()

    async def park(self) -> float:
        return await self.control.park()

    async def activate_as(self, worker_id: str, role: Role | str) -> float:
        return await self.control.activate_as(worker_id, role)

    async def sync_weights(self, target: int | Snapshot) -> int:
        return await self.control.sync_weights(target)

    async def warm_up(self) -> float:
        return await self.control.warm_up()

    async def sync_latest(self) -> int:
        return await self.control.sync_latest()

    def stop(self) -> None:
        self.control.stop()

    # -- serving --------------------------------------------------------------------------
    async def serve(self, request: TurnRequest, prefill: PrefillResult | None = None):
        """Stream a turn: `TokenChunk`s of new tokens; the last one carries the result."""
        live = await self._admit(request, prefill)
        if isinstance(live, TurnResult):
            yield TokenChunk(request.traj_id, request.turn, (), (), live.weight_version, live)
            return
        finished = False
        try:
            while not finished:
                chunk = await live.chunks.get()
                finished = chunk.finished
                yield chunk
        finally:
            if not finished:  # the caller went away: do not generate for no one
                await self.control.abort((request.request_id,), INTERRUPTED)

    async def generate(
        self, request: TurnRequest, prefill: PrefillResult | None = None
    ) -> TurnResult:
        """Run a turn to its end (no streaming)."""
        live = await self._admit(request, prefill)
        if isinstance(live, TurnResult):
            return live
        assert live.done is not None
        return await live.done

    async def prefill(self, request: TurnRequest) -> PrefillResult:
        """Prefill a turn, sample its first token and hand the KV to the transport."""
        live = await self._admit(request, None, prefill_only=True)
        if isinstance(live, TurnResult):
            return PrefillResult.failed(live, len(request.prompt_token_ids))
        assert live.done is not None
        res = await live.done  # a TurnResult when interrupted or failed before its KV was out
        if isinstance(res, PrefillResult):
            return res
        return PrefillResult.failed(res, len(request.prompt_token_ids))

    async def _admit(
        self, request: TurnRequest, prefill: PrefillResult | None, *, prefill_only: bool = False
    ) -> LiveTurn | TurnResult:
        now = time.time()
        t_queued = request.t_queued_s if request.t_queued_s is not None else now
        refuse = self._refusal(request, prefill, prefill_only)
        if refuse:
            return self._error(request, refuse)
        role = Role.PREFILL if prefill_only else (Role.DECODE if prefill else Role.COLOCATED)
        live = LiveTurn(request, role, t_queued, prefill=prefill)
        live.done = asyncio.get_running_loop().create_future()
        payload = None
        handle = prefill.handle if prefill is not None else None  # not None: `_refusal`
        if handle is not None:
            try:  # pull the KV outside the lock: the engine keeps stepping meanwhile
                payload = await asyncio.to_thread(self.core.transport.receive, handle)
            except KVLostError as err:
                return self._error(request, str(err), KV_LOST)
        try:
            return await self._admit_locked(request, prefill, prefill_only, live, payload)
        finally:  # the KV is copied into the engine (or refused): the sender may reuse it
            if handle is not None and payload is not None:
                self.core.transport.release(handle)

    async def _admit_locked(
        self,
        request: TurnRequest,
        prefill: PrefillResult | None,
        prefill_only: bool,
        live: LiveTurn,
        payload: Any,
    ) -> LiveTurn | TurnResult:
        rid = request.request_id
        async with self.core.lock:
            refuse = self._refusal(request, prefill, prefill_only)  # may have changed meanwhile
            if refuse or rid in self.core.live:
                return self._error(request, refuse or f"request '{rid}' is already running here")
            try:
                done = None
                if payload is not None:
                    done = self.core.engine.import_kv(rid, payload, request.sampling)
                    live.t_kv_end_s = time.time()
                    check = getattr(self.core.transport, "check", None)
                    if check is not None and prefill is not None:
                        try:  # a reused shared-memory segment: what was read is not this KV
                            check(prefill.handle)
                        except KVLostError as err:
                            with contextlib.suppress(RequestRejected):  # done at import
                                self.core.engine.abort(rid)
                            return self._error(request, str(err), KV_LOST)
                else:
                    self.core.engine.add_request(
                        rid,
                        list(request.prompt_token_ids),
                        request.sampling,
                        prefill_only=prefill_only,
                    )
            except (RequestRejected, ValueError) as err:
                return self._error(request, str(err))
            self.core.live[rid] = live
            self.core.rollout_step = max(self.core.rollout_step, request.step)
            if done is not None:
                # the imported turn was already complete (its last token came with the KV)
                self.loop.finish(
                    live, done.output_token_ids, done.output_logprobs, done.finish_reason
                )
                return live
        self.loop.kick()
        return live

    def _refusal(
        self, request: TurnRequest, prefill: PrefillResult | None, prefill_only: bool
    ) -> str:
        if self.core.parked:
            return f"worker {self.core.worker_id} is parked and admits no request"
        if not self.core.accepting:
            return f"worker {self.core.worker_id} is draining and admits no request"
        if self.core.engine.is_released:
            return f"worker {self.core.worker_id} has released its device state"
        if prefill is not None and prefill.handle is None:
            return "the prefill result carries no KV handle"
        if self.core.role is Role.COLOCATED:
            return ""
        if prefill_only and self.core.role is not Role.PREFILL:
            return f"worker {self.core.worker_id} is a {self.core.role.value} worker, not prefill"
        if not prefill_only and self.core.role is Role.PREFILL:
            return f"worker {self.core.worker_id} is a prefill worker: call prefill()"
        if self.core.role is Role.DECODE and prefill is None:
            return f"worker {self.core.worker_id} is a decode worker: it needs a prefill result"
        return ""

    def _error(self, request: TurnRequest, message: str, reason: str = ERROR) -> TurnResult:
        return TurnResult(
            request.traj_id,
            request.turn,
            (),
            (),
            reason,
            self.core.worker_id,
            self.core.engine.weight_version,
            error=message,
        )


def start_worker(
    worker_id: str,
    role: Role | str,
    gpu_ids: tuple[str, ...],
    engine: EngineSpec | None = None,
    *,
    use_cuda: bool = False,
    transport: str = "object_store",
    registry_name: str = REGISTRY_NAME,
    step_every: int = 1,
) -> Any:
    """Create the worker actor bound to device slots `gpu_ids` (see `topology`).

    Returns the handle at once; `ray.get(handle.ready.remote())` waits for the engine.
    """
    import ray

    cls = ray.remote(RolloutWorker)
    return cls.options(
        **worker_options(gpu_ids, use_cuda=use_cuda), max_restarts=0, max_concurrency=1000
    ).remote(
        worker_id,
        role,
        engine,
        transport=transport,
        registry_name=registry_name,
        step_every=step_every,
    )


def _kv_capacity(engine: Any) -> int | None:
    """The engine's KV pool in tokens (blocks x block size), None when it does not say."""
    blocks, size = getattr(engine, "num_kv_blocks", None), getattr(engine, "block_size", None)
    if isinstance(blocks, int) and isinstance(size, int) and blocks > 0 and size > 0:
        return blocks * size
    return None
