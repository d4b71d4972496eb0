"""Simulated inference workers, hand-computed cases (paper-level acceptance): prefill and
decode timing, chunked prefill, disaggregated KV transfer, prefix-cache hits, and the
wake-ups the worker asks the event loop for."""

import math

import pytest
from sim_toys import toy

from pearl.control.state import Role
from pearl.sim.physics.inference import InferenceWorker
from pearl.sim.physics.inference_types import CompletionKind, Request, WorkerConfig
from pearl.sim.physics.iteration import HardwareParams

from ._inference_helpers import run


def test_one_request_alone_on_one_worker():
    """Prefill of the whole prompt (samples token 1), then 99 decode steps, by hand."""
    w = InferenceWorker("w", toy())
    [c] = run(w, [(0.0, Request(7, 0, 1000, 100))])
    # see test_hardware: the dense layers on their smooth roofline (compute side 2.00002e11
    # flops at 1e12, memory side 202e6 B at 1e11) + the prompt's attention, 2.002e10 flops
    prefill = math.hypot(0.200002, 2.02e-3) + 0.02002
    # decode step n: dense hypot(2.02e8 flops at 1e12, 202e6 B at 1e11) + the KV read of
    # 8000 * (1000 + n + 1) B at 1e11 B/s, n = 0..98
    dense = math.hypot(2.02e-4, 2.02e-3)
    decode = sum(dense + 8000 * (1000 + n + 1) / 1e11 for n in range(99))
    assert c.t_prefill_end_s == pytest.approx(prefill, rel=1e-12)
    assert c.t_decode_end_s == pytest.approx(prefill + decode, rel=1e-12)
    assert (c.generated_tokens, c.decode_steps, c.new_prefill_tokens) == (100, 99, 1000)
    assert c.kind == CompletionKind.DECODE and c.finished and c.cached_prefix_tokens == 0
    s = w.take_stats(c.t_decode_end_s)
    assert s.num_iterations == 100 and s.prefill_tokens == 1000 and s.decode_tokens == 99
    assert s.busy_s == pytest.approx(c.t_decode_end_s)
    assert s.prefill_busy_s == pytest.approx(prefill)


def test_prefill_interrupts_decode():
    """A prompt arriving mid-decode shares (and lengthens) one iteration of the decode:
    the decoding request finishes later by exactly (mixed - decode-only) iteration time."""
    cfg = WorkerConfig(max_batched_tokens=4096)
    alone = run(InferenceWorker("w", toy(), config=cfg), [(0.0, Request(1, 0, 1000, 200))])[0]
    w = InferenceWorker("w", toy(), config=cfg)
    t_arr = 0.3  # during A's decode (its prefill ends at 0.220022)
    a, b = run(w, [(0.0, Request(1, 0, 1000, 200)), (t_arr, Request(2, 0, 3000, 10))])
    assert (a.traj_id, b.traj_id) == (1, 2) or (b.traj_id, a.traj_id) == (1, 2)
    a, b = sorted([a, b], key=lambda c: c.traj_id)
    hw = toy()
    # B joins at the first boundary after t_arr: A's decode steps are (202e6+8000*(1001+n))/1e11
    t, n = alone.t_prefill_end_s, 0
    while t < t_arr:
        t += hw.decode_step_time_s(1, 1000 + n)
        n += 1
    assert b.t_prefill_start_s == pytest.approx(t, rel=1e-12)
    # the mixed iteration: B's 3000-token prompt (one chunk) + A's decode token at 1000+n,
    # each operator group on its own roofline: dense layers (3001 tokens, 2 logits, their
    # smooth roofline, near the compute side), the chunk's attention (compute-bound), A's
    # attention (memory-bound: its KV read of 1000+n tokens plus the one it writes)
    linear = math.hypot((2e8 * 3001 + 2e6 * 2) / 1e12, 202e6 / 1e11)
    chunk_attention = 4e4 * (3000 * 3001 / 2) / 1e12
    decode_attention = 8000 * (1000 + n + 1) / 1e11
    mixed = linear + chunk_attention + decode_attention
    assert b.t_prefill_end_s - b.t_prefill_start_s == pytest.approx(mixed, rel=1e-12)
    extra = mixed - hw.decode_step_time_s(1, 1000 + n)
    # B then decodes 9 more tokens beside A: both decode steps read both contexts
    both = sum(hw.decode_step_time_s(2, 1000 + n + 1 + 3000 + 2 * j) for j in range(9))
    alone_same = sum(hw.decode_step_time_s(1, 1000 + n + 1 + j) for j in range(9))
    assert a.t_decode_end_s == pytest.approx(alone.t_decode_end_s + extra + both - alone_same)
    assert a.t_decode_end_s > alone.t_decode_end_s + 0.1  # a 3000-token prefill stalls A


def test_chunked_prefill_splits_a_long_prompt_under_the_budget():
    """A 10,000-token prompt with a 4,096-token budget takes three iterations (4096, 4096,
    1808), each timed with its position, the last one sampling the first token."""
    hw = toy()
    w = InferenceWorker("w", hw, config=WorkerConfig(max_batched_tokens=4096))
    [c] = run(w, [(0.0, Request(1, 0, 10_000, 1))])
    assert c.t_prefill_end_s == pytest.approx(hw.prefill_time_s(10_000, chunk_tokens=4096))
    assert c.decode_steps == 0 and c.generated_tokens == 1
    assert w.take_stats(c.t_end_s).num_iterations == 3


def test_kv_transfer_between_prefill_and_decode_workers():
    """Disaggregated turn: prefill worker (samples token 1) -> KV transfer -> decode worker."""
    p = HardwareParams(
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        iteration_overhead_s=0.0,
        per_seq_overhead_s=0.0,
        activation_reserve_bytes=0.0,
        transfer_latency_s=0.001,
        inter_node_bytes_per_s=25e9,
    )
    hw = toy(params=p)
    pw = InferenceWorker("p", hw, Role.PREFILL)
    dw = InferenceWorker("d", hw, Role.DECODE)
    [pc] = run(pw, [(0.0, Request(3, 0, 2000, 50))])
    assert pc.kind == CompletionKind.PREFILL and not pc.finished
    assert pc.generated_tokens == 1 and pc.prompt_tokens == 2000
    assert pc.t_prefill_end_s == pytest.approx(hw.prefill_time_s(2000))
    xfer = hw.kv_transfer_time_s(pc.prompt_tokens)
    assert xfer == pytest.approx(0.001 + 2000 * 8000 / 25e9)
    t_ready = pc.t_prefill_end_s + xfer
    req = Request(3, 0, 2000, 50, generated_tokens=pc.generated_tokens, t_queued_s=0.0)
    [dc] = run(dw, [(t_ready, req)])
    assert dc.kind == CompletionKind.DECODE and dc.new_prefill_tokens == 0
    assert dc.t_decode_start_s == pytest.approx(t_ready)
    steps = sum(hw.decode_step_time_s(1, 2001 + j) for j in range(49))
    assert dc.t_decode_end_s == pytest.approx(t_ready + steps)
    assert dc.generated_tokens == 50 and dc.decode_steps == 49 and dc.t_queued_s == 0.0
    # the prefill worker keeps the prompt as a cached prefix; the decode worker keeps nothing
    assert pw.holds_prefix(3) == 2000 and dw.holds_prefix(3) == 0


def test_prefix_cache_hit_vs_miss():
    """Turn 2 routed back to the worker that holds turn 1's context prefills only the new
    tokens; on another worker it pays the full context. Hits are counted, not configured."""
    hw = toy()
    w1, w2 = InferenceWorker("a", hw), InferenceWorker("b", hw)
    [c1] = run(w1, [(0.0, Request(5, 0, 3000, 100))])
    held = w1.holds_prefix(5)
    assert held == 3000 + 99  # prompt + written decode tokens (the last sampled one is not)
    ctx2 = 3000 + 100 + 400  # + generated + observation
    t2 = c1.t_decode_end_s + 2.0
    [hit] = run(w1, [(t2, Request(5, 1, ctx2, 10))])
    [miss] = run(w2, [(t2, Request(5, 1, ctx2, 10))])
    assert hit.cached_prefix_tokens == held and hit.new_prefill_tokens == ctx2 - held
    assert miss.cached_prefix_tokens == 0 and miss.new_prefill_tokens == ctx2
    assert hit.t_prefill_end_s - t2 == pytest.approx(hw.prefill_time_s(ctx2 - held, held))
    assert miss.t_prefill_end_s - t2 == pytest.approx(hw.prefill_time_s(ctx2))
    assert miss.t_prefill_end_s - t2 > 5 * (hit.t_prefill_end_s - t2)
    assert (w1.cache.num_lookups, w1.cache.num_hits, w1.cache.hit_tokens) == (2, 1, held)
    assert (w2.cache.num_lookups, w2.cache.num_hits) == (1, 0)
    # the router may also force a full prefill on the worker that holds the prefix
    w3 = InferenceWorker("c", hw)
    run(w3, [(0.0, Request(5, 0, 3000, 100))])
    [forced] = run(w3, [(t2, Request(5, 1, ctx2, 10, full_prefill=True))])
    assert forced.cached_prefix_tokens == 0 and forced.new_prefill_tokens == ctx2


def test_transferred_kv_can_land_on_a_colocated_worker():
    """kv_ready=True: a colocated worker decodes a transferred request without prefill."""
    w = InferenceWorker("w", toy())
    w.submit(Request(1, 0, 2000, 20, generated_tokens=1), 0.0, kv_ready=True)
    [c] = run(w, [])
    assert c.new_prefill_tokens == 0 and c.t_prefill_start_s is None and c.decode_steps == 19


def test_late_submit_buffers_completions_and_reports_them_next():
    """A submit after a completion's time (without advance) keeps that completion for the
    next advance, and next_change_time_s points at it."""
    w2 = InferenceWorker("w2", toy())
    w2.submit(Request(1, 0, 1000, 5), 0.0)
    t_done = run(InferenceWorker("w3", toy()), [(0.0, Request(1, 0, 1000, 5))])[0].t_end_s
    w2.submit(Request(2, 0, 500, 5), t_done + 1.0)  # no advance in between
    assert w2.next_change_time_s() == pytest.approx(t_done)
    [c] = w2.advance(t_done + 1.0)
    assert c.traj_id == 1 and c.t_end_s == pytest.approx(t_done)


def test_next_change_skips_internal_boundaries_it_can_predict():
    """A prompt that finishes and goes on decoding is no event for the world: the first
    wake-up asked for is the turn's end, and advancing there yields the completion."""
    w = InferenceWorker("w", toy())
    w.submit(Request(1, 0, 1000, 50), 0.0)
    t = w.next_change_time_s()
    [c] = w.advance(t)
    assert c.t_end_s == t and c.t_prefill_end_s < t
    # a prompt arriving while another request decodes: still one wake-up per completion
    w.submit(Request(2, 0, 3000, 40), t)
    w.submit(Request(3, 0, 500, 80), t)
    wakes, done = 0, []
    while (t := w.next_change_time_s()) < float("inf"):
        wakes += 1
        done += w.advance(t)
    assert [c.traj_id for c in done] == [2, 3] and wakes == 2
