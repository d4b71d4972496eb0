"""Numerical reference: our engine's logits vs HF transformers' Qwen3 (same random weights)."""

from __future__ import annotations

import pytest
import torch

from pearl.runtime.engine import ModelConfig, Qwen3ForCausalLM, SamplingParams
from pearl.runtime.engine import model_runner as runner_mod

from .conftest import engine_like, hf_model

REL_TOL = 1e-4


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def capture_logits(monkeypatch) -> dict[int, list[torch.Tensor]]:
    """Record the logits rows the engine samples from, keyed by request seed."""
    seen: dict[int, list[torch.Tensor]] = {}
    real = runner_mod.sample

    def recording(logits, params, seeds, indices):
        for row, seed in enumerate(seeds):
            seen.setdefault(seed, []).append(logits[row].detach().clone())
        return real(logits, params, seeds, indices)

    monkeypatch.setattr(runner_mod, "sample", recording)
    return seen


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_engine_logits_match_hf_for_prefill_and_decode(moe: bool, monkeypatch) -> None:
    """Prefill (chunked, batched) and each incremental decode step match HF within 1e-4."""
    cfg = ModelConfig.tiny(moe=moe)
    hf = hf_model(cfg)
    engine = engine_like(hf, cfg, block_size=4, num_kv_blocks=64, max_num_batched_tokens=8)
    seen = capture_logits(monkeypatch)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (13, 6, 9)]
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, SamplingParams(temperature=0, max_new_tokens=5, seed=i))
    outputs = {}
    while engine.has_unfinished():
        for out in engine.step():
            outputs[out.request_id] = out
    for i, prompt in enumerate(prompts):
        tokens = prompt + list(outputs[f"r{i}"].output_token_ids)
        with torch.no_grad():
            ref = hf(torch.tensor([tokens[:-1]])).logits[0]
        ref_rows = ref[len(prompt) - 1 :]
        ours = torch.stack(seen[i])
        assert ours.shape == ref_rows.shape  # one prefill row + 4 decode rows
        for step, (a, b) in enumerate(zip(ours, ref_rows, strict=True)):
            assert rel_err(a, b) < REL_TOL, f"request {i} step {step}"
        ref_greedy = [int(ref_rows[j].argmax()) for j in range(5)]
        assert ref_greedy == list(outputs[f"r{i}"].output_token_ids)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_full_sequence_forward_matches_hf(moe: bool) -> None:
    """The trainer path (input_ids [B, L], no cache) equals HF's forward."""
    cfg = ModelConfig.tiny(moe=moe)
    hf = hf_model(cfg, seed=1)
    ours = Qwen3ForCausalLM(cfg)
    ours.load_state_dict(hf.state_dict())
    ids = torch.randint(0, cfg.vocab_size, (3, 17))
    positions = torch.arange(17).expand(3, 17)
    with torch.no_grad():
        assert rel_err(ours(ids, positions), hf(ids).logits) < REL_TOL


def test_tied_embeddings_share_weights() -> None:
    """With tie_word_embeddings the LM head is the embedding matrix."""
    model = Qwen3ForCausalLM(ModelConfig.tiny(tie_word_embeddings=True))
    assert model.lm_head.weight is model.model.embed_tokens.weight


def _cache_kwargs(output) -> dict:
    """transformers 5.2x names the KV cache `cache`; older releases `past_key_values`."""
    if "cache" in output.keys():
        return {"cache": output["cache"]}
    return {"past_key_values": output["past_key_values"]}


def test_decode_steps_match_hf_incremental_decoding(monkeypatch) -> None:
    """Step by step against HF's own KV-cached decoding (past_key_values), greedy."""
    cfg = ModelConfig.tiny()
    hf = hf_model(cfg, seed=2)
    engine = engine_like(hf, cfg, block_size=4, num_kv_blocks=32)
    seen = capture_logits(monkeypatch)
    prompt = list(range(70, 81))
    out = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=6, seed=0))[0]
    with torch.no_grad():
        step = hf(torch.tensor([prompt]), use_cache=True)
        ref_rows = [step.logits[0, -1]]
        for token in out.output_token_ids[:-1]:
            step = hf(torch.tensor([[token]]), use_cache=True, **_cache_kwargs(step))
            ref_rows.append(step.logits[0, -1])
    assert len(seen[0]) == len(ref_rows) == 6
    for a, b in zip(seen[0], ref_rows, strict=True):
        assert rel_err(a, b) < REL_TOL
    assert [int(r.argmax()) for r in ref_rows] == list(out.output_token_ids)
