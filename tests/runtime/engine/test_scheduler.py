"""Continuous batching: budgets hold, batching and preemption never change the tokens."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.runtime.engine import LLMEngine, SamplingParams
from pearl.runtime.engine.kv_cache import BlockManager
from pearl.runtime.engine.scheduler import Scheduler
from pearl.runtime.engine.sequence import Sequence


def solo_tokens(cfg, weights, prompt, sampling) -> tuple[int, ...]:
    e = LLMEngine(cfg, block_size=4, num_kv_blocks=64)
    e.load_weights(weights, version=1)
    return e.generate([prompt], sampling)[0].output_token_ids


def test_batched_equals_one_at_a_time(tiny_cfg, tiny_engine_weights) -> None:
    """Requests decoded together (chunked prefill, staggered arrival) equal solo runs."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (21, 3, 9, 14)]
    sampling = SamplingParams(temperature=0.7, max_new_tokens=10, seed=3)
    e = LLMEngine(tiny_cfg, block_size=4, num_kv_blocks=64, max_num_batched_tokens=8)
    e.load_weights(tiny_engine_weights, version=1)
    done = {}
    for i, p in enumerate(prompts):  # a new request arrives every step
        e.add_request(f"r{i}", p, sampling)
        for out in e.step():
            done[out.request_id] = out
    while e.has_unfinished():
        for out in e.step():
            done[out.request_id] = out
    for i, p in enumerate(prompts):
        assert done[f"r{i}"].output_token_ids == solo_tokens(
            tiny_cfg, tiny_engine_weights, p, sampling
        )


def test_preemption_under_kv_pressure_keeps_tokens(tiny_cfg, tiny_engine_weights) -> None:
    """With too few KV blocks for all requests, preempted requests recompute and match."""
    prompts = [list(range(10 * i, 10 * i + 12)) for i in range(5)]
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    e = LLMEngine(tiny_cfg, block_size=4, num_kv_blocks=14, max_num_batched_tokens=64)
    e.load_weights(tiny_engine_weights, version=1)
    for i, p in enumerate(prompts):
        e.add_request(f"r{i}", p, greedy)
    done, preempted = {}, 0
    while e.has_unfinished():
        before = len(e.scheduler.waiting)
        for out in e.step():
            if out.finished:
                done[out.request_id] = out.output_token_ids
        preempted += max(0, len(e.scheduler.waiting) - before)
    assert preempted > 0
    for i, p in enumerate(prompts):
        assert done[f"r{i}"] == solo_tokens(tiny_cfg, tiny_engine_weights, p, greedy)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    budget=st.integers(1, 48),
    max_seqs=st.integers(1, 4),
    num_blocks=st.integers(10, 40),
)
def test_schedule_respects_budgets(lengths, budget, max_seqs, num_blocks) -> None:
    """Every step stays within the token budget, seat limit and block pool; all finish."""
    bm = BlockManager(num_blocks=num_blocks, block_size=4)
    sched = Scheduler(bm, max_num_batched_tokens=budget, max_num_seqs=max_seqs)
    seqs = [
        Sequence(f"s{i}", [1] * n, n, SamplingParams(max_new_tokens=1), 0)
        for i, n in enumerate(lengths)
        if n + 1 <= num_blocks * 4
    ]
    for s in seqs:
        sched.add(s)
    for _ in range(500):
        if not sched.has_unfinished():
            break
        batch = sched.schedule()
        assert batch.num_tokens <= budget and len(sched.running) <= max_seqs
        for s, n in zip(batch.seqs, batch.num_new_tokens, strict=True):
            assert s.num_computed_tokens + n <= len(s.block_table) * 4
            s.num_computed_tokens += n
            if s.num_computed_tokens == s.num_tokens:  # prefill done: finish the request
                sched.remove(s)
                bm.free_seq(s)
        bm.check_invariants(full=True)
    assert not sched.has_unfinished()


@settings(max_examples=6, deadline=None)
@given(budget=st.integers(2, 40), block_size=st.sampled_from([1, 3, 4, 16]))
def test_chunking_and_block_size_do_not_change_tokens(
    tiny_cfg, tiny_engine_weights, budget, block_size
) -> None:
    """Any token budget (prefill chunk size) and block size yields the same greedy tokens."""
    prompts = [list(range(50, 87)), [9, 9, 9, 9, 9]]
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    e = LLMEngine(
        tiny_cfg,
        block_size=block_size,
        num_kv_blocks=256 // block_size + 8,
        max_num_batched_tokens=budget,
    )
    e.load_weights(tiny_engine_weights, version=1)
    got = [o.output_token_ids for o in e.generate(prompts, greedy)]
    assert e.last_batch is not None and e.last_batch.num_tokens <= budget
    assert got == [solo_tokens(tiny_cfg, tiny_engine_weights, p, greedy) for p in prompts]
