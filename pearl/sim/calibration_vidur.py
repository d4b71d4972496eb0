"""The hardware model's kernels against Vidur's per-operator profiles of real GPUs.

Vidur (Agrawal et al., MLSys 2024) times every operator of a model with CUDA events on
H100s and A100s. These references compare the world's dense-layer roofline
(`WorkerHardware.dense_time_s`, memory and compute sides) and its decode attention (the KV
read) with those profiles. Part of the calibration table
(`pearl.sim.calibration_refs.REFERENCES`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from pearl.sim.calibration_reference import Reference
from pearl.sim.physics.iteration import WorkerHardware
from pearl.specs import get_gpu, get_model

# Vidur (Agrawal et al., MLSys 2024) profiles every operator of a model on real GPUs with
# CUDA events; its H100 profile of Llama-2-7B (a dense 32-layer, 4096-wide model with an
# 11,008-wide gated MLP, the closest profiled relative of Qwen3-8B's 36 x 4096 x 12,288)
# gives, per decoder layer at tp 1, the median milliseconds of the dense operators: QKV and
# output projections, gated-MLP up and down projections, the two RMSNorms, RoPE, the
# activation and the two residual adds (everything of a layer but attention itself).
_VIDUR_H100 = (
    "Vidur (Agrawal et al., MLSys 2024), operator profiles measured on an H100: "
    "github.com/microsoft/vidur data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv "
    "(commit 7d47513), tp 1, sum of the per-layer medians of every operator but attention"
)
_VIDUR_DENSE_MS = {
    1: 0.176,
    32: 0.183,
    128: 0.201,
    256: 0.289,
    512: 0.379,
    1024: 0.664,
    4096: 2.623,
}


@cache
def _h100_llama2() -> WorkerHardware:
    return WorkerHardware(get_model("llama-2-7b"), get_gpu("h100-sxm"))


def _dense_layer_ms(num_tokens: int) -> Callable[[], float]:
    """The model's time of one decoder layer's dense operators over `num_tokens` tokens:
    the dense-layer group of an iteration (its own roofline) plus the iteration's fixed
    cost (launches, scheduling), both shared evenly by the layers. Vidur's per-operator
    medians include each kernel's fixed cost, which the model keeps in that fixed cost."""

    def value() -> float:
        hw = _h100_llama2()
        dense = hw.dense_time_s(num_tokens)
        return (dense + hw.params.iteration_overhead_s) / hw.model.num_hidden_layers * 1e3

    return value


def _vidur_row(num_tokens: int, what: str, known_miss: str = "") -> Reference:
    return Reference(
        key=f"dense_layer_h100_{num_tokens}",
        what=what,
        setting=f"Llama-2-7B bf16, H100, one decoder layer's dense operators, {num_tokens:,} "
        + ("token" if num_tokens == 1 else "tokens")
        + " in the iteration",
        source=_VIDUR_H100,
        measured=_VIDUR_DENSE_MS[num_tokens],
        unit="ms",
        model=_dense_layer_ms(num_tokens),
        known_miss=known_miss,
    )


# The same operators profiled by Vidur on an A100 (80GB), which pin the A100's compute
# efficiency (pearl.sim.physics.iteration.DEFAULT_EFFICIENCY: 0.64, the best fit over 1,956
# token counts of three models at tp 1 and 2). The rows: one decode token (memory side) and
# a 4,096-token prefill chunk (compute side) of the models with a spec here, at tp 1 (the
# first of the profile's two rows at 4,096 tokens).
_VIDUR_A100_DENSE = (
    "Vidur (Agrawal et al., MLSys 2024), operator profiles measured on an A100: "
    "github.com/microsoft/vidur data/profiling/compute/a100/{path}/mlp.csv (commit "
    "7d47513), tp 1, sum of the per-layer medians of every operator but attention"
)
_VIDUR_A100_DENSE_MS = {
    ("llama-2-7b", "meta-llama/Llama-2-7b-hf", 1): 0.292,
    ("llama-2-7b", "meta-llama/Llama-2-7b-hf", 4096): 8.2255,
    ("llama-3.1-8b", "meta-llama/Meta-Llama-3-8B", 4096): 8.585,
    ("llama-2-70b", "meta-llama/Llama-2-70b-hf", 4096): 30.7105,
}


def _vidur_a100_row(model: str, path: str, num_tokens: int) -> Reference:
    def value() -> float:
        hw = WorkerHardware(get_model(model), get_gpu("a100-80g"))
        dense = hw.dense_time_s(num_tokens)
        return (dense + hw.params.iteration_overhead_s) / hw.model.num_hidden_layers * 1e3

    name = {"llama-2-7b": "Llama-2-7B", "llama-3.1-8b": "Llama-3-8B", "llama-2-70b": "Llama-2-70B"}[
        model
    ]
    side = "one decode token (memory side)" if num_tokens == 1 else "prefill chunk (compute side)"
    return Reference(
        key=f"dense_layer_a100_{model}_{num_tokens}",
        what=f"A100: {side}, one decoder layer's dense operators",
        setting=f"{name} bf16, A100 80GB, {num_tokens:,} "
        + ("token" if num_tokens == 1 else "tokens")
        + " in the iteration"
        + (" (the model: Llama-3.1-8B, the same layers)" if model == "llama-3.1-8b" else ""),
        source=_VIDUR_A100_DENSE.format(path=path),
        measured=_VIDUR_A100_DENSE_MS[(model, path, num_tokens)],
        unit="ms",
        model=value,
    )


# Vidur's decode-attention profile on A100s (an earlier profile than the H100 one above, the
# only one of its attention profiles stored with its contents): Llama-2-70B at tensor
# parallel 2, so per GPU 32 query and 4 KV heads of 128, FlashAttention 2 on a paged KV
# cache (blocks of 16 tokens), median ms per layer of the decode attention kernel for a
# batch of sequences of equal context. The kernel's fixed cost (its time at one sequence of
# 32 tokens, 15 us) is taken off: the model keeps fixed costs in the iteration's, and the
# rows check how fast the KV cache is read, the decode cost that grows with context.
_VIDUR_A100_ATTENTION = (
    "Vidur (Agrawal et al., MLSys 2024), operator profiles measured on A100s: "
    "github.com/microsoft/vidur data/profiling/a100/attention.csv (commit e2d00e9, May "
    "2024), Llama-2-70B at tp 2, FlashAttention 2, paged KV; median of the decode attention "
    "kernel per layer less its fixed cost (0.015 ms at 1 sequence of 32 tokens)"
)
_VIDUR_ATTENTION_FLOOR_MS = 0.015
_VIDUR_DECODE_ATTENTION_MS = {
    (8, 4032): 0.057,
    (64, 4032): 0.407,
    (128, 4032): 0.667,
    (32, 1024): 0.064,
    (32, 2048): 0.108,
    (32, 4032): 0.192,
}


@cache
def _a100_llama2_70b() -> WorkerHardware:
    return WorkerHardware(get_model("llama-2-70b"), get_gpu("a100-80g"), tp=2)


def _decode_attention_row(batch: int, context: int, known_miss: str = "") -> Reference:
    def model() -> float:
        hw = _a100_llama2_70b()
        t = hw.decode_attention_time_s(batch, batch * context)
        return t / hw.model.num_hidden_layers * 1e3

    return Reference(
        key=f"decode_attention_a100_{batch}x{context}",
        what=f"decode attention, {batch} sequences of {context:,} tokens: KV read per layer",
        setting="Llama-2-70B bf16, 2 x A100 (tp 2), FlashAttention 2, paged KV",
        source=_VIDUR_A100_ATTENTION,
        measured=_VIDUR_DECODE_ATTENTION_MS[(batch, context)] - _VIDUR_ATTENTION_FLOOR_MS,
        unit="ms",
        model=model,
        known_miss=known_miss,
    )


VIDUR_REFERENCES: tuple[Reference, ...] = (
    _vidur_row(1, "decode iteration, one sequence: dense layers (weight read)"),
    _vidur_row(32, "decode iteration, 32 sequences: dense layers"),
    _vidur_row(128, "iteration of 128 tokens: dense layers below the roofline's knee"),
    _vidur_row(256, "iteration of 256 tokens: dense layers at the roofline's knee"),
    _vidur_row(512, "iteration of 512 tokens: dense layers above the roofline's knee"),
    _vidur_row(1024, "prefill chunk of 1,024 tokens: dense layers"),
    _vidur_row(4096, "prefill chunk of 4,096 tokens: dense layers (compute side)"),
    *(_vidur_a100_row(m, path, n) for (m, path, n) in _VIDUR_A100_DENSE_MS),
    _decode_attention_row(8, 4032),
    _decode_attention_row(
        64,
        4032,
        known_miss=(
            "the kernel reads 64 sequences at 1.35 TB/s against 1.49 at 32 and 1.62 at 128 "
            "(its split of the work across the GPU's cores), the model's single KV-read "
            "rate is 19% optimistic there"
        ),
    ),
    _decode_attention_row(128, 4032),
    _decode_attention_row(
        32,
        1024,
        known_miss=(
            "short contexts leave the kernel little work per sequence (64 KV blocks), so it "
            "reads the cache 18% slower than the model's rate; the agentic contexts the "
            "world decodes are 3-32K tokens"
        ),
    ),
    _decode_attention_row(32, 2048),
    _decode_attention_row(32, 4032),
)
