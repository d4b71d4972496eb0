"""Engine decode throughput at batch 1, 8, 32 vs HF transformers' `generate` (same tiny model).

Three workloads per batch size B (greedy, prompts of random byte tokens, seeded):
- uniform: B requests, 32-token prompts, 64 new tokens each, all in one batch;
- mixed:   4*B requests, 16..64-token prompts, 8..128 new tokens each (uniform, seeded),
  at most B in flight;
- rollout: as mixed, but new tokens drawn from the heavy-tailed shape of agentic RL turns
  (workload.md: lognormal, p90 = 3.2x the median; here median 32, cap 512).
  In mixed and rollout, our engine refills a finished request's seat at the next step
  (continuous batching); `generate` runs static batches of B in arrival order, each until
  its longest request is done (that is how HF generate batches; finished rows keep
  computing padding). Only requested tokens count.
The same workloads also run on vLLM (the `vllm` backend, CPU build, in this process:
`VllmEngine` behind the backend interface, B seats refilled as requests finish; its greedy
tokens checked equal to ours first), unless `--no-vllm` or vLLM is not installed.
Figures are generated tokens per second (prefill time included), one torch thread for all
engines. The machine is shared, so the headline figure divides by this process's CPU time
(`time.process_time`, immune to time stolen by other processes); wall-clock ratios are
printed next to it. CPU time still inflates when other processes compete for the core's
caches and memory bandwidth, so each workload runs `--repeat` times, engine and HF
alternated, and each side keeps its best run (the least disturbed one). Between the
engine's repeats its prefix cache is invalidated (a weight reload under a new version,
outside the timed region), so a repeat never reuses the previous run's prompt KV.

    .venv/bin/python -m bench.engine_decode [--no-write] [--threads N] [--device cpu|cuda]
        [--repeat N] [--no-vllm]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from typing import Any

import torch

from bench._md import machine_line, write_section
from pearl.runtime.engine import LLMEngine, ModelConfig, SamplingParams

BATCHES = (1, 8, 32)
TARGET_RATIO_AT_32 = 2.0


def bench_config() -> ModelConfig:
    return ModelConfig.tiny(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
    )


# Generated tokens per turn in agentic RL rollouts (shared data, workload.md): lognormal,
# median ~250, p90 ~800, cap 4,096. The *rollout* workload keeps that shape at 1/8 the
# scale for the tiny model: median 32, p90 ~100, cap 512.
ROLLOUT_MEDIAN, ROLLOUT_CAP = 32, 512
ROLLOUT_SIGMA = math.log(800 / 250) / 1.2816  # p90 / median = exp(1.2816 sigma)
KINDS = ("uniform", "mixed", "rollout")


def workload(kind: str, batch: int, seed: int) -> list[tuple[list[int], int]]:
    """(prompt token ids, new tokens) per request."""
    rng = random.Random(seed * 1000 + batch)
    if kind == "uniform":
        return [([rng.randrange(256) for _ in range(32)], 64) for _ in range(batch)]
    reqs = []
    for _ in range(4 * batch):
        prompt = [rng.randrange(256) for _ in range(rng.randint(16, 64))]
        if kind == "mixed":
            new = rng.randint(8, 128)
        else:
            new = round(rng.lognormvariate(math.log(ROLLOUT_MEDIAN), ROLLOUT_SIGMA))
            new = min(ROLLOUT_CAP, max(1, new))
        reqs.append((prompt, new))
    return reqs


class Clock:
    """Wall-clock and CPU seconds of a block (CPU on an accelerator would be misleading)."""

    def __enter__(self) -> Clock:
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self.wall0
        self.cpu_s = time.process_time() - self.cpu0


def static_slots_per_token(reqs: list[tuple[list[int], int]], batch: int) -> float:
    """Decode slots static batches of `batch` spend per requested token (>= 1)."""
    slots = sum(
        len(reqs[i : i + batch]) * max(n for _, n in reqs[i : i + batch])
        for i in range(0, len(reqs), batch)
    )
    return slots / sum(n for _, n in reqs)


def row_key_counts(engine: LLMEngine) -> tuple[int, int, int]:
    """Row-keys the decode attention read, its rows held, one padded call would read."""
    rows = engine.runner.decode_rows
    return (rows.keys_read, rows.keys_needed, rows.keys_padded) if rows else (0, 0, 0)


def run_engine(engine: LLMEngine, reqs: list[tuple[list[int], int]]) -> None:
    for i, (prompt, n) in enumerate(reqs):
        engine.add_request(f"q{i}", prompt, SamplingParams(temperature=0, max_new_tokens=n))
    produced = 0
    while engine.has_unfinished():
        produced += sum(len(o.new_token_ids) for o in engine.step())
    assert produced == sum(n for _, n in reqs)


def run_backend(engine: Any, reqs: list[tuple[list[int], int]], seats: int, tag: str) -> int:
    """Serve `reqs` on any engine backend with at most `seats` in flight (a finished
    request's seat is refilled at the next step); returns the tokens generated."""
    pending = list(enumerate(reqs))
    live = produced = 0
    while pending or live:
        while pending and live < seats:
            i, (prompt, n) = pending.pop(0)
            engine.add_request(
                f"{tag}-{i}", prompt, SamplingParams(temperature=0, max_new_tokens=n)
            )
            live += 1
        for out in engine.step():
            produced += len(out.new_token_ids)
            live -= 1 if out.finished else 0
    return produced


def build_vllm(hf: Any, max_seqs: int) -> Any:
    """vLLM over `hf`'s weights (an HF directory written once), greedy tokens checked
    equal to a PEARL engine's on the same weights."""
    import os
    import tempfile

    from pearl.runtime.backends.vllm_engine import VllmEngine

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    threads = torch.get_num_threads()
    ckpt = tempfile.mkdtemp(prefix="pearl-bench-vllm-")
    hf.save_pretrained(ckpt, safe_serialization=True)
    engine = VllmEngine(
        ckpt,
        max_model_len=1024,
        kv_cache_bytes=256 << 20,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=1024,
        dtype="float32",
    )
    torch.set_num_threads(threads)  # vLLM's CPU worker may have changed it
    ours = LLMEngine(checkpoint_dir=ckpt, num_kv_blocks=256, max_num_batched_tokens=1024)
    probe, greedy = [list(range(3, 40))], SamplingParams(temperature=0, max_new_tokens=16)
    same = (
        ours.generate(probe, greedy)[0].output_token_ids
        == engine.generate(probe, greedy)[0].output_token_ids
    )
    assert same, "vLLM and PEARL's engine disagree on greedy tokens: fix that before timing"
    return engine


def run_hf(hf, reqs: list[tuple[list[int], int]], batch: int, device: torch.device) -> None:
    for start in range(0, len(reqs), batch):
        chunk = reqs[start : start + batch]
        width = max(len(p) for p, _ in chunk)
        ids = torch.full((len(chunk), width), 256, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, (p, _) in enumerate(chunk):  # left padding, as decoder-only generate needs
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        with torch.no_grad():
            hf.generate(
                ids.to(device),
                attention_mask=mask.to(device),
                do_sample=False,
                max_new_tokens=max(n for _, n in chunk),
                min_new_tokens=max(n for _, n in chunk),
            )
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=3, help="alternated runs per side (best kept)")
    ap.add_argument("--no-vllm", action="store_true", help="leave vLLM out")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers  # test/bench-only dependency

    transformers.logging.set_verbosity_error()
    device = torch.device(args.device)
    use_wall = device.type != "cpu"
    basis = "wall-clock" if use_wall else "CPU-time"
    cfg = bench_config()
    torch.manual_seed(0)
    hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**cfg.to_hf_dict()))
    hf = hf.to(device).eval()
    hf.generation_config.pad_token_id = 256
    hf.generation_config.eos_token_id = None
    engine = LLMEngine(
        cfg, device=device, num_kv_blocks=2048, block_size=16, max_num_batched_tokens=1024
    )
    engine.load_weights(hf.state_dict(), version=1)
    run_engine(engine, workload("uniform", 2, seed=9))  # warm-up both
    run_hf(hf, workload("uniform", 2, seed=9), 2, device)
    vllm = None
    if not args.no_vllm and device.type == "cpu":
        try:
            vllm = build_vllm(hf, max(BATCHES))
        except ImportError as err:
            print(f"vLLM left out: {err}")

    rows, ratio_32, pairs_32 = [], {}, {}
    keys_note = "(not measured)"
    weights, version = hf.state_dict(), 1
    for batch in BATCHES:
        engine.scheduler.max_num_seqs = batch
        for kind in KINDS:
            reqs = workload(kind, batch, seed=0)
            tokens = sum(n for _, n in reqs)
            ours_runs, ref_runs, vllm_runs = [], [], []
            counted = row_key_counts(engine)
            for r in range(args.repeat):
                version += 1
                engine.load_weights(weights, version=version)  # no prefix-cache reuse
                with Clock() as ours:
                    run_engine(engine, reqs)
                with Clock() as ref:
                    run_hf(hf, reqs, batch, device)
                ours_runs.append(ours)
                ref_runs.append(ref)
                if vllm is not None:
                    vllm.weight_version = version  # a new cache salt: no prefix reuse
                    with Clock() as theirs:
                        got = run_backend(vllm, reqs, batch, f"v{version}-{r}")
                    assert got == tokens, (got, tokens)
                    vllm_runs.append(theirs)
            ours_wall, ref_wall = min(c.wall_s for c in ours_runs), min(c.wall_s for c in ref_runs)
            ours_cpu, ref_cpu = min(c.cpu_s for c in ours_runs), min(c.cpu_s for c in ref_runs)
            t_ours, t_hf = (ours_wall, ref_wall) if use_wall else (ours_cpu, ref_cpu)
            ratio, wall_ratio = t_hf / t_ours, ref_wall / ours_wall
            pair_ratios = [
                (r.wall_s / o.wall_s) if use_wall else (r.cpu_s / o.cpu_s)
                for o, r in zip(ours_runs, ref_runs, strict=True)
            ]
            spread = f"{min(pair_ratios):.2f}-{max(pair_ratios):.2f}x"
            if batch == 32:
                ratio_32[kind] = ratio
                pairs_32[kind] = pair_ratios
            if (batch, kind) == (32, "mixed"):
                read, needed, padded = (
                    b - a for a, b in zip(counted, row_key_counts(engine), strict=True)
                )
                keys_note = (
                    f"{read / needed:.2f}x the keys its rows held (one padded call per layer "
                    f"would read {padded / needed:.2f}x)"
                )
            if vllm_runs:
                t_vllm = min(c.wall_s if use_wall else c.cpu_s for c in vllm_runs)
                vllm_cells = f" {tokens / t_vllm:,.0f} | {t_vllm / t_ours:.2f}x |"
            else:
                vllm_cells = " - | - |"
            rows.append(
                f"| {batch} | {kind} | {tokens / t_ours:,.0f} | {tokens / t_hf:,.0f} "
                f"| {ratio:.2f}x | {spread} | {wall_ratio:.2f}x "
                f"| {static_slots_per_token(reqs, batch):.2f} |{vllm_cells}"
            )
            print(
                f"batch {batch:>2} {kind:>7}: engine {tokens / t_ours:8.0f} tok/s, "
                f"HF generate {tokens / t_hf:8.0f} tok/s, ratio {ratio:.2f}x "
                f"(pairs {spread}, wall-clock ratio {wall_ratio:.2f}x); vLLM |{vllm_cells}"
            )

    def verdict(kind: str) -> str:
        word = "meets" if ratio_32[kind] >= TARGET_RATIO_AT_32 else "MISSES"
        low, high = min(pairs_32[kind]), max(pairs_32[kind])
        if low < TARGET_RATIO_AT_32 <= high:
            word += (
                f" (within this machine's noise: single alternated pairs ranged {low:.2f}-"
                f"{high:.2f}x, on both sides of the target)"
            )
        return f"{ratio_32[kind]:.2f}x, {word}"

    for kind in ("rollout", "mixed"):
        print(f"batch 32 {kind}: {verdict(kind)} (target >= {TARGET_RATIO_AT_32:g}x)")
    body = "\n".join(
        [
            "## Engine decode throughput vs HF `generate`",
            "",
            f"Model: Qwen3 architecture, 4 layers, hidden 256, 8/4 heads, byte vocabulary "
            f"({sum(p.numel() for p in hf.parameters()) / 1e6:.1f} M parameters), float32, "
            f"device {device}, {args.threads} torch thread(s); {machine_line()}. Greedy; "
            "generated tokens per second including prefill. *uniform*: B requests x 64 new "
            "tokens in one batch. *mixed*: 4B requests with 8..128 new tokens, at most B in "
            "flight (continuous batching vs HF's static batches). *rollout*: as *mixed*, with "
            "new tokens drawn like agentic RL turns' (workload.md: lognormal, p90 3.2x the "
            f"median; here median {ROLLOUT_MEDIAN}, cap {ROLLOUT_CAP}). Measured in one run on a "
            "shared machine: compare the ratios, not the absolute numbers.",
            "",
            f"Throughputs are per {basis} second, each side's best of {args.repeat} runs "
            "(engine and HF alternated; the engine's prefix cache is invalidated between "
            "its runs). *ratio per pair*: the lowest and highest ratio of one engine run "
            "to the HF run next to it, i.e. how much the machine's noise moves one "
            "measurement.",
            "",
            "| batch | workload | engine tok/s | HF generate tok/s | ratio | ratio per pair "
            "| wall-clock ratio | HF slots per token | vLLM tok/s | engine / vLLM |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"Target at batch 32: >= {TARGET_RATIO_AT_32:g}x, judged on the *rollout* "
            f"workload (the length distribution the engine serves in RL): {verdict('rollout')}. "
            f"With lengths uniform in 8..128 (*mixed*, a milder spread than rollouts have): "
            f"{verdict('mixed')} (earlier sessions' runs, in this file's history, measured "
            "2.18x and 2.30x: on that workload the engine sits near the target, on one side "
            "or the other depending on the machine). Two factors multiply in the *mixed* "
            "and *rollout* ratios. (1) The cost of a step: the *uniform* rows run the same "
            "batches in both engines, so their ratio is the engine's per-token step cost "
            "against HF's (about 1x at batch 32: the matmuls, the same in both, and the "
            "attention's reads of K/V dominate). The "
            "engine's decode step reads each sequence's KV from a contiguous per-sequence row "
            "(no per-step copy of the batch's KV; HF's cache concatenates it every step), "
            "runs grouped-query attention without repeating K/V, and uses fused q/k/v and "
            "gate/up projections. Under "
            "continuous batching the rows differ in length: the decode attends in up to 4 "
            "contiguous row ranges, each over its longest row's keys (rows re-laid out by "
            f"length when that pays); in the batch-32 mixed runs it read {keys_note}. (2) "
            "Continuous batching: *HF slots per token* is the number of decode slots HF's "
            "static batches spend per requested token (finished rows keep decoding until the "
            "batch's longest is done); refilling seats gains at most this factor, less the "
            "tail where fewer than B requests remain. Batch 1 has no batching gain "
            "(1.00 slot per token), so its ratios are the step cost alone.",
            "",
            "*vLLM*: vLLM 0.32's CPU build (`vllm-cpu`, `engine.backend: vllm`) on the same "
            "weights and workloads, in this process behind the backend interface, B seats "
            "refilled as requests finish (its greedy tokens checked equal to the engine's "
            "first); each workload's best of the same alternated runs. On a tiny model on a "
            "CPU this measures each engine's per-step overhead (scheduling, bookkeeping, "
            "Python), not kernels: it says what one engine step costs the worker, not GPU "
            "throughput. `-`: vLLM not installed or left out (`--no-vllm`).",
            "",
            "Rerun: `.venv/bin/python -m bench.engine_decode` (`--no-write` to only print).",
        ]
    )
    if not args.no_write:
        write_section("engine_decode", body)


if __name__ == "__main__":
    main()
