"""The times of a simulated worker's segments, from the hardware model (pure functions).

A segment (`worker_state.Segment`) is a run of iterations with a fixed composition: a
stretch of identical decode-only iterations, timed in closed form, or one or a few mixed
iterations (prompt chunks beside the decodes), timed one by one. The worker's batching core
(`pearl.sim.physics.batching`) decides what a segment holds; these functions say when each
of its iterations ends.
"""

from __future__ import annotations

from bisect import bisect_right

from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.physics.worker_state import Segment, Seq


def decode_stretch(hw: WorkerHardware, t_s: float, d: int, ctx_sum: int, iters: int) -> Segment:
    """`iters` decode-only iterations of `d` requests whose contexts sum to ctx_sum, from t_s."""
    seg = Segment(t_s, d, ctx_sum, None, iters)
    seg.end_s = t_s + hw.decode_stretch_time_s(d, ctx_sum, iters)
    return seg


def mixed_segment(
    hw: WorkerHardware,
    t_s: float,
    d: int,
    ctx_sum: int,
    chunks: list[tuple[Seq, int]],
    iters: int,
) -> Segment:
    """`iters` iterations from t_s, each with `d` decodes and the same prompt chunks (a
    chunk goes on from where the one before it stopped). Each iteration's time beyond what
    its decodes alone would take is attributed to prefill (`Segment.prefill_s`)."""
    seg = Segment(t_s, d, ctx_sum, chunks, iters)
    ends: list[float] = []
    pre: list[float] = []
    now, ctx = t_s, ctx_sum
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


def elapsed_s(hw: WorkerHardware, seg: Segment, n: int) -> float:
    """Time of the first n iterations of `seg`."""
    if n <= 0:
        return 0.0
    if seg.is_decode_stretch:
        return hw.decode_stretch_time_s(seg.d, seg.ctx0, n)
    return seg.ends[n - 1] - seg.start_s


def iters_done_by(hw: WorkerHardware, seg: Segment, t_s: float) -> int:
    """Iterations of `seg` finished by t_s."""
    if seg.is_decode_stretch:
        return hw.decode_steps_within(seg.d, seg.ctx0, t_s - seg.start_s, seg.iters)[0]
    return bisect_right(seg.ends, t_s)


def truncate_stretch(hw: WorkerHardware, seg: Segment, now_s: float) -> None:
    """End the decode stretch `seg` at its first boundary at or after now_s (a new arrival
    joins there)."""
    k, elapsed = hw.decode_steps_within(seg.d, seg.ctx0, now_s - seg.start_s, seg.iters)
    if seg.start_s + elapsed < now_s:
        k += 1
    if k < seg.iters:
        seg.iters = k
        seg.end_s = seg.start_s + elapsed_s(hw, seg, k)
