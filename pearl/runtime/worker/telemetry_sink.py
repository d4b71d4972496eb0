"""What a rollout worker records about its engine steps and its turns (paper §4.1.1, §5).

Records use the one schema of `pearl.control.telemetry` (`TurnRecord`, `WorkerStepRecord`),
so the same runtime tracker and report serve the simulator and the real runtime.

`StepProbe` watches an engine's scheduler: for each iteration it notes which sequences ran
and how many tokens each fed, which gives a step's prefill tokens (prompt chunks), decode
tokens (one per decoding sequence) and attended context, and each request's first-scheduled
time (its prefill start). It wraps the engine's `scheduler.schedule` on that one engine
instance; nothing in the engine changes.

`TelemetrySink` buffers records until the driver collects them (`drain()`), optionally
sampling steps (`step_every`). `record_turn(...)` builds a turn's `TurnRecord` through the
one constructor both worlds use (`pearl.control.telemetry.turn_record`), which puts the
timestamps in order: they may come from different machines' clocks (prefill and decode
workers), and a skew of a few milliseconds must not make a record invalid.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pearl.control.telemetry import TurnRecord, WorkerStepRecord, turn_record
from pearl.runtime.backends.interface import StepTelemetry


class StepProbe:
    """Counts what each `schedule()` of one engine feeds; see the module docstring."""

    def __init__(self, engine: Any, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._engine = engine
        self._last = StepTelemetry()
        self.first_scheduled_s: dict[str, float] = {}
        scheduler = getattr(engine, "scheduler", None)
        inner = getattr(scheduler, "schedule", None)
        self._watching = inner is not None
        if inner is None:
            return  # a backend without a visible scheduler reports its own `last_step`

        def schedule() -> Any:
            batch = inner()
            self._observe(batch)
            return batch

        setattr(scheduler, "schedule", schedule)  # noqa: B010 - patch this instance only

    @property
    def last(self) -> StepTelemetry:
        if self._watching:
            return self._last
        return getattr(self._engine, "last_step", None) or StepTelemetry()

    def _observe(self, batch: Any) -> None:
        now = self._clock()
        for seq in batch.seqs:
            self.first_scheduled_s.setdefault(seq.request_id, now)
        self._last = batch.telemetry()

    def reset(self) -> None:
        self._last = StepTelemetry()

    def forget(self, request_id: str) -> float | None:
        return self.first_scheduled_s.pop(request_id, None)


class TelemetrySink:
    """Buffers a worker's records until `drain()`; keeps at most `max_records` of each."""

    def __init__(
        self,
        worker_id: str,
        *,
        step_every: int = 1,
        max_records: int = 100_000,
        kv_capacity_tokens: int | None = None,
    ) -> None:
        if step_every < 1:
            raise ValueError("step_every must be >= 1")
        self.worker_id = worker_id
        self.kv_capacity_tokens = kv_capacity_tokens
        self.step_every = step_every
        self.max_records = max_records
        self._turns: list[TurnRecord] = []
        self._steps: list[WorkerStepRecord] = []
        self.num_steps = 0
        self.num_dropped = 0

    def step(
        self, role: str, rollout_step: int, t_s: float, stats: StepTelemetry, step_time_s: float
    ) -> None:
        self.num_steps += 1
        if stats.batch_size == 0 or (self.num_steps - 1) % self.step_every:
            return
        rec = WorkerStepRecord(
            worker_id=self.worker_id,
            role=role,
            step=rollout_step,
            t_s=t_s,
            batch_size=stats.batch_size,
            prefill_tokens=stats.prefill_tokens,
            decode_tokens=stats.decode_tokens,
            context_tokens=stats.context_tokens,
            step_time_s=max(0.0, step_time_s),
            kv_capacity_tokens=self.kv_capacity_tokens,
        )
        self._keep(self._steps, rec)

    def turn(self, record: TurnRecord) -> None:
        self._keep(self._turns, record)

    def _keep(self, buf: list, rec: Any) -> None:
        if len(buf) >= self.max_records:
            buf.pop(0)
            self.num_dropped += 1
        buf.append(rec)

    def drain(self) -> tuple[tuple[TurnRecord, ...], tuple[WorkerStepRecord, ...]]:
        """All buffered records (turns, steps), oldest first; the buffers are emptied."""
        turns, steps = tuple(self._turns), tuple(self._steps)
        self._turns.clear()
        self._steps.clear()
        return turns, steps


def record_turn(
    *,
    worker_id: str,
    weight_version: int,
    request: Any,
    role: str,
    prefill: Any,
    num_tokens: int,
    cached_prefix_tokens: int,
    t_queued_s: float,
    t_start_s: float | None,
    t_first_token_s: float | None,
    t_kv_end_s: float | None,
    reason: str | None,
    interrupted_reasons: tuple[str, ...],
    now_s: float | None = None,
) -> TurnRecord | None:
    """The `TurnRecord` of a turn that ended on this worker, or None when there is none.

    No record for a failed turn (`reason` None or not a finish), nor for a prefill handed
    to a decode worker (reason `prefill`: the decode worker writes the whole record, prefill
    times included, from the `PrefillResult` it received). A turn that ended on its prefill
    worker (its first token was its last, or it was interrupted there) has its record here.
    `request` is a `TurnRequest`, `prefill` the `PrefillResult` of a decode turn (else None).
    """
    now = time.time() if now_s is None else now_s
    interrupted = reason in interrupted_reasons
    if reason is None or reason == "error" or (role == "prefill" and reason == "prefill"):
        return None
    common: dict[str, Any] = dict(
        traj_id=request.traj_id,
        turn=request.turn,
        step=request.step,
        weight_version=weight_version,
        decode_tokens=num_tokens,
        interrupted=interrupted,
        resumed=request.resumed,
        t_decode_end_s=now,
    )
    if prefill is not None:  # decode side of a disaggregated turn
        kv_end = t_kv_end_s or now
        return turn_record(
            **common,
            prefill_worker=prefill.worker_id,
            decode_worker=worker_id,
            roles=("prefill", "decode"),
            context_tokens=prefill.num_prompt_tokens,
            cached_prefix_tokens=prefill.cached_prefix_tokens,
            t_queued_s=prefill.t_queued_s,
            t_prefill_start_s=prefill.t_prefill_start_s,
            t_prefill_end_s=prefill.t_prefill_end_s,
            t_kv_start_s=prefill.t_kv_start_s,
            t_kv_end_s=kv_end,
            t_decode_start_s=kv_end,
        )
    first = now if role == "prefill" else (t_first_token_s or now)
    return turn_record(
        **common,
        prefill_worker=worker_id,
        decode_worker=None if role == "prefill" else worker_id,
        roles=(role,),
        context_tokens=len(request.prompt_token_ids),
        cached_prefix_tokens=cached_prefix_tokens,
        t_queued_s=t_queued_s,
        t_prefill_start_s=t_start_s or t_queued_s,
        t_prefill_end_s=first,
        t_kv_start_s=None,
        t_kv_end_s=None,
        t_decode_start_s=first,
    )
