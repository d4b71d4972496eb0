"""A simulated inference worker: the driving API the simulated world calls.

Continuous batching with chunked prefill, prefill-only and decode-only roles, a per-worker
prefix cache, KV pressure and interruption. The worker holds its batching core
(`pearl.sim.physics.batching`: the requests, their KV and the iterations that advance them;
the semantics are there and in docs/simulator-model.md) and adds the contract: checked
submissions, interruptions as `Partial`s, role changes, and statistics by step.

Driving contract (one worker, times non-decreasing across calls):
  - `advance(now_s)` completes every segment that ends at or before now_s and returns the
    completions (each with its own end time <= now_s), in time order;
  - `submit(request, now_s)` queues a turn (call `advance(now_s)` first: completions that a
    late submit has to complete internally are buffered for the next `advance`);
  - `next_change_time_s()` is when the worker next wants `advance` (math.inf when idle). It
    may yield no completion (an internal boundary it cannot see past);
  - `interrupt_all(now_s)` aborts every request, returning each one's generated prefix; the
    iteration running at now_s is lost.
"""

from __future__ import annotations

from pearl.control.state import Role
from pearl.sim.physics.batching import BatchingCore, Finished
from pearl.sim.physics.inference_types import (
    Completion,
    CompletionKind,
    Partial,
    Request,
    StepStats,
    WorkerConfig,
)
from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.physics.prefix_cache import PrefixCache
from pearl.sim.physics.worker_state import Seq


class InferenceWorker:
    """One simulated rollout worker (a model replica on `hardware.tp` GPUs).

    `InferenceWorker(worker_id, hardware, role=Role.COLOCATED, config=None, *, now_s=0.0)`;
    raises ValueError when the weights leave no KV room on `hardware`.
    """

    def __init__(
        self,
        worker_id: str,
        hardware: WorkerHardware,
        role: Role = Role.COLOCATED,
        config: WorkerConfig | None = None,
        *,
        now_s: float = 0.0,
    ) -> None:
        self.worker_id = worker_id
        self.hw = hardware
        self.config = config or WorkerConfig()
        self._core = BatchingCore(worker_id, hardware, role, self.config, now_s=now_s)
        self.kv_capacity_tokens = self._core.kv_capacity_tokens
        self.stats = self._core.stats
        self._stats_mark = (now_s, self.stats.snapshot())

    # -- public queries ------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._core.role

    @property
    def cache(self) -> PrefixCache:
        """The prefix cache (hit counters: `num_lookups`, `num_hits`, `hit_tokens`)."""
        return self._core.cache

    @property
    def budget_tokens(self) -> int:
        """Tokens an iteration may process (the role's budget)."""
        return self._core.budget_tokens

    @property
    def num_in_flight(self) -> int:
        return self._core.num_in_flight

    @property
    def num_decoding(self) -> int:
        return self._core.num_decoding

    @property
    def kv_used_tokens(self) -> int:
        """KV held by running requests (idle cached prefixes excluded)."""
        return self._core.kv_used_tokens

    @property
    def time_s(self) -> float:
        """The worker's last iteration boundary (<= the last `advance` time)."""
        return self._core.t_s

    def holds_prefix(self, traj_id: int) -> int:
        """Tokens of `traj_id`'s context this worker holds as an idle cached prefix."""
        return self._core.cache.peek(traj_id)

    def in_flight(self) -> list[tuple[int, int]]:
        """(traj_id, turn) of every request on this worker."""
        return [(s.req.traj_id, s.req.turn) for _, s in self._core.requests()]

    # -- driving ---------------------------------------------------------------------------

    def submit(self, request: Request, now_s: float, *, kv_ready: bool | None = None) -> None:
        """Queue one turn at now_s; it joins the first iteration that starts at or after now_s.

        `kv_ready`: the request's KV (context + generated tokens) has been transferred here,
        so it only decodes; default: true on a decode worker, false otherwise (a colocated
        worker may also receive a transferred KV: pass True). Raises ValueError if the
        request could never fit in this worker's KV pool.
        """
        remaining = request.decode_tokens - request.generated_tokens
        need = request.prompt_tokens + remaining + self._core.watermark_tokens + 1
        if need > self.kv_capacity_tokens:
            raise ValueError(
                f"{self.worker_id}: request of {request.prompt_tokens}+{remaining} tokens "
                f"exceeds KV capacity {self.kv_capacity_tokens}"
            )
        ready = self.role == Role.DECODE if kv_ready is None else kv_ready
        self._core.enqueue(Seq(request, now_s, prefilled=ready), now_s)

    def advance(self, now_s: float) -> list[Completion]:
        """Run to now_s; return the completions since the last call, in time order."""
        self._core.advance_to(now_s)
        return [self._completion(f) for f in self._core.take_done()]

    def pop_decode_starts(self) -> list[tuple[int, float]]:
        """(traj_id, time) of each request that began decoding here since the last call, in
        time order (its prompt done, or its transferred KV taken in). Recorded only with
        `config.report_decode_starts`; aborted requests are dropped."""
        return self._core.take_decode_starts()

    def next_change_time_s(self) -> float:
        """When to call `advance` next (math.inf: idle). Completions buffered by a late
        `submit` or `interrupt_all` make it the time of the first of them (<= now)."""
        return self._core.next_change_time_s()

    def interrupt_all(self, now_s: float) -> list[Partial]:
        """Abort every request at now_s, keeping each one's generated tokens (paper §4.5).

        Iterations finished by now_s count; the one running at now_s is lost. The computed KV
        of interrupted requests stays as idle cached prefixes (unless this is a decode
        worker); `clear_cache()` drops it when the worker's device state goes away.
        """
        out: list[Partial] = []
        for phase, s in self._core.abort_all(now_s):
            r = s.req
            out.append(
                Partial(
                    self.worker_id,
                    r.traj_id,
                    r.turn,
                    r.context_tokens,
                    r.decode_tokens,
                    s.generated,
                    phase,
                    s.t_queued_s,
                    r.reusable_prefix_tokens,
                )
            )
        return out

    def withdraw(self, traj_id: int, now_s: float) -> int | None:
        """Abort trajectory `traj_id`'s request at now_s (the controller routed its turn
        elsewhere); returns its generated tokens, or None if this worker does not hold it.

        Iterations finished by now_s count; the one running at now_s is recomposed without
        it (the other requests lose that partial iteration, as on any abort). Its computed
        KV stays as an idle cached prefix unless this is a decode worker.
        """
        held = self._core.abort(traj_id, now_s)
        return None if held is None else held.generated

    def set_role(self, role: Role) -> None:
        """Change role; only an empty worker may change (drain or interrupt it first)."""
        if self.num_in_flight:
            raise ValueError(f"{self.worker_id}: cannot change role with requests in flight")
        self._core.role = role

    def clear_cache(self) -> None:
        """Forget every cached prefix (device state released, e.g. GPU returned)."""
        self._core.cache.clear()

    def _completion(self, f: Finished) -> Completion:
        s, r = f.seq, f.seq.req
        prefill_role = f.kind == CompletionKind.PREFILL
        return Completion(
            kind=f.kind,
            worker_id=self.worker_id,
            traj_id=r.traj_id,
            turn=r.turn,
            context_tokens=r.context_tokens,
            prompt_tokens=s.prompt,
            cached_prefix_tokens=s.cached,
            new_prefill_tokens=s.new_prefill,
            generated_tokens=s.generated,
            decode_steps=s.decode_steps,
            finished=s.left <= 0,
            num_preemptions=s.num_preemptions,
            t_queued_s=s.t_queued_s,
            t_submit_s=s.t_submit_s,
            t_prefill_start_s=s.t_prefill_start_s,
            t_prefill_end_s=s.t_prefill_end_s,
            t_decode_start_s=s.t_decode_start_s,
            t_decode_end_s=None if prefill_role else f.t_end_s,
        )

    def take_stats(self, now_s: float) -> StepStats:
        """Iteration statistics since the previous call (or construction), up to now_s."""
        t0, before = self._stats_mark
        after = self.stats.snapshot()
        self._stats_mark = (now_s, after)
        d = [a - b for a, b in zip(after, before, strict=True)]
        return StepStats(
            self.worker_id,
            str(self.role),
            t0,
            now_s,
            int(d[0]),
            d[1],
            d[2],
            int(d[3]),
            int(d[4]),
            int(d[5]),
            int(d[6]),
            d[7],
        )
