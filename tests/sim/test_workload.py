"""Agentic workload: spec validation, seeded sampling, length limit, and calibration."""

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.errors import InputError
from pearl.sim.calibration import batch_mix, colocated_mix, critical_path
from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.trajectories import TrajectorySampler
from pearl.specs import get_gpu, get_model
from pearl.specs.workload import WorkloadSpec, workload_from_dict


def test_every_field_has_a_help_text():
    for name, field in WorkloadSpec.model_fields.items():
        assert field.description, name


def test_same_seed_same_trajectories_and_different_seed_differs():
    a = TrajectorySampler(WorkloadSpec(), 3).batch(16)
    b = TrajectorySampler(WorkloadSpec(), 3).batch(16)
    c = TrajectorySampler(WorkloadSpec(), 4).batch(16)
    assert a == b and a != c


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), cap=st.sampled_from([16384, 32768, 65536]))
def test_turns_chain_and_never_exceed_the_context_cap(seed, cap):
    """Each turn's context is the previous context + generation + observation; the context
    never exceeds the cap and a trajectory cut by it is marked truncated."""
    spec = WorkloadSpec(context_cap_tokens=cap)
    for tr in TrajectorySampler(spec, seed).batch(8):
        assert spec.prompt_tokens_min <= tr.prompt_tokens <= spec.prompt_tokens_max
        assert tr.turns[0].context_tokens == tr.prompt_tokens
        assert 1 <= tr.num_turns <= spec.max_turns
        for prev, nxt in zip(tr.turns, tr.turns[1:], strict=False):
            assert nxt.context_tokens == prev.end_context_tokens + prev.observation_tokens
        assert all(t.decode_tokens >= 1 and t.env_s >= 0 for t in tr.turns)
        assert tr.total_tokens <= cap
        if tr.num_turns < spec.min_turns:
            assert tr.truncated
        if tr.truncated and tr.turns[-1].env_s == 0:
            assert tr.turns[-1].end_context_tokens == cap


def test_short_cap_truncates_more_trajectories():
    short = TrajectorySampler(WorkloadSpec(context_cap_tokens=16384), 0).batch(200)
    long = TrajectorySampler(WorkloadSpec(context_cap_tokens=65536), 0).batch(200)
    assert sum(t.truncated for t in short) > 2 * sum(t.truncated for t in long)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_what_each_prefix_reuse_mode_lets_a_cache_serve(seed):
    """'context': all of each context; 'prompt': the initial prompt; 'turn': the previous
    turn's whole prompt (its answer is re-rendered, e.g. Qwen3's template dropping the
    reasoning once a user-role observation follows). The same draws in every mode."""
    modes = {
        m: TrajectorySampler(WorkloadSpec(prefix_reuse=m), seed).batch(4)
        for m in ("context", "prompt", "turn")
    }
    for ctx, pro, tur in zip(modes["context"], modes["prompt"], modes["turn"], strict=True):
        assert [t.context_tokens for t in ctx.turns] == [t.context_tokens for t in tur.turns]
        assert all(t.reusable_prefix_tokens is None for t in ctx.turns)
        assert all(t.reusable_prefix_tokens == pro.prompt_tokens for t in pro.turns)
        assert tur.turns[0].reusable_prefix_tokens == tur.prompt_tokens
        for prev, nxt in zip(tur.turns, tur.turns[1:], strict=False):
            assert nxt.reusable_prefix_tokens == prev.context_tokens
            assert prev.context_tokens < nxt.context_tokens


def test_sampled_statistics_follow_the_spec():
    """Medians of per-turn tokens near the spec's medians; env mixture mean is a few s."""
    trajs = TrajectorySampler(WorkloadSpec(context_cap_tokens=10**6), 1).batch(300)
    turns = [t for tr in trajs for t in tr.turns if t.env_s > 0]
    assert statistics.median(t.decode_tokens for t in turns) == pytest.approx(250, rel=0.1)
    obs = statistics.median(t.observation_tokens for t in turns) - 24
    assert obs == pytest.approx(400, rel=0.1)
    assert 1.0 < statistics.fmean(t.env_s for t in turns) < 6.0


def test_bad_overrides_name_the_field():
    with pytest.raises(InputError, match="rollout.workload.max_turns"):
        workload_from_dict({"max_turns": 0})
    with pytest.raises(InputError, match="rollout.workload"):
        workload_from_dict({"prompt_tokens_min": 5000, "prompt_tokens_max": 4000})
    assert workload_from_dict({"max_turns": 30}).max_turns == 30


def test_calibration_critical_path_of_a_batch_is_about_216_s():
    """Qwen3-8B on H100, batch 64, unlimited pool: the longest trajectory takes ~216 s
    (the paper's calibration fact, docs/simulator-model.md); env time and decode share the critical path."""
    hw = WorkerHardware(get_model("qwen3-8b"), get_gpu("h100-sxm"))
    paths = [critical_path(TrajectorySampler(WorkloadSpec(), s).batch(64), hw) for s in range(4)]
    mean = statistics.fmean(p.makespan_s for p in paths)
    print(f"critical path over 4 seeds: mean {mean:.0f} s: {[round(p.makespan_s) for p in paths]}")
    assert 180 < mean < 260
    for p in paths:
        assert p.env_s > 0.25 * p.makespan_s and p.decode_s > 0.25 * p.makespan_s
        # alone on a GPU, each turn re-prefills its context past the initial prompt (the
        # default prefix_reuse "prompt"): visible, but a small share of the path
        assert 0.02 * p.makespan_s < p.prefill_s < 0.12 * p.makespan_s


def test_calibration_colocated_prefill_share_for_qwen3_30b():
    """Qwen3-30B-A3B colocated on 4 H100 workers, a router that ignores prefixes: prefill
    ~97% of processed tokens in roughly a quarter of busy time, from misses and evictions."""
    m = colocated_mix(model="qwen3-30b-a3b", num_workers=4, router="least_loaded", seed=0)
    print(m)
    assert m.prefill_token_share > 0.95
    assert 0.15 < m.prefill_time_share < 0.40
    assert m.hit_rate_tokens < 0.3 and m.num_evictions > 0


def test_prefix_aware_routing_raises_the_hit_rate():
    """The hit rate is an outcome of routing, capacity and what the agent re-sends, not an
    input: with a history that is only appended to, prefix-aware routing reuses most of
    each context; with a rewritten history (the default) only the initial prompt is
    reusable, whatever the routing."""
    appended = WorkloadSpec(prefix_reuse="context")
    kw = dict(model="qwen3-8b", num_workers=8, seed=0)
    sticky = colocated_mix(router="sticky", spec=appended, **kw)
    blind = colocated_mix(router="least_loaded", spec=appended, **kw)
    assert sticky.hit_rate_tokens > blind.hit_rate_tokens + 0.3
    assert sticky.prefill_token_share < blind.prefill_token_share
    rerendered = colocated_mix(router="sticky", **kw)
    assert rerendered.hit_rate_tokens < 0.25 < sticky.hit_rate_tokens
    # the previous turn's prompt reusable: between the two, much nearer the appended history
    turn = colocated_mix(router="sticky", spec=WorkloadSpec(prefix_reuse="turn"), **kw)
    assert rerendered.hit_rate_tokens + 0.3 < turn.hit_rate_tokens < sticky.hit_rate_tokens
    assert rerendered.prefill_token_share > 0.95  # paper §3.2: 96.68% of tokens


@pytest.mark.parametrize("num_prefill", [0, 3])
def test_sticky_router_binds_each_trajectory_to_one_balanced_worker(num_prefill):
    """ROLL's environment-affine routing: the first turn goes where fewest trajectories are
    bound, every later turn goes back there even after KV pressure evicted its prefix
    (Qwen3-30B-A3B's ~137K KV tokens a GPU); the prefix-blind router moves turns."""
    kw = dict(model="qwen3-30b-a3b", num_workers=8, batch=64, seed=1, num_prefill=num_prefill)
    sticky = batch_mix(router="sticky", **kw)
    assert sticky.num_moved_turns == 0
    assert sum(sticky.homes) == 64 and max(sticky.homes) - min(sticky.homes) <= 1
    assert len(sticky.homes) == (num_prefill or 8)
    if num_prefill == 0:
        assert sticky.num_evictions > 0  # the prefixes it keeps going back to were evicted
    blind = batch_mix(router="least_loaded", **kw)
    assert blind.num_moved_turns > 0 and blind.homes == ()


def test_disaggregated_batch_runs_every_turn_through_prefill_then_decode_workers():
    """P prefill + D decode workers: all turns complete; prefill workers never decode and
    decode workers only prefill to recompute after a preemption."""
    m = batch_mix(model="qwen3-8b", num_workers=4, num_prefill=1, batch=16, seed=2)
    co = batch_mix(model="qwen3-8b", num_workers=4, num_prefill=0, batch=16, seed=2)
    turns = [t for tr in TrajectorySampler(WorkloadSpec(), 2).batch(16) for t in tr.turns]
    assert m.num_turns == co.num_turns == len(turns)
    # every turn that needs more than its first token moves its KV exactly once
    assert m.num_transfers == sum(t.decode_tokens > 1 for t in turns) and co.num_transfers == 0
    # each turn: the prefill samples token 1, decode iterations produce the rest
    assert m.num_preemptions == 0
    assert m.decode_step_tokens == co.decode_step_tokens == sum(t.decode_tokens - 1 for t in turns)
    with pytest.raises(ValueError):
        batch_mix(num_workers=2, num_prefill=2)
