"""Bubble-aware makespan models: hand-computed cases for each path, feasibility reasons."""

import math

import pytest

from pearl.control.makespan import predict
from pearl.control.plan import PDConfig
from pearl.control.profile import HardwarePrior, PerfParams, WorkloadProfile

# A hardware prior with room for everything: 1 TB per GPU, tiny weights, 1 byte per KV token.
BIG = HardwarePrior(
    weight_bytes=1e9,
    kv_bytes_per_token=1.0,
    flops_per_token=1.0,
    attn_flops_per_token_ctx=1.0,
    gpu_flops_per_s=1.0,
    gpu_hbm_bytes_per_s=1.0,
    gpu_hbm_bytes=1e12,
    usable_memory_fraction=1.0,
)
# Round numbers: prefill of a turn = 0.01 + 1e-4 * 1000 = 0.11 s; decode step = 0.01 s;
# KV transfer of a turn = 0.1 s.
PERF = PerfParams(
    step_overhead_s=0.01,
    prefill_s_per_token=1e-4,
    prefill_s_per_token_ctx=0.0,
    decode_s_per_seq=0.0,
    decode_s_per_ctx_token=0.0,
    kv_latency_s=0.1,
    kv_s_per_byte=0.0,
)


def simple_profile(**kw) -> WorkloadProfile:
    base = dict(
        hardware=BIG,
        perf=PERF,
        batch_size=8,
        turns_per_traj_mean=10,
        turns_per_traj_p90=10,
        turns_per_traj_max=10,
        new_prefill_tokens_per_turn=1000,
        cached_prefix_tokens_per_turn=0,
        decode_tokens_per_turn=100,
        context_tokens_mean=1000,
        context_tokens_p90=1000,
        traj_context_tokens_mean=2000,
        env_s_per_turn_mean=1.0,
        env_s_per_turn_p90=1.0,
        env_wait_fraction=0.5,
        tail_turns=10,
        tail_new_prefill_tokens=10 * 1000,
        tail_decode_tokens=10 * 100,
        tail_env_s=10 * 1.0,
    )
    base.update(kw)
    return WorkloadProfile(**base)


def _queued(own: float, load: float, serve: float) -> float:
    """Cycle x of a turn with own work `own` waiting in an M/M/1 queue of service time
    `serve` at utilisation load/x: x = own + serve*u/(1-u), solved by iteration."""
    x = own + load
    for _ in range(200):
        u = load / x
        x = own + serve * u / (1 - u)
    return x


def test_colocated_hand_computed():
    """Colocated, 2 workers, all 8 trajectories running 10 turns: every round is the same.
    A worker's 4 live trajectories need 4 * (0.11 s prefill + 100 tokens * 0.01 s / b per
    step) of it per round, more than a turn's own cycle, so a round lasts that long and the
    tail waits the difference, in the worker's batch: a trajectory is in that batch for
    all of its round but its prefill and its 0.9 s of environment, so the batch is
    b = 4 * (x - 1.01) / x for a round of x seconds, and x = 0.44 + 1 / (b / 4) solves
    x^2 - 2.45 x + 0.4444 = 0. Its decode tokens are stretched by the other three
    trajectories' prefill (3 * 0.11 s per round), never by its own."""
    pred = predict(PDConfig.colocated(2), simple_profile(), batch=8)
    b = pred.breakdown
    cycle = (2.45 + math.sqrt(2.45**2 - 4 * 0.4444)) / 2
    batch = 4 * (cycle - 1.01) / cycle
    assert cycle == pytest.approx(4 * (0.11 + 100 * 0.01 / batch))
    # per worker: prefill 8*10*0.11/2 = 4.4 s; decode busy 8*10*100/2 tokens / b per step
    # * 0.01 s; together the 10 rounds
    assert b["prefill_s"] == pytest.approx(4.4)
    assert b["decode_batch"] == pytest.approx(batch)
    assert b["decode_s"] == pytest.approx(4000 * 0.01 / batch)
    assert b["throughput_bound_s"] == pytest.approx(10 * cycle)
    token = 0.01 / (1 - 3 * 0.11 / cycle)
    own = 0.11 + 100 * token + 0.9  # environment on 9 of 10 turns
    assert own < cycle
    assert b["interference_s"] == pytest.approx(1000 * (token - 0.01))
    assert b["kv_wait_s"] == pytest.approx(10 * (cycle - own))
    # the tail: own prefill 10*0.01 + 1e-4*10000 = 1.1 s, 1000 tokens, 10 s of environment
    crit = 1.1 + 1000 * token + 10.0 + 10 * (cycle - own)
    assert b["critical_path_s"] == pytest.approx(crit)
    assert pred.makespan_s == pytest.approx(max(crit, 10 * cycle))
    assert pred.feasible and pred.reason == ""


def test_colocated_kv_seats_bind():
    """A KV pool of 3,300 tokens holds (3300 - K_seq 1100) / 1050 = 2.1 sequences: the
    worker's 8 trajectories (batch 16 on 2 workers) queue for seats, so a round lasts as
    long as 8 turns take through 2.1 seats (the response-time law), each holding its seat
    for its prefill and its decode. The throughput bound is the tail's worker's 80 turns
    through the seats."""
    hw = HardwarePrior(1e9, 1.0, 1.0, 1.0, 1.0, 1.0, 1e9 + 3300.0, usable_memory_fraction=1.0)
    pred = predict(PDConfig.colocated(2), simple_profile(hardware=hw, batch_size=16), 16)
    b = pred.breakdown
    seats = (3300 - 1100) / 1050
    assert b["decode_batch"] == pytest.approx(seats)
    cycle = 10.0
    for _ in range(200):
        token = 0.01 / (1 - 7 * 0.11 / cycle)
        seat_s = 0.11 + 100 * token
        cycle = max(seat_s + 0.9, 8 * (0.11 + 1.0 / seats), 8 * seat_s / seats)
    assert cycle == pytest.approx(8 * seat_s / seats)  # the seats bind
    assert b["throughput_bound_s"] == pytest.approx(80 * seat_s / seats)
    assert b["kv_wait_s"] == pytest.approx(10 * (cycle - seat_s - 0.9))
    assert b["critical_path_s"] == pytest.approx(1.1 + 1000 * token + 10 + b["kv_wait_s"])
    assert b["kv_wait_s"] > 0


def test_disaggregated_hand_computed():
    """1 prefill + 1 decode, all 8 trajectories running 10 turns: round by round, each
    turn's cycle is its own work plus its wait in the prefill queue (M/M/1 at utilisation
    8 * 0.11 s / cycle); the tail's critical path (22.84 s) beats the decode path."""
    pred = predict(PDConfig.disaggregated(1, 1), simple_profile(), batch=8)
    b = pred.breakdown
    assert b["prefill_path_s"] == pytest.approx(8.8)  # max(8*10*0.11, KV link 8*10*0.1)
    # a mean turn's own work: prefill 0.11 + KV 0.1 + decode 100 * 0.01 + environment
    # 1.0 s on 9 of its 10 turns
    own = 0.11 + 0.1 + 1.0 + 0.9
    load = 8 * 0.11
    cycle = _queued(own, load, 0.11)
    assert cycle == pytest.approx(2.1842, abs=1e-4)
    # decoding share of the 8 live trajectories: 8 * 1.0 s of decode per cycle
    assert b["decode_batch"] == pytest.approx(8 * 1.0 / cycle)
    assert b["decode_path_s"] == pytest.approx(80 * 100 * 0.01 / (8 / cycle))
    assert b["kv_transfer_s"] == pytest.approx(1.0)
    # the tail's own turn: prefill 1.1/10, KV 0.1, decode 1.0, environment 10/10 s
    crit = 10 * (0.11 + 0.1 + 1.0 + 1.0 + (cycle - own))
    assert b["critical_path_s"] == pytest.approx(crit)
    assert b["queueing_s"] == pytest.approx(10 * (cycle - own))
    assert pred.makespan_s == pytest.approx(max(crit, b["decode_path_s"]))
    assert pred.makespan_s == pytest.approx(22.84, abs=1e-2)


def test_disaggregated_prefill_queue_tracks_the_live_trajectories():
    """A tail of 20 turns against a mean of 10: after round 10 only the tail is left, so
    it waits for no one's prefill and its decode runs alone (batch 1). It is slower than
    the mean pace (1 s of environment a turn against 0.9), so its k-th turn meets round
    k*r, r its path over the pace's for 20 turns: it sums the rounds' waits as
    (1/r) * W(20 r)."""
    p = simple_profile(tail_turns=20, tail_new_prefill_tokens=20_000, tail_decode_tokens=2000,
                       tail_env_s=20.0)  # fmt: skip
    full = predict(PDConfig.disaggregated(1, 1), simple_profile(), 8).breakdown
    long = predict(PDConfig.disaggregated(1, 1), p, 8).breakdown
    own = 0.11 + 0.1 + 1.0 + 0.9
    busy = full["queueing_s"] / 10  # a round's wait while all 8 run
    alone = _queued(own, 0.11, 0.11) - own  # the tail alone: utilisation 0.11/cycle
    assert alone < busy

    def waits(x: float) -> float:  # W: the rounds' waits summed over the first x rounds
        return busy * min(x, 10) + alone * max(x - 10, 0)

    fixed = 20 * (0.11 + 0.1) + 2000 * 0.01 + 20.0
    pace = 10 * (own + busy) + 10 * (own + alone)
    r = 1.0
    for _ in range(200):
        r = 0.5 * (r + (fixed + waits(20 * r) / r) / pace)
    # the engine stops after a few damped iterations: within 0.5% of the fixed point
    assert long["queueing_s"] == pytest.approx(waits(20 * r) / r, rel=5e-3)
    assert full["queueing_s"] < long["queueing_s"] < full["queueing_s"] + 10 * alone
    assert long["decode_batch"] < full["decode_batch"]


def test_small_prefix_cache_prefills_evicted_context_again():
    """H_max = 4,400 tokens per worker, working set B*K_seq = 8*1,100: room r = 0.5 on one
    worker, 1.0 on two; the hit share of the reusable prefix is 1 - exp(-c*r^2) (c = 1, the
    prior), and the missed part of the 1,000 reusable tokens per turn is prefilled again."""
    hw = HardwarePrior(1e9, 1.0, 1.0, 1.0, 1.0, 1.0, 1e9 + 4400.0, usable_memory_fraction=1.0)
    p = simple_profile(hardware=hw, cached_prefix_tokens_per_turn=1000, context_tokens_mean=2000,
                       context_tokens_p90=2000)  # fmt: skip
    one = predict(
        PDConfig.colocated(1), simple_profile(hardware=hw, cached_prefix_tokens_per_turn=1000), 8
    )
    assert one.breakdown["prefix_hit_share"] == pytest.approx(0.2212, abs=1e-4)
    # t_pf = 0.01 + 1e-4 * (1000 + 1000 * 0.7788) = 0.18788 s; 8 trajectories * 10 turns
    assert one.breakdown["prefill_s"] == pytest.approx(8 * 10 * 0.18788, rel=1e-4)
    two = predict(
        PDConfig.colocated(2), simple_profile(hardware=hw, cached_prefix_tokens_per_turn=1000), 8
    )
    assert two.breakdown["prefix_hit_share"] == pytest.approx(0.6321, abs=1e-4)
    assert two.breakdown["prefill_s"] == pytest.approx(8 * 10 * 0.14679 / 2, rel=1e-4)
    # a steeper fitted curve (c = 4) serves more at the same room
    steep = predict(
        PDConfig.colocated(1),
        simple_profile(hardware=hw, cached_prefix_tokens_per_turn=1000,
                       cache_hit_coeff_colocated=4.0),
        8,
    )  # fmt: skip
    assert steep.breakdown["prefix_hit_share"] == pytest.approx(0.6321, abs=1e-4)
    split = predict(PDConfig.disaggregated(1, 3), p, 8).breakdown
    r = 4400 / (8 * 2100)
    assert split["prefix_hit_share"] == pytest.approx(1 - math.exp(-r * r))


def test_early_finishers_shrink_decode_batch():
    """A tail of 20 turns against a mean of 10: trajectories finish along the way, so the
    later rounds' workers decode fewer at once than when all run 10 turns together."""
    for batch in (8, 32):
        together = predict(PDConfig.colocated(2), simple_profile(batch_size=batch), batch)
        spread = predict(
            PDConfig.colocated(2), simple_profile(tail_turns=20, batch_size=batch), batch
        )
        assert 1.0 <= spread.breakdown["decode_batch"] < together.breakdown["decode_batch"]


def test_tail_trajectory_sets_the_critical_path():
    """Doubling the tail's decode tokens adds exactly its decode time when nothing interferes."""
    base = simple_profile(env_wait_fraction=0.0)
    longer = simple_profile(env_wait_fraction=0.0, tail_decode_tokens=2000)
    one = predict(PDConfig.disaggregated(8, 8), base, 8).breakdown
    two = predict(PDConfig.disaggregated(8, 8), longer, 8).breakdown
    step = one["decode_step_s"]
    assert two["critical_path_s"] == pytest.approx(one["critical_path_s"] + 1000 * step, rel=1e-3)


def test_tail_grows_with_the_batch():
    """Observed in batches of 8 (tail 20 turns, mean 10), predicted for 64: the excess of 10
    turns scales by sqrt(ln 64 / ln 8) = sqrt(2)."""
    p = simple_profile(tail_turns=20)
    assert predict(PDConfig.colocated(2), p, 8).breakdown["tail_turns"] == pytest.approx(20.0)
    got = predict(PDConfig.colocated(2), p, 64).breakdown["tail_turns"]
    assert got == pytest.approx(10 + 10 * math.sqrt(2))


def test_kv_link_can_bound_the_prefill_path():
    """A slow KV link makes the prefill path link-bound: 8*10 turns * 0.5 s on one link."""
    perf = PerfParams(0.01, 1e-4, 0.0, 0.0, 0.0, kv_latency_s=0.5, kv_s_per_byte=0.0)
    pred = predict(PDConfig.disaggregated(1, 3), simple_profile(perf=perf), batch=8)
    assert pred.breakdown["prefill_path_s"] == pytest.approx(40.0)
    assert pred.makespan_s >= 40.0


def test_decode_batch_floor_and_memory_cap():
    """Concurrency is at least 1 and at most (H_max - K_seq) / decode context: FIFO
    admission of whole contexts leaves about one sequence's KV free."""
    p = simple_profile()
    many = predict(PDConfig.colocated(64), p, batch=8)
    assert many.breakdown["decode_batch"] == 1.0
    small = HardwarePrior(1e9, 1.0, 1.0, 1.0, 1.0, 1.0, 1e9 + 3100.0, usable_memory_fraction=1.0)
    capped = predict(PDConfig.colocated(1), simple_profile(hardware=small), batch=8)
    assert capped.breakdown["decode_batch"] == pytest.approx((3100.0 - 1100.0) / 1050.0)


def test_gpus_per_worker_scales_compute():
    """Two GPUs per worker halve every compute term of the cost model (coarse TP model)."""
    p = simple_profile(env_s_per_turn_mean=0.0, tail_env_s=0.0, env_wait_fraction=0.0)
    one = predict(PDConfig.colocated(2), p, 8)
    two = predict(PDConfig.colocated(2), p, 8, num_gpus_per_worker=2)
    assert two.makespan_s == pytest.approx(one.makespan_s / 2)


def test_decode_memory_infeasible_with_reason():
    """B * (1-f) * K_seq > N_D * H_max makes a split infeasible and says so; trajectories
    waiting on their environment (share f) hold no decode KV."""
    hw = HardwarePrior(1e9, 1.0, 1.0, 1.0, 1.0, 1.0, 1e9 + 5000.0, usable_memory_fraction=1.0)
    # K_seq = 1000 + 100; 8 trajectories that never wait need 8800 tokens
    p = simple_profile(hardware=hw, env_wait_fraction=0.0)
    bad = predict(PDConfig.disaggregated(1, 1), p, 8)
    assert not bad.feasible and "B*(1-f)*K_seq = 8800" in bad.reason and "5000" in bad.reason
    # half of them waiting on the environment: 4400 tokens decode at once, they fit
    waiting = simple_profile(hardware=hw, env_wait_fraction=0.5)
    assert predict(PDConfig.disaggregated(1, 1), waiting, 8).feasible
    assert predict(PDConfig.disaggregated(1, 2), p, 8).feasible
    assert predict(PDConfig.colocated(1), p, 8).feasible  # colocation evicts and recomputes


def test_weights_and_single_context_infeasible():
    hw = HardwarePrior(90e9, 1.0, 1.0, 1.0, 1.0, 1.0, 80e9)
    pred = predict(PDConfig.colocated(4), simple_profile(hardware=hw), 8)
    assert not pred.feasible and "weights" in pred.reason
    assert predict(
        PDConfig.colocated(4), simple_profile(hardware=hw), 8, num_gpus_per_worker=2
    ).feasible
    tight = HardwarePrior(1e9, 1.0, 1.0, 1.0, 1.0, 1.0, 1e9 + 500.0, usable_memory_fraction=1.0)
    pred = predict(PDConfig.colocated(4), simple_profile(hardware=tight), 8)
    assert not pred.feasible and "one trajectory" in pred.reason


def test_more_prefill_interrupts_colocated_decode_more():
    """Heavier prefill raises colocated interference; disaggregation avoids it."""
    light = predict(PDConfig.colocated(4), simple_profile(), 32).breakdown["interference_s"]
    heavy_p = simple_profile(new_prefill_tokens_per_turn=20000, context_tokens_mean=20000,
                             context_tokens_p90=20000)  # fmt: skip
    heavy = predict(PDConfig.colocated(4), heavy_p, 32).breakdown["interference_s"]
    assert heavy > light > 0


def test_bad_batch_rejected():
    with pytest.raises(ValueError):
        predict(PDConfig.colocated(1), simple_profile(), batch=0)


def test_moe_decode_reads_each_expert_at_most_once_per_iteration():
    """MoE (k/E = 1/4): each decoding sequence adds its experts' read (b_d) until all are
    read at E/k = 4 sequences; a dense model keeps paying b_d per sequence."""
    perf = PerfParams(0.01, 1e-4, 0.0, 1e-3, 0.0, 0.1, 0.0)
    moe_hw = HardwarePrior(1e9, 1.0, 1.0, 1.0, 1.0, 1.0, 1e12, usable_memory_fraction=1.0,
                           expert_weight_bytes=8e8, experts_per_token_fraction=0.25)  # fmt: skip
    moe = predict(PDConfig.colocated(1), simple_profile(hardware=moe_hw, perf=perf), 32)
    dense = predict(PDConfig.colocated(1), simple_profile(perf=perf), 32)
    # one worker decodes more than 4 of its 32 at once in both
    b_moe, b_dense = moe.breakdown["decode_batch"], dense.breakdown["decode_batch"]
    assert b_moe > 4 and b_dense > 4
    assert moe.breakdown["decode_step_s"] == pytest.approx(0.01 + 1e-3 * 4)
    assert dense.breakdown["decode_step_s"] == pytest.approx(0.01 + 1e-3 * b_dense)


def test_moe_prior_from_specs_moves_expert_reads_to_sequences():
    """The roofline prior of a MoE model reads only the shared weights per iteration and
    k/E of the expert weights per decoding sequence."""
    from types import SimpleNamespace

    gpu = SimpleNamespace(bf16_tflops=1000.0, hbm_tb_s=2.0, hbm_gb=80.0)
    common = dict(weight_bytes_bf16=60e9, kv_bytes_per_token_bf16=1e5, active_params=3e9,
                  num_hidden_layers=48, num_attention_heads=32, head_dim=128, hidden_size=2048)  # fmt: skip
    moe = HardwarePrior.from_specs(
        SimpleNamespace(**common, num_experts=128, num_experts_per_tok=8,
                        moe_intermediate_size=768), gpu)  # fmt: skip
    dense = HardwarePrior.from_specs(SimpleNamespace(**common), gpu)
    experts = 2.0 * 3 * 128 * 48 * 2048 * 768
    assert moe.expert_weight_bytes == pytest.approx(experts)
    assert moe.decode_saturation_seqs == 16.0 and math.isinf(dense.decode_saturation_seqs)
    bw = 2e12 * moe.decode_bandwidth_efficiency
    pm, pd = moe.perf_prior(), dense.perf_prior()
    assert pm.step_overhead_s == pytest.approx((60e9 - experts) / bw + 2e-3)
    assert pm.decode_s_per_seq - pd.decode_s_per_seq == pytest.approx(experts / 16 / bw)
    assert pd.step_overhead_s == pytest.approx(60e9 / bw + 2e-3)


def test_the_longest_sampled_trajectory_depends_on_the_configuration():
    """A sample of two kinds of trajectory, 10 turns each: one generates 3,000 tokens and
    waits 10 s on its environment, the other 500 tokens and 40 s. Where a token costs
    0.02 s the first is the critical path; where it costs 0.001 s, the second."""
    sample = ((10, 1000, 0, 3000, 10.0), (10, 1000, 0, 500, 40.0))
    for step, heavier in ((0.02, "decode"), (0.001, "env")):
        perf = PerfParams(step, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        p = simple_profile(perf=perf, trajectory_sample=sample, env_wait_fraction=0.0)
        b = predict(PDConfig.disaggregated(8, 8), p, 10_000).breakdown  # B draws hold both
        if heavier == "decode":
            assert b["env_s"] == pytest.approx(10.0)
        else:
            assert b["env_s"] == pytest.approx(40.0)


def test_a_larger_batch_draws_a_longer_critical_path():
    """With a sample, a batch's critical path is the longest of B draws from it: it grows
    with B (no scaling rule) and nears the sample's longest."""
    sample = tuple((10, 1000, 0, 100 * k, 10.0) for k in range(1, 21))
    p = simple_profile(trajectory_sample=sample)
    crit = [predict(PDConfig.colocated(4), p, b).breakdown["critical_path_s"] for b in (1, 8, 64)]
    assert crit[0] < crit[1] < crit[2]
    # 64 draws from 20 miss the longest with probability (19/20)^64 = 4%
    only_longest = simple_profile(trajectory_sample=sample[-1:])
    limit = predict(PDConfig.colocated(4), only_longest, 64).breakdown["critical_path_s"]
    assert limit * 0.96 < crit[2] <= limit


@pytest.mark.parametrize(
    "config", [PDConfig.colocated(2), PDConfig.colocated(4), PDConfig.disaggregated(1, 3)]
)
def test_decode_batches_come_from_the_candidates_own_rounds(config: PDConfig) -> None:
    """The profile's share of time off the environment was measured on the pool the
    telemetry came from; a candidate's decode batches follow from its own rounds. Before
    2026-12-08 a colocated candidate took its batch from that share, so the same workload
    measured on a slower pool predicted a slower colocated batch."""
    preds = [
        predict(config, simple_profile(env_wait_fraction=f, batch_size=16), 16)
        for f in (0.1, 0.5, 0.8)
    ]
    assert preds[0].makespan_s == pytest.approx(preds[1].makespan_s, rel=1e-6)
    assert preds[0].makespan_s == pytest.approx(preds[2].makespan_s, rel=1e-6)
