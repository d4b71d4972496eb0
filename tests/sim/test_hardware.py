"""The simulator's hardware model: hand-computed iteration times, closed forms, memory."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_toys import TOY_GPU, TOY_MODEL, toy

from pearl.sim.physics.iteration import HardwareParams, WorkerHardware
from pearl.specs import get_gpu, get_model
from pearl.specs.hardware import GpuSpec


def test_decode_step_is_memory_bound_and_hand_computed():
    """One decode token at context 1000: the dense layers on their smooth roofline (weights
    minus the input embedding against linear + LM-head flops), plus the KV read."""
    hw = toy()
    # dense: flops 2*100e6 + LM head 2*1e6 = 2.02e8 -> 0.202 ms at 1e12 FLOP/s;
    #        bytes 204e6 - 2e6 = 202e6 -> 2.02 ms at 1e11 B/s; hypot -> 2.030075 ms
    # attention: flops 4*10*100*10*1000 -> 0.04 ms; bytes 8000 * (1000 + 1) -> 0.08008 ms
    dense = math.hypot(0.202e-3, 2.02e-3)
    assert hw.decode_step_time_s(1, 1000) == pytest.approx(dense + 0.08008e-3, rel=1e-12)


def test_prefill_is_compute_bound_and_hand_computed():
    """A 1000-token prompt: linear flops plus causal attention over 500500 pairs."""
    hw = toy()
    weights = 202e6 / 1e11  # the dense layers' memory side, 2.02 ms
    # dense flops 2e8 * 1000 + 2e6 (one sampled token); attention 4e4 * 500500 flops
    expected = math.hypot((2e8 * 1000 + 2e6) / 1e12, weights) + 4e4 * 500500 / 1e12
    assert hw.prefill_time_s(1000) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.220022, rel=1e-4)  # ~ the compute side alone
    # With 600 cached tokens only 400 are computed, attending to 600 + (1..400) positions.
    pairs = 400 * 600 + 400 * 401 / 2
    expected = math.hypot((2e8 * 400 + 2e6) / 1e12, weights) + 4e4 * pairs / 1e12
    assert hw.prefill_time_s(400, cached_tokens=600) == pytest.approx(expected, rel=1e-12)


def test_dense_roofline_is_smooth_at_the_knee_and_the_max_away_from_it():
    """The dense layers' time is the root of the sum of squares of their compute and memory
    sides: sqrt(2) times either at the balance point, within 1% of the larger away from it."""
    hw = toy()
    weights = hw.weight_bytes_read(1) / hw.memory_rate

    def sides(n: int) -> tuple[float, float]:
        return hw.flops_per_token * n / hw.compute_rate, hw.weight_bytes_read(n) / hw.memory_rate

    knee = round(weights * hw.compute_rate / hw.flops_per_token)  # compute side = memory side
    c, m = sides(knee)
    assert hw.dense_time_s(knee) == pytest.approx(math.sqrt(2) * max(c, m), rel=0.01)
    for n in (1, knee // 8, knee * 8):
        c, m = sides(n)
        assert max(c, m) <= hw.dense_time_s(n) <= 1.01 * max(c, m)


def test_overheads_add_per_iteration_and_per_sequence():
    """Fixed overhead per iteration and per sampled sequence, on top of the rooflines."""
    p = HardwareParams(
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        iteration_overhead_s=0.001,
        per_seq_overhead_s=0.0001,
        activation_reserve_bytes=0.0,
    )
    base = toy().decode_step_time_s(4, 4000)
    assert toy(params=p).decode_step_time_s(4, 4000) == pytest.approx(base + 0.001 + 0.0004)


def test_efficiencies_default_per_gpu_type():
    """Without overrides, efficiencies come from the GPU type (compute 60%, memory 82%)."""
    hw = WorkerHardware(get_model("qwen3-8b"), get_gpu("h100-sxm"))
    assert hw.compute_rate == pytest.approx(0.60 * 989e12)
    assert hw.memory_rate == pytest.approx(0.82 * 3.35e12)


def test_moe_expert_coverage_matches_the_spec_comment():
    """Expected experts touched per layer E*(1-(1-k/E)^B): 8, 52, 82, 112, 126 for Qwen3-30B-A3B."""
    hw = WorkerHardware(get_model("qwen3-30b-a3b"), get_gpu("h100-sxm"))
    for tokens, experts in [(1, 8), (8, 52), (16, 82), (32, 112), (64, 126)]:
        frac = (hw.weight_bytes_read(tokens) - hw.dense_weight_bytes) / hw.expert_weight_bytes
        assert round(128 * frac) == experts
    # So decode at batch 64 reads nearly all weights while batch 1 reads a small fraction.
    assert hw.weight_bytes_read(1) < 0.2 * hw.weight_bytes
    assert hw.weight_bytes_read(64) > 0.9 * hw.weight_bytes


def test_moe_decode_is_cheaper_than_dense_at_batch_one_only():
    """A3B saves compute and (at tiny batches) bandwidth; at batch 64 it reads ~all 61 GB."""
    gpu = get_gpu("h100-sxm")
    dense = WorkerHardware(get_model("qwen3-8b"), gpu)
    moe = WorkerHardware(get_model("qwen3-30b-a3b"), gpu, tp=2)
    assert moe.decode_step_time_s(1, 1000) < dense.decode_step_time_s(1, 1000)
    moe1 = WorkerHardware(get_model("qwen3-30b-a3b"), gpu)
    assert moe1.decode_step_time_s(64, 64 * 1000) > dense.decode_step_time_s(64, 64 * 1000)


@settings(max_examples=60, deadline=None)
@given(
    d=st.integers(1, 128),
    ctx=st.integers(0, 2_000_000),
    k=st.integers(1, 400),
    model=st.sampled_from(["qwen3-8b", "qwen3-30b-a3b"]),
    gpu=st.sampled_from(["h100-sxm", "h20", "a100-80g"]),
)
def test_decode_stretch_closed_form_equals_sum_of_steps(d, ctx, k, model, gpu):
    """The closed-form stretch time equals stepping one iteration at a time."""
    hw = WorkerHardware(get_model(model), get_gpu(gpu))
    by_steps = sum(hw.decode_step_time_s(d, ctx + d * n) for n in range(k))
    assert hw.decode_stretch_time_s(d, ctx, k) == pytest.approx(by_steps, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    d=st.integers(1, 64),
    ctx=st.integers(0, 500_000),
    budget=st.floats(0.0, 30.0),
    k=st.integers(1, 3000),
)
def test_decode_steps_within_is_the_largest_fitting_count(d, ctx, budget, k):
    """steps_within returns n <= k whole steps with time(n) <= budget < time(n+1)."""
    hw = WorkerHardware(get_model("qwen3-8b"), get_gpu("h100-sxm"))
    n, elapsed = hw.decode_steps_within(d, ctx, budget, k)
    assert 0 <= n <= k
    assert elapsed == pytest.approx(hw.decode_stretch_time_s(d, ctx, n))
    assert elapsed <= budget + 1e-12
    if n < k:
        assert hw.decode_stretch_time_s(d, ctx, n + 1) > budget


def test_kv_capacity_is_hbm_minus_weights_and_reserves():
    """KV tokens = (tp * (hbm * util - reserve) - weights) / kv bytes per token."""
    hw = toy()
    assert hw.kv_capacity_tokens == (10e9 * 0.9 - 204e6) // 8000
    m8 = get_model("qwen3-8b")
    h100 = get_gpu("h100-sxm")
    hw8 = WorkerHardware(m8, h100)
    assert hw8.kv_capacity_tokens == int((85.03e9 * 0.9 - 2e9 - m8.weight_bytes_bf16) // 147456)
    # Qwen3-30B-A3B barely fits one H100 (61 GB of weights): a small KV pool; tp=2 is large.
    moe1 = WorkerHardware(get_model("qwen3-30b-a3b"), h100)
    moe2 = WorkerHardware(get_model("qwen3-30b-a3b"), h100, tp=2)
    assert 50_000 < moe1.kv_capacity_tokens < 150_000
    assert moe2.kv_capacity_tokens > 5 * moe1.kv_capacity_tokens


def test_device_memory_is_what_the_driver_reports():
    """vLLM's gpu_memory_utilization is a fraction of the memory CUDA reports: 81,089 MiB
    on an H100 80GB HBM3, not 80e9 bytes (nvidia-smi's memory.total where no CUDA figure
    was found)."""
    assert get_gpu("h100-sxm").hbm_bytes == pytest.approx(81_089 * 2**20, rel=1e-4)
    assert get_gpu("h200").hbm_bytes == pytest.approx(143_771 * 2**20, rel=1e-4)
    assert get_gpu("a100-80g").hbm_bytes == pytest.approx(81_920 * 2**20, rel=1e-4)


def test_weights_that_do_not_fit_give_zero_capacity():
    small = GpuSpec(name="small", bf16_tflops=100, hbm_tb_s=1, hbm_gb=16, nvlink_gb_s_per_dir=50)
    assert WorkerHardware(get_model("qwen3-30b-a3b"), small).kv_capacity_tokens == 0


def test_tensor_parallel_divides_work_and_adds_communication():
    """tp=2 halves compute and memory time and adds 2 all-reduces per layer."""
    p = HardwareParams(
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        iteration_overhead_s=0.0,
        per_seq_overhead_s=0.0,
        allreduce_latency_s=1e-5,
    )
    one = toy(1, p)
    two = toy(2, p)
    t1 = one.decode_step_time_s(1, 1000)
    t2 = two.decode_step_time_s(1, 1000)
    # 20 all-reduces: latency 1e-5 each + ring bytes 2*(1/2)*1000*2 B / 100 GB/s each
    comm = 20 * (1e-5 + 1.0 * 2000 / 100e9)
    assert t2 == pytest.approx(t1 / 2 + comm, rel=1e-12)


def test_kv_transfer_time_from_bytes_and_link():
    """latency + tokens * kv bytes / link bandwidth (NIC across nodes, NVLink within)."""
    p = HardwareParams(transfer_latency_s=0.002, inter_node_bytes_per_s=25e9)
    hw = WorkerHardware(get_model("qwen3-8b"), get_gpu("h100-sxm"), params=p)
    assert hw.kv_transfer_time_s(10_000) == pytest.approx(0.002 + 10_000 * 147456 / 25e9)
    assert hw.kv_transfer_time_s(10_000, same_node=True) == pytest.approx(
        0.002 + 10_000 * 147456 / 450e9
    )
    assert hw.kv_transfer_time_s(0) == 0.0


def test_bad_params_are_rejected():
    with pytest.raises(ValueError):
        HardwareParams(compute_efficiency=1.5)
    with pytest.raises(ValueError):
        WorkerHardware(TOY_MODEL, TOY_GPU, tp=0)
    assert math.isfinite(toy().decode_step_time_s(0, 0))
