"""The batching core of a simulated inference worker: its requests, their KV, and the
iterations that advance them, run analytically between batch-changing events.

Iteration semantics (vLLM-like; paper §2, §4.3.1): at each iteration boundary the worker
composes one iteration from every decoding request (one token each), the prompt chunks of
admitted requests still prefilling, and new admissions from the FIFO queue, all under a
token budget (`max_batched_tokens`). So on a colocated worker prefill chunks share - and
lengthen - the iterations of the decodes: prefill interrupts decode. A prefill-only worker
hands requests back when their prompt is done (KV ready to transfer, first token sampled);
a decode-only worker takes requests whose KV has arrived and only decodes.

KV memory: the worker's pool (`KvPool`, `kv_capacity_tokens`) holds the running requests'
KV and the idle prefixes of the prefix cache. Admission allocates the request's first chunk
beside its cached prefix (`WorkerConfig.admission` "first_chunk", vLLM up to 0.11) or its
whole prompt ("prompt"), evicting idle prefixes LRU, each from its tail; when it does not
fit, the head of the FIFO queue blocks the rest. Decode growth evicts idle prefixes and then
preempts the most recently admitted request, which keeps its generated tokens and recomputes
later what of its KV was evicted meanwhile (its KV waits as an idle prefix, as vLLM V1 keeps
it in the prefix cache).

Speed: iterations are grouped into segments that change nothing observable inside them:
a stretch of identical decode-only iterations (timed in closed form by the hardware model,
`segment_time`) or one or a few mixed iterations. A segment is composed at a boundary with
the state it sees; a decode stretch is cut short at the first boundary after a new
submission.

The core is held by `pearl.sim.physics.inference.InferenceWorker`, the driving API, which
calls it; it is not part of the public API.
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple

from pearl.control.state import Role
from pearl.sim.physics import segment_time
from pearl.sim.physics.decode_set import DecodeSet
from pearl.sim.physics.inference_types import CompletionKind, Phase, WorkerConfig
from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.physics.kv_admission import KvAdmission
from pearl.sim.physics.prefix_cache import PrefixCache
from pearl.sim.physics.worker_state import Segment, Seq, WorkerStats


class Finished(NamedTuple):
    """A turn done on the worker: a prompt handed back by a prefill worker (PREFILL) or a
    turn decoded to its end or its last token (DECODE)."""

    t_end_s: float
    kind: CompletionKind
    seq: Seq


class BatchingCore:
    """The requests of one simulated worker and the iterations that advance them (see the
    module docstring). Raises ValueError when the weights leave no KV room on `hardware`."""

    def __init__(
        self,
        worker_id: str,
        hardware: WorkerHardware,
        role: Role,
        config: WorkerConfig,
        *,
        now_s: float,
    ) -> None:
        self.worker_id = worker_id
        self.hw = hardware
        self.config = config
        self.kv_capacity_tokens = hardware.kv_capacity_tokens
        if self.kv_capacity_tokens <= 0:
            raise ValueError(f"{worker_id}: weights do not fit on {hardware.tp} GPU(s)")
        self._mem = KvAdmission(self.kv_capacity_tokens, config)
        self.role = role
        self.t_s = now_s  # last iteration boundary (or last idle time)
        self._waiting: deque[Seq] = deque()
        self._prefilling: list[Seq] = []
        self._decoding = DecodeSet()
        self._seg: Segment | None = None
        self._done: list[Finished] = []
        self._decode_starts: list[tuple[int, float]] = []  # (traj, time); when reported
        self.stats = WorkerStats()

    # -- what the worker holds ---------------------------------------------------------

    @property
    def budget_tokens(self) -> int:
        c = self.config
        return c.prefill_max_batched_tokens if self.role == Role.PREFILL else c.max_batched_tokens

    @property
    def cache(self) -> PrefixCache:
        return self._mem.cache

    @property
    def kv_used_tokens(self) -> int:
        """KV held by running requests (idle cached prefixes excluded)."""
        return self._mem.kv.active_tokens

    @property
    def watermark_tokens(self) -> int:
        return self._mem.watermark

    @property
    def num_in_flight(self) -> int:
        return len(self._waiting) + len(self._prefilling) + len(self._decoding)

    @property
    def num_decoding(self) -> int:
        return len(self._decoding)

    def requests(self) -> list[tuple[Phase, Seq]]:
        """Every request held, decoding first, then prefilling, then queued."""
        return [
            *((Phase.DECODE, s) for s in self._decoding),
            *((Phase.PREFILL, s) for s in self._prefilling),
            *((Phase.QUEUED, s) for s in self._waiting),
        ]

    # -- what the host calls -----------------------------------------------------------

    def enqueue(self, seq: Seq, now_s: float) -> None:
        """Queue `seq` at now_s; it joins the first iteration that starts at or after now_s."""
        self.advance_to(now_s)
        self._waiting.append(seq)
        seg = self._seg
        if seg is not None and seg.is_decode_stretch and seg.start_s < now_s < seg.end_s:
            segment_time.truncate_stretch(self.hw, seg, now_s)

    def take_done(self) -> list[Finished]:
        """The turns done since the last call, in time order."""
        done, self._done = self._done, []
        return done

    def take_decode_starts(self) -> list[tuple[int, float]]:
        out, self._decode_starts = self._decode_starts, []
        return out

    def next_change_time_s(self) -> float:
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

    def advance_to(self, now_s: float) -> None:
        while True:
            seg = self._seg
            if seg is None:
                if not self._has_work():
                    self.t_s = max(self.t_s, now_s)
                    return
                if self.t_s >= now_s:
                    return  # compose lazily: more submissions may come at this instant
                self._compose()
                seg = self._seg
                assert seg is not None
            if seg.end_s > now_s:
                return
            self._apply(seg, seg.iters)
            self._seg = None

    def abort_all(self, now_s: float) -> list[tuple[Phase, Seq]]:
        """Abort every request at now_s (see `requests` for the order): iterations finished
        by now_s count, the one running is lost; the computed KV of those that ran stays as
        idle prefixes (unless this is a decode worker)."""
        self._cut_at(now_s)
        self._decoding.sync_all()
        held = self.requests()
        for phase, s in held:
            if self.role != Role.DECODE and phase != Phase.QUEUED:
                self._mem.cache.put(
                    s.req.traj_id, s.kv if phase == Phase.DECODE else s.prefill_done
                )
        self._waiting.clear()
        self._prefilling.clear()
        self._decoding.clear()
        self._decode_starts.clear()
        self._mem.kv.release_all()
        return held

    def abort(self, traj_id: int, now_s: float) -> Seq | None:
        """Abort `traj_id`'s request at now_s; None if it is not held (or finished in the
        iterations done by now_s). The running iteration is recomposed without it; its
        computed KV stays as an idle prefix unless this is a decode worker."""
        held = next((s for _, s in self.requests() if s.req.traj_id == traj_id), None)
        if held is None:
            return None
        self._cut_at(now_s)
        self._decode_starts = [j for j in self._decode_starts if j[0] != traj_id]
        if held in self._waiting:
            self._waiting.remove(held)
            return held
        if held in self._prefilling:
            self._prefilling.remove(held)
            kv = held.prefill_done
        elif self._decoding.holds(held):
            self._decoding.remove(held)
            kv = held.kv
        else:
            return None
        self._mem.kv.release(held.alloc)
        if self.role != Role.DECODE:
            self._mem.cache.put(traj_id, kv)
        return held

    # -- internals: time -------------------------------------------------------------------

    def _has_work(self) -> bool:
        return bool(self._waiting or self._prefilling or self._decoding)

    def _cut_at(self, now_s: float) -> None:
        """Apply the iterations finished by now_s and drop the rest of the current segment
        (the iteration running at now_s is lost), so that the batch can change at now_s."""
        self.advance_to(now_s)
        seg = self._seg
        if seg is not None:
            n = segment_time.iters_done_by(self.hw, seg, now_s)
            if n > 0:
                self._apply(seg, n)
            self._seg = None
        self.t_s = max(self.t_s, now_s)

    def _after_mixed_s(self, seg: Segment) -> float:
        """End of the decode stretch that follows the mixed segment `seg` when nothing
        observable happens at seg's end (its prompts all finish and join the decodes, no
        request completes, nothing else waits, the KV has room): then the world need not
        wake up in between. Otherwise seg's own end. Exact: the same arithmetic as
        `_compose` and `segment_time.decode_stretch` will do at that boundary."""
        end = seg.end_s
        chunks = seg.chunks
        if chunks is None or self._waiting or self.role == Role.PREFILL:
            return end
        if self.config.report_decode_starts:
            return end  # the joins at seg's end are observable
        if len(self._prefilling) != len(chunks):
            return end
        n, d = seg.iters, seg.d
        min_left = self._decoding.steps_to_next_finish() - n if d else math.inf
        if min_left <= 0:
            return end
        joiners_kv = 0
        for s, c in chunks:
            left = s.left - 1  # the last chunk samples the first token
            if s.prefill_done + c * n < s.prompt or left <= 0:
                return end
            joiners_kv += s.prompt
            min_left = min(min_left, left)
        d2 = d + len(chunks)
        room = self._mem.kv.room_tokens - d * n  # after seg
        if self._mem.chunk_kv:
            room -= sum(c for _, c in chunks) * n
        if room < d2:
            return end
        k = min(int(min_left), room // d2)
        ctx = self._decoding.ctx_sum + d * n + joiners_kv
        return end + self.hw.decode_stretch_time_s(d2, ctx, k)

    # -- internals: composing an iteration (or a stretch of identical ones) --------------

    def _preempt_last(self) -> None:
        """Preempt the most recently admitted running request. Its computed KV stays as its
        trajectory's idle prefix (most recently used), as vLLM V1 keeps a preempted
        request's blocks in its prefix cache: readmitted before they are evicted, it
        recomputes only what was lost."""
        victim = max([*self._decoding, *self._prefilling], key=lambda s: s.admit_no)
        if victim.in_decode:
            self._decoding.remove(victim)
            computed = victim.kv
        else:
            self._prefilling.remove(victim)
            computed = victim.prefill_done
        self._mem.kv.release(victim.alloc)
        victim.preempt()
        self._mem.cache.put(victim.req.traj_id, computed)
        self.stats.num_preemptions += 1
        self._waiting.appendleft(victim)

    def _plan_running(self) -> tuple[list[tuple[Seq, int]], int, bool]:
        """This iteration's prompt chunks of the admitted requests (in admission order,
        under the token budget left by the decodes), the KV tokens the iteration adds (a
        token per decode, and each chunk where the worker allocates KV chunk by chunk), and
        whether it had to preempt: idle prefixes are evicted, then the most recently
        admitted running requests preempted (their KV becoming idle prefixes in turn) until
        the rest fit."""
        preempted = False
        while True:
            budget = self.budget_tokens - len(self._decoding)
            chunks: list[tuple[Seq, int]] = []
            for s in self._prefilling:
                if budget <= 0:
                    break
                n = min(s.prefill_left, budget)
                chunks.append((s, n))
                budget -= n
            grow = len(self._decoding)
            if self._mem.chunk_kv:
                grow += sum(n for _, n in chunks)
            if self._mem.kv.make_room(grow):
                return chunks, grow, preempted
            self._preempt_last()
            preempted = True

    def _compose(self) -> None:
        """Compose the segment starting at the current boundary `self.t_s`."""
        t = self.t_s
        cfg = self.config
        chunks, committed, preempted = self._plan_running()
        budget = self.budget_tokens - len(self._decoding) - sum(n for _, n in chunks)
        running = len(self._decoding) + len(self._prefilling)
        if preempted and running:
            budget = 0  # a step that preempts admits nothing (vLLM V1's scheduler)
        while self._waiting and budget > 0 and running < cfg.max_num_seqs:
            s = self._waiting[0]
            assert s.t_submit_s <= t, "a request was composed before it arrived"
            adds = self._mem.try_admit(s, budget, committed, t)
            if adds is None:
                break
            committed += adds
            self._waiting.popleft()
            running += 1
            if s.prefilled:  # KV arrived (decode worker): decode from this iteration on
                self._join_decode(s, t)
                budget -= 1
            else:
                s.t_prefill_start_s = t
                self._prefilling.append(s)
                n = min(s.prefill_left, budget)
                chunks.append((s, n))
                budget -= n
        d = len(self._decoding)
        ctx = self._decoding.ctx_sum
        if chunks:
            iters = 1
            if len(chunks) == 1:
                s, n = chunks[0]
                full = (s.prefill_left - 1) // n  # identical iterations before the final chunk
                if full > 1:
                    want = min(full, self._decoding.steps_to_next_finish()) if d else full
                    iters = self._growth_steps(d + (n if self._mem.chunk_kv else 0), want)
            self._seg = segment_time.mixed_segment(self.hw, t, d, ctx, chunks, iters)
        elif d:
            k = self._growth_steps(d, self._decoding.steps_to_next_finish())
            self._seg = segment_time.decode_stretch(self.hw, t, d, ctx, k)
        else:
            assert not self._waiting, "work is waiting but nothing can run"
            self._seg = None

    def _growth_steps(self, grow: int, want: int) -> int:
        """Iterations (<= want) that can each add `grow` KV tokens without preempting: into
        free KV, then into idle prefixes' (`_apply` settles the eviction at the segment's
        end, `KvPool.settle`), so a segment need not stop where free KV runs out."""
        if grow == 0:
            return want
        return max(1, min(want, self._mem.kv.room_tokens // grow))

    # -- internals: applying a segment -----------------------------------------------------

    def _apply(self, seg: Segment, n: int) -> None:
        """Apply the first n iterations of `seg` (all of them unless interrupted)."""
        t_end = (
            seg.end_s if n == seg.iters else seg.start_s + segment_time.elapsed_s(self.hw, seg, n)
        )
        d = seg.d
        st = self.stats
        st.num_segments += 1
        st.num_iterations += n
        st.busy_s += t_end - seg.start_s
        kv = self._mem.kv
        if d:
            st.decode_iterations += n
            st.decode_tokens += d * n
            st.decode_seq_steps += d * n
            st.decode_context_steps += n * seg.ctx0 + d * n * (n - 1) / 2
            self._decoding.advance(n)
            kv.allocate(d * n)
        self.t_s = t_end
        finished_prefill: list[Seq] = []
        if seg.chunks is not None:
            st.prefill_busy_s += sum(seg.prefill_s[:n])
            for s, c in seg.chunks:
                s.prefill_done += c * n
                st.prefill_tokens += c * n
                s.new_prefill += c * n
                if self._mem.chunk_kv:
                    s.kv += c * n
                    kv.allocate(c * n)
                if s.prefill_done >= s.prompt:
                    finished_prefill.append(s)
        kv.settle()  # the growth took idle prefixes' KV, iteration by iteration
        for s in self._decoding.pop_finished():
            self._finish(s, t_end)
        for s in finished_prefill:
            self._prefilling.remove(s)
            s.finish_prefill(t_end)
            if self.role == Role.PREFILL or s.left <= 0:
                self._finish(s, t_end)
            else:
                self._join_decode(s, t_end)

    def _join_decode(self, s: Seq, t_s: float) -> None:
        self._decoding.add(s, t_s)
        if self.config.report_decode_starts:
            self._decode_starts.append((s.req.traj_id, t_s))

    def _finish(self, s: Seq, t_end: float) -> None:
        """`s`'s turn is done here at t_end (taken out of the decodes, if it decoded): its
        KV is released, and kept as an idle prefix unless this is a decode worker."""
        self._mem.kv.release(s.alloc)
        if self.role != Role.DECODE:
            self._mem.cache.put(s.req.traj_id, s.kv)
        kind = CompletionKind.PREFILL if self.role == Role.PREFILL else CompletionKind.DECODE
        self._done.append(Finished(t_end, kind, s))
