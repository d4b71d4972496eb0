"""The step loop of a rollout worker: engine steps, and the turns' answers they produce.

`WorkerCore` is what a rollout worker's parts share (identity, role, engine, transport,
telemetry, the lock, the table of live turns, admission flags); `StepLoop` is the part of
`RolloutWorker` (pearl/runtime/worker/rollout_worker.py) that steps the engine and answers turns. One engine
step at a time runs in a thread under the worker's lock (control calls get in between two
steps); a finished prefill exports its KV through the transport; each step's new tokens are
streamed to the turn's caller as `TokenChunk`s, and a finished or aborted turn is answered
with its `TurnResult` (or `PrefillResult`) and recorded as a `TurnRecord`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pearl.control.state import Role
from pearl.runtime.transport.kv_transfer import Transport
from pearl.runtime.worker.api import (
    ERROR,
    INTERRUPTED,
    PrefillResult,
    TokenChunk,
    TurnRequest,
    TurnResult,
)
from pearl.runtime.worker.telemetry_sink import StepProbe, TelemetrySink, record_turn

if TYPE_CHECKING:
    from pearl.runtime.engine import LLMEngine


@dataclass
class LiveTurn:
    """A turn admitted to this worker and not yet answered."""

    request: TurnRequest
    role: Role
    t_queued_s: float
    chunks: asyncio.Queue = field(default_factory=asyncio.Queue)
    done: asyncio.Future | None = None
    prefill: PrefillResult | None = None
    t_kv_end_s: float | None = None
    t_first_token_s: float | None = None
    num_streamed: int = 0


@dataclass(eq=False)
class WorkerCore:
    """The state a rollout worker's parts share (the actor, its step loop, its control
    calls). Every change to the engine happens under `lock`."""

    worker_id: str
    role: Role
    engine: LLMEngine
    transport: Transport
    probe: StepProbe
    sink: TelemetrySink
    registry_name: str
    live: dict[str, LiveTurn] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    accepting: bool = True
    parked: bool = False
    syncing: int | None = None
    rollout_step: int = 0


class StepLoop:
    """Steps the engine while it has work and answers each turn (see the module doc)."""

    def __init__(self, core: WorkerCore) -> None:
        self.core = core
        self._task: asyncio.Task | None = None

    def kick(self) -> None:
        """Make sure the loop runs (it stops by itself when the engine has nothing left)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        c = self.core
        while True:
            async with c.lock:
                if c.engine.is_released or not c.engine.has_unfinished():
                    return
                try:
                    outputs, exports = await asyncio.to_thread(self._step)
                except Exception as err:  # a broken step must not kill the actor
                    self.fail_all(f"engine step failed: {type(err).__name__}: {err}")
                    return
                self._dispatch(outputs, exports)
            await asyncio.sleep(0)  # let control calls in between two steps

    def fail_all(self, message: str) -> None:
        """Answer every live turn with an error (the engine broke)."""
        c = self.core
        for rid in list(c.live):
            live = c.live[rid]
            try:
                c.engine.abort(rid)
            except Exception:  # noqa: BLE001 - the engine is already in trouble
                pass
            self.finish(live, (), (), ERROR, error=message)

    def _step(self) -> tuple[list[Any], dict[str, tuple[Any, float, Any]]]:
        """One engine step (in a thread, under the lock); exports finished prefills."""
        c = self.core
        c.probe.reset()
        t0 = time.time()
        outputs = c.engine.step()
        t1 = time.time()
        c.sink.step(c.role.value, c.rollout_step, t1, c.probe.last, t1 - t0)
        exports: dict[str, tuple[Any, float, Any]] = {}
        for out in outputs:
            if out.finished and out.finish_reason == "prefill":
                t_kv = time.time()
                payload = c.engine.export_kv(out.request_id)
                handle = c.transport.send(
                    payload, request_id=out.request_id, num_tokens=payload.num_kv_tokens
                )
                exports[out.request_id] = (handle, t_kv, payload)
        return outputs, exports

    def _dispatch(self, outputs: list[Any], exports: dict[str, tuple[Any, float, Any]]) -> None:
        for out in outputs:
            live = self.core.live.get(out.request_id)
            if live is None:
                continue
            if live.t_first_token_s is None and out.new_token_ids:
                live.t_first_token_s = time.time()
            if out.request_id in exports:
                handle, t_kv, _ = exports[out.request_id]
                self._finish_prefill(live, out, handle, t_kv)
            elif out.finished:
                self.finish(
                    live,
                    out.output_token_ids,
                    out.output_logprobs,
                    out.finish_reason,
                    cached=out.num_cached_prefix_tokens,
                )
            else:
                self._stream(live, out.output_token_ids, out.output_logprobs)

    def _stream(self, live: LiveTurn, tokens: tuple[int, ...], logprobs: tuple[float, ...]) -> None:
        new = tokens[live.num_streamed :]
        if new:
            live.chunks.put_nowait(
                TokenChunk(
                    live.request.traj_id,
                    live.request.turn,
                    new,
                    logprobs[live.num_streamed :],
                    self.core.engine.weight_version,
                )
            )
            live.num_streamed = len(tokens)

    def finish(
        self,
        live: LiveTurn,
        tokens: tuple[int, ...],
        logprobs: tuple[float, ...],
        reason: str | None,
        *,
        cached: int = 0,
        error: str | None = None,
    ) -> None:
        """Answer `live` with its result (and its last chunk) and record the turn."""
        c = self.core
        req = live.request
        c.live.pop(req.request_id, None)
        t_prefill_start = c.probe.forget(req.request_id)
        result = TurnResult(
            req.traj_id,
            req.turn,
            tuple(tokens),
            tuple(logprobs),
            reason or ERROR,
            c.worker_id,
            c.engine.weight_version,
            error,
            self._record(live, len(tokens), cached, t_prefill_start, reason),
        )
        tail = tokens[live.num_streamed :]
        live.chunks.put_nowait(
            TokenChunk(
                req.traj_id,
                req.turn,
                tuple(tail),
                tuple(logprobs[live.num_streamed :]),
                result.weight_version,
                result,
            )
        )
        live.num_streamed = len(tokens)
        if live.done is not None and not live.done.done():
            live.done.set_result(result)

    def _finish_prefill(self, live: LiveTurn, out: Any, handle: Any, t_kv: float) -> None:
        c = self.core
        req = live.request
        c.live.pop(req.request_id, None)
        t_start = c.probe.forget(req.request_id) or live.t_queued_s
        result = PrefillResult(
            req.traj_id,
            req.turn,
            handle,
            tuple(out.output_token_ids),
            tuple(out.output_logprobs),
            "prefill",
            c.worker_id,
            c.engine.weight_version,
            num_prompt_tokens=len(req.prompt_token_ids),
            cached_prefix_tokens=out.num_cached_prefix_tokens,
            t_queued_s=live.t_queued_s,
            t_prefill_start_s=t_start,
            t_prefill_end_s=t_kv,
            t_kv_start_s=t_kv,
        )
        if live.done is not None and not live.done.done():
            live.done.set_result(result)

    def _record(
        self,
        live: LiveTurn,
        num_tokens: int,
        cached: int,
        t_start: float | None,
        reason: str | None,
    ) -> Any:
        """The turn's TurnRecord, also kept for `telemetry()` (see `record_turn`)."""
        rec = record_turn(
            worker_id=self.core.worker_id,
            weight_version=self.core.engine.weight_version,
            request=live.request,
            role=live.role.value,
            prefill=live.prefill,
            num_tokens=num_tokens,
            cached_prefix_tokens=cached,
            t_queued_s=live.t_queued_s,
            t_start_s=t_start,
            t_first_token_s=live.t_first_token_s,
            t_kv_end_s=live.t_kv_end_s,
            reason=reason,
            interrupted_reasons=(INTERRUPTED,),
        )
        if rec is not None:
            self.core.sink.turn(rec)
        return rec
