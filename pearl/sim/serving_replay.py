"""A vLLM serving benchmark replayed on one simulated worker (the world's physics).

`closed_loop_serving` runs what `vllm bench serve` runs: requests of fixed lengths kept at a
fixed concurrency, so prefill chunks interleave with decodes and KV memory bounds admission
as in the benchmark. The calibration table (`pearl.sim.calibration_refs`) compares its
outcome with published runs of real engines.
"""

from __future__ import annotations

from dataclasses import dataclass

from pearl.control.state import Role
from pearl.sim.physics.inference import InferenceWorker
from pearl.sim.physics.inference_types import Completion, Request, WorkerConfig
from pearl.sim.physics.iteration import WorkerHardware

# vLLM's own defaults per GPU class (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults,
# vLLM 0.8-0.11): GPUs with >= 70 GiB that are not A100 get a 16,384-token budget and 1,024
# sequences for the offline LLM class, 8,192 / 1,024 for the API server; other GPUs
# 8,192 / 256 and 2,048 / 256. Those versions admit a request once its first chunk fits.
VLLM_API_SERVER_SMALL_GPU = WorkerConfig(
    max_batched_tokens=2048, max_num_seqs=256, admission="first_chunk"
)
VLLM_API_SERVER_LARGE_GPU = WorkerConfig(
    max_batched_tokens=8192, max_num_seqs=1024, admission="first_chunk"
)


@dataclass(frozen=True, slots=True)
class Serving:
    """Outcome of a closed-loop serving benchmark on one simulated worker."""

    concurrency: int
    duration_s: float  # from the first request sent to the last one finished
    output_tokens_per_s: float  # all requests' generated tokens / wall time
    mean_tpot_s: float  # per request: (end - first token) / (output tokens - 1)
    mean_ttft_s: float


def closed_loop_serving(
    hw: WorkerHardware,
    *,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    num_requests: int,
    config: WorkerConfig | None = None,
) -> Serving:
    """`vllm bench serve --max-concurrency C --request-rate inf` with random prompts:
    `concurrency` requests in flight, each `prompt_tokens` in and exactly `output_tokens`
    out (no prefix hits: every request is its own trajectory); a finished request is
    replaced at once until `num_requests` have been sent."""
    w = InferenceWorker("bench", hw, Role.COLOCATED, config)
    sent = 0
    now = 0.0

    def send(t: float) -> None:
        nonlocal sent
        w.submit(Request(sent, 0, prompt_tokens, output_tokens), t)
        sent += 1

    for _ in range(min(concurrency, num_requests)):
        send(0.0)
    done: list[Completion] = []
    while len(done) < num_requests:
        now = w.next_change_time_s()
        for c in w.advance(now):
            done.append(c)
            if sent < num_requests:
                send(c.t_end_s)
    tokens = sum(c.generated_tokens for c in done)
    end = max(c.t_end_s for c in done)
    tpots = []
    ttfts = []
    for c in done:
        assert c.t_prefill_end_s is not None
        ttfts.append(c.t_prefill_end_s - c.t_submit_s)
        if c.generated_tokens > 1:
            tpots.append((c.t_end_s - c.t_prefill_end_s) / (c.generated_tokens - 1))
    return Serving(
        concurrency=concurrency,
        duration_s=end,
        output_tokens_per_s=tokens / end,
        mean_tpot_s=sum(tpots) / len(tpots),
        mean_ttft_s=sum(ttfts) / len(ttfts),
    )
