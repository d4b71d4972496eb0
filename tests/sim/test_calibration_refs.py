"""The hardware model against published measurements (pearl.sim.calibration_refs): every
reference row within its stated tolerance, and the serving benchmark loop itself."""

from __future__ import annotations

import math

import pytest

from pearl.sim.calibration_refs import REFERENCES
from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.serving_replay import closed_loop_serving
from pearl.specs import get_gpu, get_model


@pytest.mark.parametrize("ref", REFERENCES, ids=lambda r: r.key)
def test_reference_within_tolerance(ref) -> None:
    """Each published figure is reproduced within its row's tolerance, except the rows
    whose miss is known and explained: those must still miss (a change that closes the gap
    updates the row), and say why in the table."""
    v = ref.evaluate()
    if ref.known_miss:
        assert not v.ok, f"{ref.key} is within tolerance now: drop its known_miss"
        assert v.row()["verdict"] == f"MISS: {ref.known_miss}"
    else:
        assert v.ok, v.row()


def test_dense_layer_rows_span_decode_and_prefill() -> None:
    """The Vidur rows cover the memory side (decode), the knee (128-512 tokens) and the
    compute side (prefill chunks), and the model is nowhere more than 15% optimistic."""
    rows = {r.key: r.evaluate() for r in REFERENCES if r.key.startswith("dense_layer_h100_")}
    sizes = {int(key.rsplit("_", 1)[1]) for key in rows}
    assert {1, 128, 256, 512, 4096} <= sizes
    for verdict in rows.values():
        assert verdict.ratio >= 0.85, verdict.row()
    # Compute-bound side: four times the tokens, about four times the time.
    assert 3.5 < rows["dense_layer_h100_4096"].value / rows["dense_layer_h100_1024"].value < 4.1


def test_serving_loop_counts_every_token_and_batches_decodes() -> None:
    """The closed loop finishes every request with all its tokens; concurrency raises
    throughput and (memory-bound decode, shared weight reads) costs less than linearly."""
    hw = WorkerHardware(get_model("llama-3.1-8b"), get_gpu("a100-40g"))
    one = closed_loop_serving(
        hw, concurrency=1, prompt_tokens=512, output_tokens=64, num_requests=5
    )
    four = closed_loop_serving(
        hw, concurrency=4, prompt_tokens=512, output_tokens=64, num_requests=20
    )
    assert one.mean_tpot_s == pytest.approx(hw.decode_step_time_s(1, 512 + 32), rel=0.05)
    assert 2.0 < four.output_tokens_per_s / one.output_tokens_per_s < 4.0
    assert four.mean_tpot_s > one.mean_tpot_s


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-2-70b"])
def test_llama2_reference_spec_is_consistent(name) -> None:
    """The Vidur rows' models: parameters and KV bytes follow from their config fields."""
    m = get_model(name)
    h, f, layers = m.hidden_size, m.intermediate_size, m.num_hidden_layers
    assert f is not None
    kv = m.num_key_value_heads * m.head_dim
    # Q and output projections, K and V (grouped for 70B), gated MLP, two RMSNorms
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    non_embedding = layers * per_layer + h  # + the final norm
    assert m.params_non_embedding == non_embedding
    assert m.params_total == non_embedding + 2 * m.vocab_size * h  # untied embeddings
    assert m.weight_bytes_bf16 == 2 * m.params_total
    assert m.kv_bytes_per_token_bf16 == 2 * layers * m.num_key_value_heads * m.head_dim * 2


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen3-14b", "qwen3-32b"])
def test_qwen3_dense_spec_is_consistent(name) -> None:
    """The GPUStack rows' models (and the rollout model): parameters and KV bytes follow
    from their config fields (Qwen3 adds an RMSNorm on q and on k per head)."""
    m = get_model(name)
    h, f, layers, d = m.hidden_size, m.intermediate_size, m.num_hidden_layers, m.head_dim
    assert f is not None
    q, kv = m.num_attention_heads * d, m.num_key_value_heads * d
    per_layer = 2 * h * q + 2 * h * kv + 3 * h * f + 2 * h + 2 * d
    embeddings = 2 * m.vocab_size * h  # untied
    assert m.params_total == layers * per_layer + h + embeddings
    assert m.weight_bytes_bf16 == 2 * m.params_total
    assert m.kv_bytes_per_token_bf16 == 2 * layers * kv * 2


def test_serving_rows_decode_within_and_need_the_drivers_memory() -> None:
    """The GPUStack pages' decode rows (the card's signature) are within 10%, every serving
    run within 25%, Qwen3-14B's on the A100 within 10%, and Qwen3-32B's 32K-token requests
    fit one H100 only with the memory the driver reports, not 80e9 bytes."""
    rows = {r.key: r.evaluate() for r in REFERENCES}
    for key in ("decode_qwen3_8b_h100", "decode_qwen3_32b_32k"):
        assert 0.9 < rows[key].ratio < 1.1, rows[key].row()
    serving = {k: v for k, v in rows.items() if k.startswith("serving_")}
    assert len(serving) == 12
    for v in serving.values():
        assert 0.75 < v.ratio < 1.25, v.row()
    # On the A100 80GB, whose compute efficiency comes from Vidur's operator profiles and
    # not from these runs: every run within the table's 15%, and the six together within 5%
    # (geometric mean of model / measured).
    a100 = [v for k, v in serving.items() if "_a100_" in k]
    assert len(a100) == 6
    assert all(0.85 <= v.ratio <= 1.15 for v in a100), [v.row() for v in a100]
    assert 0.95 < math.exp(sum(math.log(v.ratio) for v in a100) / len(a100)) < 1.05
    gpu = get_gpu("h100-pcie")
    hw = WorkerHardware(get_model("qwen3-32b"), gpu)
    assert hw.kv_capacity_tokens > 32_077
    small = WorkerHardware(get_model("qwen3-32b"), gpu.model_copy(update={"hbm_gb": 80.0}))
    assert small.kv_capacity_tokens < 32_077


def test_decode_attention_rows_grow_with_batch_and_context() -> None:
    """The decode attention rows span the batch (8-128) and the context (1-4K tokens) of
    Vidur's A100 profile; the model's KV read grows linearly in both, and away from the two
    known misses it is within 15% either way."""
    rows = {r.key: r for r in REFERENCES if r.key.startswith("decode_attention_a100_")}
    assert len(rows) == 6
    v = {k: r.evaluate() for k, r in rows.items()}
    assert v["decode_attention_a100_128x4032"].value == pytest.approx(
        16 * v["decode_attention_a100_8x4032"].value, rel=1e-3
    )
    assert v["decode_attention_a100_32x4032"].value > v["decode_attention_a100_32x1024"].value
    for key, verdict in v.items():
        assert verdict.ratio > 0.8, verdict.row()
        assert verdict.ok != bool(rows[key].known_miss)


def test_qwen3_moe_spec_is_consistent() -> None:
    """The MoE rows' model (and the rollout model): total and per-token active parameters
    follow from its config fields (128 experts of 3 x hidden x 768, 8 a token, a router of
    hidden x 128 per layer, untied embeddings)."""
    m = get_model("qwen3-30b-a3b")
    h, layers, d = m.hidden_size, m.num_hidden_layers, m.head_dim
    assert m.num_experts and m.num_experts_per_tok and m.moe_intermediate_size
    q, kv = m.num_attention_heads * d, m.num_key_value_heads * d
    expert = 3 * h * m.moe_intermediate_size
    shared = 2 * h * q + 2 * h * kv + 2 * h + 2 * d + h * m.num_experts  # attention, norms, router
    embeddings = 2 * m.vocab_size * h
    total = layers * (shared + m.num_experts * expert) + h + embeddings
    active = layers * (shared + m.num_experts_per_tok * expert) + h + embeddings
    assert m.params_total == total
    assert m.params_active_per_token == active


def test_moe_rows_pin_the_experts_not_the_h20() -> None:
    """The MoE references: the H100 serving run within 5% (duration and TPOT), the MoE
    against the dense model on one engine and card within 10%. The H20 page's absolute
    times miss by about 2x for the dense model and the MoE alike (the card, not the MoE
    model): each model's model/measured ratio on that page is within 10% of the other's."""
    rows = {r.key: r for r in REFERENCES}
    for key in ("moe_serving_30b_h100_duration", "moe_serving_30b_h100_tpot"):
        assert 0.95 < rows[key].evaluate().ratio < 1.05
    for key in ("moe_vs_dense_h20_1", "moe_vs_dense_h20_30720"):
        assert 0.9 < rows[key].evaluate().ratio < 1.1
    # The fused-MoE kernel on an A100: from 8 tokens a layer within 6% (below, the
    # default tiles' fixed cost, a known miss at 1 token).
    for key in ("moe_layer_a100_8", "moe_layer_a100_64"):
        assert 0.94 < rows[key].evaluate().ratio < 1.06
    assert rows["moe_layer_a100_1"].evaluate().ratio < 0.85
    dense = rows["h20_qwen3_8b_batch1"].evaluate()
    assert 0.4 < dense.ratio < 0.6
    moe = rows["moe_vs_dense_h20_1"].evaluate()
    assert moe.ratio == pytest.approx(1.0, abs=0.1)


def test_a100_compute_efficiency_is_the_profiles_fit() -> None:
    """The A100's compute efficiency is pinned by Vidur's A100 operator profiles: a 4,096-
    token prefill chunk of Llama-2-7B, Llama-3-8B and Llama-2-70B within 15% each and 10%
    together, where the 0.55 used before was 16-30% slow on all three."""
    from pearl.sim.physics.iteration import DEFAULT_EFFICIENCY, HardwareParams

    rows = [
        r for r in REFERENCES if r.key.startswith("dense_layer_a100_") and r.key.endswith("_4096")
    ]
    assert len(rows) == 3
    ratios = [r.evaluate().ratio for r in rows]
    assert all(0.85 <= x <= 1.15 for x in ratios), ratios
    assert 0.9 < math.exp(sum(math.log(x) for x in ratios) / 3) < 1.1
    assert DEFAULT_EFFICIENCY["a100-80g"] == DEFAULT_EFFICIENCY["a100-40g"]
    for r in rows:
        model = r.key.removeprefix("dense_layer_a100_").removesuffix("_4096")
        old = WorkerHardware(
            get_model(model), get_gpu("a100-80g"), params=HardwareParams(compute_efficiency=0.55)
        )
        t = (
            (old.dense_time_s(4096) + old.params.iteration_overhead_s)
            / old.model.num_hidden_layers
            * 1e3
        )
        assert t / r.measured > 1.15
