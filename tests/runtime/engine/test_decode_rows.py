"""Decode rows (contiguous per-sequence KV for decode steps) never change what is generated."""

from __future__ import annotations

import pytest
import torch

from pearl.runtime.engine import LLMEngine, SamplingParams
from pearl.runtime.engine.decode_kv import DecodeRows
from pearl.runtime.engine.kv_cache import KVCache
from pearl.runtime.engine.sequence import Sequence


def churn(engine: LLMEngine, prompts: list[list[int]], new_tokens: list[int]) -> dict:
    """Staggered arrivals with different lengths (rows are freed and reused); per request
    (tokens, logprobs)."""
    done = {}
    for i, (p, n) in enumerate(zip(prompts, new_tokens, strict=True)):
        sampling = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=n, seed=i)
        engine.add_request(f"r{i}", p, sampling)
        if i % 2:
            engine.step()
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = (out.output_token_ids, out.output_logprobs)
    return done


def make(cfg, weights, rows: bool, **kw) -> LLMEngine:
    e = LLMEngine(cfg, **{"block_size": 4, "num_kv_blocks": 96, **kw})
    e.load_weights(weights, version=1)
    e.runner.use_decode_rows = rows
    return e


@pytest.mark.parametrize(
    "kw", [{}, {"num_kv_blocks": 20, "max_num_batched_tokens": 12}], ids=["roomy", "preempting"]
)
def test_rows_equal_gathered_pages(tiny_cfg, tiny_engine_weights, kw) -> None:
    """Tokens equal and logprobs agree with rows on and off, with rows freed, reused,
    refilled after preemption and, under a small cache, given up for some steps."""
    gen = torch.Generator().manual_seed(4)
    lengths = [5, 17, 2, 9, 30, 4, 12, 7]
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lengths]
    new_tokens = [9, 3, 14, 6, 11, 2, 8, 13]
    with_rows = make(tiny_cfg, tiny_engine_weights, True, **kw)
    expected = churn(make(tiny_cfg, tiny_engine_weights, False, **kw), prompts, new_tokens)
    got = churn(with_rows, prompts, new_tokens)
    assert with_rows.runner.decode_rows.num_slots > 0  # the rows path really ran
    assert got.keys() == expected.keys()
    for rid, (tokens, logprobs) in expected.items():
        assert got[rid][0] == tokens, rid
        assert torch.allclose(torch.tensor(got[rid][1]), torch.tensor(logprobs), atol=1e-5)


def test_rows_fall_back_past_their_budget_and_resume(tiny_cfg, tiny_engine_weights) -> None:
    """When the rows would exceed their budget the step gathers pages; later steps use
    rows again (refilled from the pages); tokens equal an engine without rows."""
    prompts, new_tokens = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7]], [12, 12, 12]
    expected = churn(make(tiny_cfg, tiny_engine_weights, False), prompts, new_tokens)
    e = make(tiny_cfg, tiny_engine_weights, True)
    rows = e.runner.decode_rows
    plans = []
    real_plan = rows.plan

    def toggling_plan(seqs, kv):
        rows.max_tokens = 0 if len(plans) % 4 == 2 else 10_000  # every 4th step: no room
        plan = real_plan(seqs, kv)
        plans.append(plan)
        return plan

    rows.plan = toggling_plan
    got = churn(e, prompts, new_tokens)
    assert any(p is None for p in plans) and any(p is not None for p in plans)
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in expected.items()}


def _seq(rid: str, num_tokens: int, table: list[int]) -> Sequence:
    seq = Sequence(rid, list(range(num_tokens)), num_tokens, SamplingParams(), 0)
    seq.block_table, seq.num_computed_tokens = table, num_tokens - 1
    return seq


def test_row_assignment_reuse_and_refill() -> None:
    """Rows go lowest-free first, are freed when a sequence leaves the decode group, and a
    row is refilled from the pages exactly when it does not hold tokens [0, position)."""
    kv = KVCache(1, 8, 2, 1, 1, dtype=torch.float32, device="cpu")
    kv.k[0, 0, :, :, 0] = torch.arange(16.0).view(8, 2)  # token value = its cache slot
    rows = DecodeRows(1, 1, 1, dtype=torch.float32, device=torch.device("cpu"), max_tokens=64)
    a, b, c = _seq("a", 4, [3, 5]), _seq("b", 3, [1, 0]), _seq("c", 2, [7])
    plan = rows.plan([a, b], kv)
    assert plan is not None and plan.rows.tolist() == [0, 1] and plan.identity
    assert rows.k[0, 0, 0, :3, 0].tolist() == [6.0, 7.0, 10.0]  # a: slots 6, 7, 10
    assert rows.k[0, 0, 1, :2, 0].tolist() == [2.0, 3.0]
    assert plan.write_index.tolist() == [3, rows.row_tokens + 2]
    assert plan.mask[0, :, 0, :4].isinf().tolist() == [[False] * 4, [False] * 3 + [True]]
    a.num_computed_tokens += 1  # the step ran: a keeps its row without a refill
    rows.k[0, 0, 0, :4] = -1.0
    plan = rows.plan([c, a], kv)  # b left: its row 1 goes to c
    assert plan is not None and plan.rows.tolist() == [1, 0] and not plan.identity
    assert rows.k[0, 0, 0, :4, 0].tolist() == [-1.0] * 4  # not refilled
    assert rows.k[0, 0, 1, :1, 0].tolist() == [14.0]
    a.num_computed_tokens = 1  # a was recomputed elsewhere (e.g. preempted): refill
    plan = rows.plan([a], kv)
    assert rows.k[0, 0, 0, :1, 0].tolist() == [6.0]
    assert rows.plan([], kv) is None


def test_row_ranges_and_relayout_keep_tokens(tiny_cfg, tiny_engine_weights) -> None:
    """With every cut worth making (min_split 0) the decode attends in several row ranges
    and re-lays its rows out by length; tokens and logprobs equal an engine without rows."""
    gen = torch.Generator().manual_seed(7)
    lengths = [40, 3, 25, 6, 33, 2, 18, 9, 28, 4]
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lengths]
    new_tokens = [6, 20, 4, 17, 9, 22, 5, 12, 3, 15]
    expected = churn(make(tiny_cfg, tiny_engine_weights, False), prompts, new_tokens)
    e = make(tiny_cfg, tiny_engine_weights, True)
    rows = e.runner.decode_rows
    rows.min_split = 0
    plans = []
    real_plan = rows.plan

    def recording_plan(seqs, kv):
        plan = real_plan(seqs, kv)
        plans.append(plan)
        return plan

    rows.plan = recording_plan
    got = churn(e, prompts, new_tokens)
    assert rows.relayouts > 0
    assert any(p is not None and len(p.groups) > 1 for p in plans)
    assert got.keys() == expected.keys()
    for rid, (tokens, logprobs) in expected.items():
        assert got[rid][0] == tokens, rid
        assert torch.allclose(torch.tensor(got[rid][1]), torch.tensor(logprobs), atol=1e-5)
