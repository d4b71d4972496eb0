"""A toy dense model and GPU for hand-computed simulator tests (shared by tests/sim)."""

from pearl.sim.physics.iteration import HardwareParams, WorkerHardware
from pearl.specs.hardware import GpuSpec, ModelSpec

# A toy dense model and GPU with round numbers, so every figure below is computable by hand:
# embedding 1000 x 1000 = 1e6 params (input) + 1e6 (LM head), 100e6 other params.
TOY_MODEL = ModelSpec(
    name="toy",
    architecture="Qwen3ForCausalLM",
    num_hidden_layers=10,
    hidden_size=1000,
    num_attention_heads=10,
    num_key_value_heads=2,
    head_dim=100,
    intermediate_size=4000,
    vocab_size=1000,
    max_position_embeddings=100_000,
    rope_theta=1e6,
    params_total=102_000_000,
    weight_bytes_bf16=204_000_000,
    kv_bytes_per_token_bf16=8000,  # 2 * 10 layers * 2 kv heads * 100 * 2 bytes
)
TOY_GPU = GpuSpec(name="toy-gpu", bf16_tflops=1.0, hbm_tb_s=0.1, hbm_gb=10, nvlink_gb_s_per_dir=100)
IDEAL = HardwareParams(
    compute_efficiency=1.0,
    memory_efficiency=1.0,
    iteration_overhead_s=0.0,
    per_seq_overhead_s=0.0,
    activation_reserve_bytes=0.0,
    transfer_latency_s=0.0,
)


def toy(tp: int = 1, params: HardwareParams = IDEAL) -> WorkerHardware:
    return WorkerHardware(TOY_MODEL, TOY_GPU, tp, params)
