"""The batching core of a simulated inference worker: state, composition of iterations,
and their application, advanced analytically between batch-changing events.

Iteration semantics (vLLM-like; paper §2, §4.3.1): at each iteration boundary the worker
composes one iteration from every decoding request (one token each), the prompt chunks of
admitted requests still prefilling, and new admissions from the FIFO queue, all under a
token budget (`max_batched_tokens`). So on a colocated worker prefill chunks share - and
lengthen - the iterations of the decodes: prefill interrupts decode. A prefill-only worker
hands requests back when their prompt is done (KV ready to transfer, first token sampled);
a decode-only worker takes requests whose KV has arrived and only decodes.

KV memory: the worker's pool (`KvPool`, `kv_capacity_tokens`) holds the running requests'
KV and the idle prefixes of the prefix cache. Admission allocates the whole prompt (FIFO head-of-line
blocking when it does not fit, after evicting idle prefixes LRU, each from its tail); decode
growth evicts idle prefixes and then preempts the most recently admitted request, which keeps
its generated tokens and recomputes later what of its KV was evicted meanwhile (preemption
with recompute; its KV waits as an idle prefix, as vLLM V1 keeps it in the prefix cache).

Speed: iterations are grouped into segments that change nothing observable inside them:
a stretch of identical decode-only iterations (timed in closed form by the hardware model)
or one or a few mixed iterations. A segment is composed at a boundary with the state it
sees; a decode stretch is cut short at the first boundary after a new submission.

The public driving API is `pearl.sim.physics.inference.InferenceWorker`, a subclass.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections import deque

from pearl.control.state import Role
from pearl.sim.physics.inference_types import Completion, CompletionKind, WorkerConfig
from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.physics.kv_pool import KvPool
from pearl.sim.physics.prefix_cache import PrefixCache
from pearl.sim.physics.worker_state import Segment, Seq, WorkerStats


class BatchingCore:
    """State and internals of one simulated worker (see the module docstring)."""

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
        self.kv_capacity_tokens = hardware.kv_capacity_tokens
        if self.kv_capacity_tokens <= 0:
            raise ValueError(f"{worker_id}: weights do not fit on {hardware.tp} GPU(s)")
        self._watermark = math.ceil(self.config.kv_watermark_fraction * self.kv_capacity_tokens)
        self._chunk_kv = self.config.admission == "first_chunk"  # KV allocated chunk by chunk
        self.cache = PrefixCache(
            int(self.config.prefix_cache_fraction * self.kv_capacity_tokens),
            enabled=self.config.prefix_caching,
        )
        self.kv = KvPool(self.kv_capacity_tokens, self.cache)
        self.role = role
        self._t = now_s  # last iteration boundary (or last idle time)
        self._waiting: deque[Seq] = deque()
        self._prefilling: list[Seq] = []
        # Decoding requests by admission number. Their generated/kv counters are kept lazily:
        # every iteration includes every decoding request, so a request that joined at
        # decode step d0 has advanced by (self._dstep - d0); `_finish_heap` orders them by
        # the decode step at which they finish. `Seq.sync` materialises the counters.
        self._decoding: dict[int, Seq] = {}
        self._dstep = 0
        self._finish_heap: list[tuple[int, int, Seq]] = []
        self._ctx_sum = 0  # sum of the decoding requests' KV tokens
        self._seg: Segment | None = None
        self._admissions = 0
        self._done: list[Completion] = []
        self._decode_starts: list[tuple[int, float]] = []  # (traj, time); when reported
        self.stats = WorkerStats()
        self._stats_mark = (now_s, self.stats.snapshot())

    @property
    def budget_tokens(self) -> int:
        c = self.config
        return c.prefill_max_batched_tokens if self.role == Role.PREFILL else c.max_batched_tokens

    def _after_mixed_s(self, seg: Segment) -> float:
        """End of the decode stretch that follows the mixed segment `seg` when nothing
        observable happens at seg's end (its prompts all finish and join the decodes, no
        request completes, nothing else waits, the KV has room): then the world need not
        wake up in between. Otherwise seg's own end. Exact: the same arithmetic as
        `_compose` and `_decode_stretch` will do at that boundary."""
        end = seg.end_s
        chunks = seg.chunks
        if chunks is None or self._waiting or self.role == Role.PREFILL:
            return end
        if self.config.report_decode_starts:
            return end  # the joins at seg's end are observable
        if len(self._prefilling) != len(chunks):
            return end
        n, d = seg.iters, seg.d
        min_left = self._min_decode_left() - n if d else math.inf
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
        room = self.kv.room_tokens - d * n  # after seg
        if self._chunk_kv:
            room -= sum(c for _, c in chunks) * n
        if room < d2:
            return end
        k = min(int(min_left), room // d2)
        return end + self.hw.decode_stretch_time_s(d2, self._ctx_sum + d * n + joiners_kv, k)

    # -- internals: time -------------------------------------------------------------------

    def _has_work(self) -> bool:
        return bool(self._waiting or self._prefilling or self._decoding)

    def _advance_to(self, now_s: float) -> None:
        while True:
            seg = self._seg
            if seg is None:
                if not self._has_work():
                    self._t = max(self._t, now_s)
                    return
                if self._t >= now_s:
                    return  # compose lazily: more submissions may come at this instant
                self._compose()
                seg = self._seg
                assert seg is not None
            if seg.end_s > now_s:
                return
            self._apply(seg, seg.iters)
            self._seg = None

    def _seg_time(self, seg: Segment, n: int) -> float:
        if n <= 0:
            return 0.0
        if seg.is_decode_stretch:
            return self.hw.decode_stretch_time_s(seg.d, seg.ctx0, n)
        return seg.ends[n - 1] - seg.start_s

    def _iters_done_by(self, seg: Segment, t_s: float) -> int:
        if seg.is_decode_stretch:
            return self.hw.decode_steps_within(seg.d, seg.ctx0, t_s - seg.start_s, seg.iters)[0]
        return bisect_right(seg.ends, t_s)

    def _truncate_stretch(self, seg: Segment, now_s: float) -> None:
        """End the stretch at its first boundary at or after now_s (a new arrival joins)."""
        k, elapsed = self.hw.decode_steps_within(seg.d, seg.ctx0, now_s - seg.start_s, seg.iters)
        if seg.start_s + elapsed < now_s:
            k += 1
        if k < seg.iters:
            seg.iters = k
            seg.end_s = seg.start_s + self._seg_time(seg, k)

    # -- internals: composing an iteration (or a stretch of identical ones) --------------

    def _preempt_last(self) -> None:
        """Preempt the most recently admitted running request. Its computed KV stays as its
        trajectory's idle prefix (most recently used), as vLLM V1 keeps a preempted
        request's blocks in its prefix cache: readmitted before they are evicted, it
        recomputes only what was lost."""
        victim = max([*self._decoding.values(), *self._prefilling], key=lambda s: s.admit_no)
        if victim.in_decode:
            victim.sync(self._dstep)
            del self._decoding[victim.admit_no]
            self._ctx_sum -= victim.kv
            computed = victim.kv
        else:
            self._prefilling.remove(victim)
            computed = victim.prefill_done
        self.kv.release(victim.alloc)
        victim.preempt()
        self.cache.put(victim.req.traj_id, computed)
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
            if self._chunk_kv:
                grow += sum(n for _, n in chunks)
            if self.kv.make_room(grow):
                return chunks, grow, preempted
            self._preempt_last()
            preempted = True

    def _reused_tokens(self, seq: Seq, own: int) -> int:
        """Tokens of `seq`'s prompt it may take from its trajectory's idle prefix of `own`."""
        if seq.prefilled:
            return 0
        prompt = seq.prompt
        if seq.num_preemptions:  # what it computed here before: its own tokens
            return min(own, prompt - 1)
        if seq.req.full_prefill:
            return 0
        cached = min(own, prompt - 1)
        if seq.req.reusable_prefix_tokens is not None:
            cached = min(cached, seq.req.reusable_prefix_tokens)
        return cached

    def _try_admit(self, seq: Seq, budget: int, committed: int) -> int | None:
        """Admit `seq` if its KV fits once idle prefixes are evicted, beside the `committed`
        tokens this iteration already adds (a scheduler allocates the running requests'
        slots before it admits); returns the tokens its admission adds to this iteration
        (None: it does not fit, and nothing was evicted: FIFO head-of-line blocking).

        Its KV: the whole prompt and one token of growth (`admission` "prompt"), or its
        cached prefix and its first chunk of at most `budget` tokens ("first_chunk"); a
        request whose KV was transferred here takes all of it either way. Its own cached
        prefix becomes part of its KV."""
        prompt = seq.prompt
        own_cached = self.cache.peek(seq.req.traj_id)
        cached = self._reused_tokens(seq, own_cached)
        if self._chunk_kv and not seq.prefilled:
            alloc, adds = cached, min(prompt - cached, budget)
        else:
            alloc, adds = prompt, 1 if seq.prefilled else 0
        need = alloc + max(adds, 1) + self._watermark + committed
        # the room includes this trajectory's own prefix, which is reused, not evicted
        if self.kv.room_tokens < need:
            return None
        self.cache.take(seq.req.traj_id)
        self.kv.make_room(need)
        if seq.num_preemptions:
            self.cache.record_readmission(cached)
        elif not seq.prefilled:
            self.cache.record_lookup(cached)
        self._admissions += 1
        seq.admit(self._admissions, self._t, cached, alloc)
        self.kv.allocate(alloc)
        return adds

    def _compose(self) -> None:
        """Compose the segment starting at the current boundary `self._t`."""
        t = self._t
        cfg = self.config
        chunks, committed, preempted = self._plan_running()
        budget = self.budget_tokens - len(self._decoding) - sum(n for _, n in chunks)
        running = len(self._decoding) + len(self._prefilling)
        if preempted and running:
            budget = 0  # a step that preempts admits nothing (vLLM V1's scheduler)
        while self._waiting and budget > 0 and running < cfg.max_num_seqs:
            s = self._waiting[0]
            assert s.t_submit_s <= t, "a request was composed before it arrived"
            adds = self._try_admit(s, budget, committed)
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
        if chunks:
            self._seg = self._mixed_segment(t, d, chunks)
        elif d:
            self._seg = self._decode_stretch(t, d)
        else:
            assert not self._waiting, "work is waiting but nothing can run"
            self._seg = None

    def _growth_steps(self, grow: int, want: int) -> int:
        """Iterations (<= want) that can each add `grow` KV tokens without preempting: into
        free KV, then into idle prefixes' (`_apply` settles the eviction at the segment's
        end, `KvPool.settle`), so a segment need not stop where free KV runs out."""
        if grow == 0:
            return want
        return max(1, min(want, self.kv.room_tokens // grow))

    def _decode_stretch(self, t: float, d: int) -> Segment:
        k = self._min_decode_left()
        k = self._growth_steps(d, k)
        seg = Segment(t, d, self._ctx_sum, None, k)
        seg.end_s = t + self.hw.decode_stretch_time_s(d, self._ctx_sum, k)
        return seg

    def _mixed_segment(self, t: float, d: int, chunks: list[tuple[Seq, int]]) -> Segment:
        iters = 1
        if len(chunks) == 1:
            s, n = chunks[0]
            full = (s.prefill_left - 1) // n  # identical iterations before the final chunk
            if full > 1:
                want = min(full, self._min_decode_left()) if d else full
                iters = self._growth_steps(d + (n if self._chunk_kv else 0), want)
        seg = Segment(t, d, self._ctx_sum, chunks, iters)
        hw = self.hw
        ends: list[float] = []
        pre: list[float] = []
        now, ctx = t, self._ctx_sum
        for i in range(iters):
            tokens = prefix = logits = 0
            pairs = 0.0
            for s, n in chunks:
                pos = s.prefill_done + i * n
                tokens += n
                pairs += hw.chunk_pairs(pos, n)
                prefix += pos
                logits += pos + n >= s.prompt
            dt = hw.iteration_time_s(
                num_prefill_tokens=tokens,
                prefill_pairs=pairs,
                prefill_prefix_tokens=prefix,
                num_prefill_logits=logits,
                num_decode=d,
                decode_context_tokens=ctx,
            )
            pre.append(dt - (hw.decode_step_time_s(d, ctx) if d else 0.0))
            now += dt
            ends.append(now)
            ctx += d
        seg.ends = ends
        seg.prefill_s = pre
        seg.end_s = ends[-1]
        return seg

    # -- internals: applying a segment -----------------------------------------------------

    def _apply(self, seg: Segment, n: int) -> None:
        """Apply the first n iterations of `seg` (all of them unless interrupted)."""
        t_end = seg.end_s if n == seg.iters else seg.start_s + self._seg_time(seg, n)
        d = seg.d
        st = self.stats
        st.num_segments += 1
        st.num_iterations += n
        st.busy_s += t_end - seg.start_s
        if d:
            st.decode_iterations += n
            st.decode_tokens += d * n
            st.decode_seq_steps += d * n
            st.decode_context_steps += n * seg.ctx0 + d * n * (n - 1) / 2
            self._dstep += n
            self._ctx_sum += d * n
            self.kv.allocate(d * n)
        self._t = t_end
        finished_prefill: list[Seq] = []
        if seg.chunks is not None:
            st.prefill_busy_s += sum(seg.prefill_s[:n])
            for s, c in seg.chunks:
                s.prefill_done += c * n
                st.prefill_tokens += c * n
                s.new_prefill += c * n
                if self._chunk_kv:
                    s.kv += c * n
                    self.kv.allocate(c * n)
                if s.prefill_done >= s.prompt:
                    finished_prefill.append(s)
        self.kv.settle()  # the growth took idle prefixes' KV, iteration by iteration
        heap = self._finish_heap
        while heap and heap[0][0] <= self._dstep:
            _, no, s = heapq.heappop(heap)
            if self._decoding.get(no) is s:  # else stale (preempted since)
                del self._decoding[no]
                s.sync(self._dstep)
                self._finish(s, t_end)
        for s in finished_prefill:
            self._prefilling.remove(s)
            s.finish_prefill(t_end)
            if self.role == Role.PREFILL or s.left <= 0:
                self._finish(s, t_end)
            else:
                self._join_decode(s, t_end)

    def _join_decode(self, s: Seq, t_s: float) -> None:
        s.start_decode(t_s, self._dstep)
        self._decoding[s.admit_no] = s
        self._ctx_sum += s.kv
        heapq.heappush(self._finish_heap, (s.d_finish, s.admit_no, s))
        if self.config.report_decode_starts:
            self._decode_starts.append((s.req.traj_id, t_s))

    def _min_decode_left(self) -> int:
        """Decode steps until the first decoding request finishes (>= 1)."""
        heap = self._finish_heap
        while self._decoding.get(heap[0][1]) is not heap[0][2]:
            heapq.heappop(heap)  # stale entry of a preempted request
        return heap[0][0] - self._dstep

    def _finish(self, s: Seq, t_end: float) -> None:
        r = s.req
        if s.in_decode:
            self._ctx_sum -= s.kv
        self.kv.release(s.alloc)
        prefill_role = self.role == Role.PREFILL
        kind = CompletionKind.PREFILL if prefill_role else CompletionKind.DECODE
        if self.role != Role.DECODE:
            self.cache.put(r.traj_id, s.kv)
        self._done.append(
            Completion(
                kind=kind,
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
                t_decode_end_s=None if prefill_role else t_end,
            )
        )
