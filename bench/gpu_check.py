"""The GPU check: step times of PEARL's engine (and vLLM, where installed) at Qwen3-8B shapes.

Prepared for the accelerator machine (one H200, minutes of time), to calibrate the
simulator's hardware model and to check vLLM's CUDA paths: random weights at Qwen3-8B's
shapes (36 layers, hidden 4096, 32/8 heads of 128, bf16), then

* prefill: one request of C prompt tokens, the time of the step that prefills it;
* decode: B requests at context C, the mean time of decode-only steps;
* vLLM (if `import vllm` works on CUDA): the same figures through `VllmEngine`, sleep and
  wake-up times (release/restore), an in-place weight reload, and a PD handoff between two
  vLLM engines on the one GPU through PEARL's KV connector (tokens checked equal to a
  colocated run).

Every figure goes to `--out` (JSON) as it is measured, so a run cut short keeps what it
had; a part that fails records its error and the rest goes on. `--tiny` runs the same
code on a tiny model on any device (how it is checked without a GPU).

    python -m bench.gpu_check [--out FILE] [--tiny] [--budget-s 420]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from bench.engine_decode import run_backend
from pearl.runtime.engine import LLMEngine, ModelConfig, SamplingParams

QWEN3_8B = ModelConfig(
    vocab_size=151_936,
    hidden_size=4096,
    intermediate_size=12_288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    dtype="bfloat16",
)
PREFILL_TOKENS = (512, 2048, 8192)
DECODE = ((1, 4096), (8, 4096), (32, 4096), (8, 16_384), (32, 8192))  # (batch, context)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _free_device_bytes(cuda: bool) -> int | None:
    """Free memory of the device as the driver reports it (None without CUDA)."""
    if not cuda:
        return None
    _sync()
    free, _total = torch.cuda.mem_get_info()
    return int(free)


def _prompt(n: int, vocab: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab - 1, (n,), generator=g).tolist()


def prefill_step_s(engine: Any, n: int, vocab: int, tag: str) -> float:
    """Time of the step that prefills one n-token prompt (one new token asked)."""
    engine.add_request(tag, _prompt(n, vocab, n), SamplingParams(temperature=0, max_new_tokens=1))
    _sync()
    t0 = time.perf_counter()
    while not any(o.request_id == tag and o.finished for o in engine.step()):
        pass
    _sync()
    return time.perf_counter() - t0


def decode_step_s(engine: Any, batch: int, context: int, vocab: int, tag: str, steps: int = 8):
    """Mean time of decode-only steps of `batch` requests at `context` tokens."""
    sampling = SamplingParams(temperature=0, max_new_tokens=steps + 2)
    for i in range(batch):
        engine.add_request(f"{tag}-{i}", _prompt(context, vocab, i), sampling)
    started: set[str] = set()
    while len(started) < batch:  # prefill every request first
        started |= {o.request_id for o in engine.step() if o.new_token_ids}
    _sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        engine.step()
    _sync()
    elapsed = (time.perf_counter() - t0) / steps
    while engine.has_unfinished():
        engine.step()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu_check.json", help="JSON file the figures go to")
    ap.add_argument("--tiny", action="store_true", help="a tiny model (checks the script)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new parts")
    args = ap.parse_args()
    t_start = time.monotonic()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    cfg = ModelConfig.tiny(head_dim=32) if args.tiny else QWEN3_8B
    prefill = (32, 128) if args.tiny else PREFILL_TOKENS
    decode = ((1, 64), (4, 128)) if args.tiny else DECODE
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "model": "tiny" if args.tiny else "qwen3-8b shapes, random weights, bf16",
    }
    path = Path(args.out)

    def save() -> None:
        path.write_text(json.dumps(out, indent=2))
        print(json.dumps(out, indent=2)[-2000:], flush=True)

    def part(name: str, fn: Any) -> None:
        if time.monotonic() - t_start > args.budget_s:
            out[name] = {"skipped": "time budget spent"}
        else:
            try:
                out[name] = fn()
            except Exception as err:  # noqa: BLE001 - record it, measure the rest
                out[name] = {"error": f"{type(err).__name__}: {err}"[:500]}
        save()

    max_ctx = max(max(prefill), max(c for _, c in decode)) + 64
    kv_tokens = max(max(prefill), max(b * (c + 16) for b, c in decode)) + 1024

    def ours() -> dict[str, Any]:
        t0 = time.perf_counter()
        engine = LLMEngine(
            cfg,
            device=device,
            block_size=16,
            num_kv_blocks=kv_tokens // 16 + 1,
            max_num_batched_tokens=max(prefill),
            max_model_len=max_ctx,
            max_num_seqs=max(b for b, _ in decode),
        )
        res: dict[str, Any] = {"build_s": round(time.perf_counter() - t0, 2)}
        prefill_step_s(engine, 64, cfg.vocab_size, "warm")
        res["prefill_step_s"] = {
            str(n): round(prefill_step_s(engine, n, cfg.vocab_size, f"p{n}"), 5) for n in prefill
        }
        res["decode_step_s"] = {
            f"b{b}_c{c}": round(decode_step_s(engine, b, c, cfg.vocab_size, f"d{b}-{c}"), 5)
            for b, c in decode
        }
        del engine
        if cuda:
            torch.cuda.empty_cache()
        return res

    part("pearl_engine", ours)
    part("vllm", lambda: _vllm(cfg, prefill, decode, max_ctx, kv_tokens, cuda))
    out["wall_s"] = round(time.monotonic() - t_start, 1)
    save()


def _vllm(cfg: ModelConfig, prefill, decode, max_ctx: int, kv_tokens: int, cuda: bool):
    """vLLM's figures (see the module doc); an ImportError says it is not installed."""
    import tempfile

    from pearl.runtime.backends.vllm_engine import VllmEngine
    from pearl.runtime.engine.checkpoint import save_checkpoint

    ckpt = Path(tempfile.mkdtemp(prefix="pearl-gpu-check-"))
    device = "cuda" if cuda else "cpu"
    weights = LLMEngine(cfg, device=device, num_kv_blocks=4).state_dict()  # to CPU
    save_checkpoint(ckpt, cfg, weights)
    kv_bytes = kv_tokens * 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim
    kv_bytes *= 2 if cfg.dtype == "bfloat16" else 4

    def build() -> VllmEngine:
        return VllmEngine(
            ckpt,
            max_model_len=max_ctx,
            kv_cache_bytes=kv_bytes,
            max_num_seqs=max(b for b, _ in decode),
            max_num_batched_tokens=max(prefill),
            dtype=cfg.dtype,
        )

    t0 = time.perf_counter()
    engine = build()
    res: dict[str, Any] = {"build_s": round(time.perf_counter() - t0, 2)}
    prefill_step_s(engine, 64, cfg.vocab_size, "warm")
    res["prefill_step_s"] = {
        str(n): round(prefill_step_s(engine, n, cfg.vocab_size, f"p{n}"), 5) for n in prefill
    }
    res["decode_step_s"] = {
        f"b{b}_c{c}": round(decode_step_s(engine, b, c, cfg.vocab_size, f"d{b}-{c}"), 5)
        for b, c in decode
    }
    t0 = time.perf_counter()
    engine.load_weights(weights, 1)
    _sync()
    res["weight_reload_s"] = round(time.perf_counter() - t0, 3)
    free_awake = _free_device_bytes(cuda)
    t0 = time.perf_counter()
    engine.release()
    res["sleep_s"] = round(time.perf_counter() - t0, 3)
    free_asleep = _free_device_bytes(cuda)
    t0 = time.perf_counter()
    engine.restore()
    res["wake_s"] = round(time.perf_counter() - t0, 3)
    free_woken = _free_device_bytes(cuda)
    # measured, not assumed: device memory free (cudaMemGetInfo) before, during, after sleep;
    # None on a CPU, where vLLM has no sleep mode and release() frees nothing
    res["free_device_bytes"] = {"awake": free_awake, "asleep": free_asleep, "woken": free_woken}
    res["sleep_freed_bytes"] = (
        None if free_awake is None or free_asleep is None else free_asleep - free_awake
    )
    # PD: prefill here, decode on a second engine of the same GPU, through our connector
    decode_side = build()
    prompt = _prompt(1000 if max_ctx > 1100 else 40, cfg.vocab_size, 7)
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    (colocated,) = engine.generate([prompt], greedy)
    engine.add_request("pd", prompt, greedy, prefill_only=True)
    while not any(o.request_id == "pd" and o.finished for o in engine.step()):
        pass
    t0 = time.perf_counter()
    payload = engine.export_kv("pd")
    res["pd_export_s"] = round(time.perf_counter() - t0, 4)
    t0 = time.perf_counter()
    decode_side.import_kv("pd", payload, greedy)
    got = None
    while got is None:
        got = next((o for o in decode_side.step() if o.request_id == "pd" and o.finished), None)
    res["pd_import_and_decode_s"] = round(time.perf_counter() - t0, 4)
    res["pd_kv_bytes"] = payload.nbytes
    res["pd_tokens_equal_colocated"] = got.output_token_ids == colocated.output_token_ids
    res["backend_check"] = run_backend(engine, [(prompt, 4)], 1, "last") == 4
    return res


if __name__ == "__main__":
    main()
