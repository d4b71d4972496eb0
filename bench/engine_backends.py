"""PEARL's engine vs vLLM (`engine.backend: vllm`) on the same tiny model, CPU.

The model and workloads of `bench.engine_decode` (Qwen3 architecture, 4 layers, hidden 256;
*uniform*: B requests x 64 new tokens; *rollout*: 4B requests with agentic-RL-shaped
lengths, at most B in flight), greedy, both engines behind the one backend interface
(`add_request` / `step`), with B seats: a finished request's seat is refilled at the next
step. Figures are generated tokens per CPU-time second of this process (both engines run
in it; `time.process_time` ignores time stolen by other processes), each side's best of
`--repeat` alternated runs; between runs each engine's prefix cache is invalidated (a new
weight version: a block namespace in ours, a cache salt in vLLM). The first greedy tokens
of both engines are checked equal before timing.

    .venv/bin/python -m bench.engine_backends [--no-write] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch

from bench._md import machine_line, write_section
from bench.engine_decode import Clock, bench_config, run_backend, workload
from pearl.runtime.engine import LLMEngine, SamplingParams

BATCHES = (1, 8, 32)
KINDS = ("uniform", "rollout")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    ap.add_argument("--repeat", type=int, default=3, help="alternated runs per side (best kept)")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    torch.set_num_threads(1)
    import transformers

    from pearl.runtime.backends.vllm_engine import VllmEngine

    transformers.logging.set_verbosity_error()
    cfg = bench_config()
    torch.manual_seed(0)
    hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**cfg.to_hf_dict())).eval()
    ckpt = tempfile.mkdtemp(prefix="pearl-bench-backends-")
    hf.save_pretrained(ckpt, safe_serialization=True)
    ours = LLMEngine(checkpoint_dir=ckpt, num_kv_blocks=2048, max_num_batched_tokens=1024)
    ours.scheduler.max_num_seqs = max(BATCHES)
    theirs = VllmEngine(
        ckpt,
        max_model_len=1024,
        kv_cache_bytes=256 << 20,
        max_num_seqs=max(BATCHES),
        max_num_batched_tokens=1024,
        dtype="float32",
    )
    torch.set_num_threads(1)  # vLLM's CPU worker may have changed it
    probe = [list(range(3, 40))]
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    same = (
        ours.generate(probe, greedy)[0].output_token_ids
        == theirs.generate(probe, greedy)[0].output_token_ids
    )
    assert same, "the two backends disagree on greedy tokens: fix that before timing"
    rows = []
    version = 0
    for batch in BATCHES:
        for kind in KINDS:
            reqs = workload(kind, batch, seed=0)
            tokens = sum(n for _, n in reqs)
            best = {"pearl": float("inf"), "vllm": float("inf")}
            for r in range(args.repeat):
                version += 1
                ours.load_weights(hf.state_dict(), version)  # no prefix reuse across runs
                theirs.weight_version = version  # a new cache salt: no prefix reuse either
                for name, engine in (("pearl", ours), ("vllm", theirs)):
                    with Clock() as c:
                        got = run_backend(engine, reqs, batch, f"{name}{r}")
                    assert got == tokens, (name, got, tokens)
                    best[name] = min(best[name], c.cpu_s)
            rows.append(
                f"| {batch} | {kind} | {tokens / best['pearl']:,.0f} | "
                f"{tokens / best['vllm']:,.0f} | {best['vllm'] / best['pearl']:.2f}x |"
            )
            print(rows[-1])
    body = "\n".join(
        [
            "## Engine backends: PEARL's engine vs vLLM on CPU (`python -m bench.engine_backends`)",
            "",
            f"vLLM 0.32 CPU build (`vllm-cpu`) and PEARL's engine in one process, behind the "
            f"backend interface; the model and workloads of `bench.engine_decode` (2.5 M "
            f"parameters, float32), greedy, B seats refilled as requests finish; tokens per "
            f"CPU-time second, each side's best of {args.repeat} alternated runs; the two "
            f"engines' greedy tokens were checked equal first. {machine_line()}; torch "
            "threads 1 (vLLM's CPU worker unbound). A tiny model on a CPU measures each "
            "engine's per-step overhead (scheduling, bookkeeping, Python), not kernels: "
            "read it as what one engine step costs the worker, not as GPU throughput.",
            "",
            "| batch | workload | PEARL engine tok/s | vLLM tok/s | PEARL / vLLM |",
            "|---:|---|---:|---:|---:|",
            *rows,
            "",
            "Rerun: `.venv/bin/python -m bench.engine_backends` (`--no-write` to only print).",
        ]
    )
    if not args.no_write:
        write_section("engine_backends", body)


if __name__ == "__main__":
    main()
