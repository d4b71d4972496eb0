"""A simulated inference worker: the public driving API over `pearl.sim.physics.batching`.

Continuous batching with chunked prefill, prefill-only and decode-only roles, a per-worker
prefix cache, KV pressure and interruption; the semantics are in `pearl.sim.physics.batching` and
docs/simulator-model.md.

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

import math

from pearl.control.state import Role
from pearl.sim.physics.batching import BatchingCore
from pearl.sim.physics.inference_types import Completion, Partial, Phase, Request, StepStats
from pearl.sim.physics.worker_state import Seq


class InferenceWorker(BatchingCore):
    """One simulated rollout worker (a model replica on `hardware.tp` GPUs).

    `InferenceWorker(worker_id, hardware, role=Role.COLOCATED, config=None, *, now_s=0.0)`;
    raises ValueError when the weights leave no KV room on `hardware`.
    """

    # -- public queries ------------------------------------------------------------------

    @property
    def num_in_flight(self) -> int:
        return len(self._waiting) + len(self._prefilling) + len(self._decoding)

    @property
    def num_decoding(self) -> int:
        return len(self._decoding)

    @property
    def kv_used_tokens(self) -> int:
        """KV held by running requests (idle cached prefixes excluded)."""
        return self.kv.active_tokens

    @property
    def time_s(self) -> float:
        """The worker's last iteration boundary (<= the last `advance` time)."""
        return self._t

    def holds_prefix(self, traj_id: int) -> int:
        """Tokens of `traj_id`'s context this worker holds as an idle cached prefix."""
        return self.cache.peek(traj_id)

    def in_flight(self) -> list[tuple[int, int]]:
        """(traj_id, turn) of every request on this worker."""
        seqs = [*self._waiting, *self._prefilling, *self._decoding.values()]
        return [(s.req.traj_id, s.req.turn) for s in seqs]

    # -- driving ---------------------------------------------------------------------------

    def submit(self, request: Request, now_s: float, *, kv_ready: bool | None = None) -> None:
        """Queue one turn at now_s; it joins the first iteration that starts at or after now_s.

        `kv_ready`: the request's KV (context + generated tokens) has been transferred here,
        so it only decodes; default: true on a decode worker, false otherwise (a colocated
        worker may also receive a transferred KV: pass True). Raises ValueError if the
        request could never fit in this worker's KV pool.
        """
        remaining = request.decode_tokens - request.generated_tokens
        if request.prompt_tokens + remaining + self._watermark + 1 > self.kv_capacity_tokens:
            raise ValueError(
                f"{self.worker_id}: request of {request.prompt_tokens}+{remaining} tokens "
                f"exceeds KV capacity {self.kv_capacity_tokens}"
            )
        self._advance_to(now_s)
        ready = self.role == Role.DECODE if kv_ready is None else kv_ready
        seq = Seq(request, now_s, prefilled=ready)
        self._waiting.append(seq)
        seg = self._seg
        if seg is not None and seg.is_decode_stretch and seg.start_s < now_s < seg.end_s:
            self._truncate_stretch(seg, now_s)

    def advance(self, now_s: float) -> list[Completion]:
        """Run to now_s; return the completions since the last call, in time order."""
        self._advance_to(now_s)
        done, self._done = self._done, []
        return done

    def pop_decode_starts(self) -> list[tuple[int, float]]:
        """(traj_id, time) of each request that began decoding here since the last call, in
        time order (its prompt done, or its transferred KV taken in). Recorded only with
        `config.report_decode_starts`; aborted requests are dropped."""
        out, self._decode_starts = self._decode_starts, []
        return out

    def next_change_time_s(self) -> float:
        """When to call `advance` next (math.inf: idle). Completions buffered by a late
        `submit` or `interrupt_all` make it the time of the first of them (<= now)."""
        if self._done:
            return self._done[0].t_end_s
        if self._seg is None and self._has_work():
            self._compose()
        seg = self._seg
        if seg is None:
            return math.inf
        if seg.chunks is not None:
            return self._after_mixed_s(seg)
        return seg.end_s

    def _cut_at(self, now_s: float) -> None:
        """Apply the iterations finished by now_s and drop the rest of the current segment
        (the iteration running at now_s is lost), so that the batch can change at now_s."""
        self._advance_to(now_s)
        seg = self._seg
        if seg is not None:
            n = self._iters_done_by(seg, now_s)
            if n > 0:
                self._apply(seg, n)
            self._seg = None
        self._t = max(self._t, now_s)

    def interrupt_all(self, now_s: float) -> list[Partial]:
        """Abort every request at now_s, keeping each one's generated tokens (paper §4.5).

        Iterations finished by now_s count; the one running at now_s is lost. The computed KV
        of interrupted requests stays as idle cached prefixes (unless this is a decode
        worker); `clear_cache()` drops it when the worker's device state goes away.
        """
        self._cut_at(now_s)
        out: list[Partial] = []
        for s in self._decoding.values():
            s.sync(self._dstep)
        for phase, seqs in (
            (Phase.DECODE, list(self._decoding.values())),
            (Phase.PREFILL, self._prefilling),
            (Phase.QUEUED, list(self._waiting)),
        ):
            for s in seqs:
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
                if self.role != Role.DECODE and phase != Phase.QUEUED:
                    kv = s.kv if phase == Phase.DECODE else s.prefill_done
                    self.cache.put(r.traj_id, kv)
        self._waiting.clear()
        self._prefilling.clear()
        self._decoding.clear()
        self._decode_starts.clear()
        self._finish_heap.clear()
        self._ctx_sum = 0
        self.kv.active_tokens = 0
        return out

    def withdraw(self, traj_id: int, now_s: float) -> int | None:
        """Abort trajectory `traj_id`'s request at now_s (the controller routed its turn
        elsewhere); returns its generated tokens, or None if this worker does not hold it.

        Iterations finished by now_s count; the one running at now_s is recomposed without
        it (the other requests lose that partial iteration, as on any abort). Its computed
        KV stays as an idle cached prefix unless this is a decode worker.
        """
        held = next(
            (
                q
                for q in (*self._waiting, *self._prefilling, *self._decoding.values())
                if q.req.traj_id == traj_id
            ),
            None,
        )
        if held is None:
            return None
        self._cut_at(now_s)
        self._decode_starts = [j for j in self._decode_starts if j[0] != traj_id]
        # the request may have finished in the iterations just applied
        if held in self._waiting:
            self._waiting.remove(held)
            return held.generated
        if held in self._prefilling:
            self._prefilling.remove(held)
            kv = held.prefill_done
        elif self._decoding.get(held.admit_no) is held:
            held.sync(self._dstep)
            del self._decoding[held.admit_no]
            self._ctx_sum -= held.kv
            kv = held.kv
        else:
            return None
        self.kv.release(held.alloc)
        if self.role != Role.DECODE:
            self.cache.put(traj_id, kv)
        return held.generated

    def set_role(self, role: Role) -> None:
        """Change role; only an empty worker may change (drain or interrupt it first)."""
        if self.num_in_flight:
            raise ValueError(f"{self.worker_id}: cannot change role with requests in flight")
        self.role = role

    def clear_cache(self) -> None:
        """Forget every cached prefix (device state released, e.g. GPU returned)."""
        self.cache.clear()

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
