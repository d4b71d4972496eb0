"""LLMEngine request path: refusals, abort, release/restore, weights by version."""

from __future__ import annotations

import pytest
import torch

from pearl.errors import InputError
from pearl.runtime.engine import (
    ByteTokenizer,
    EngineReleased,
    LLMEngine,
    ModelConfig,
    Qwen3ForCausalLM,
    RequestRejected,
    SamplingParams,
)

GREEDY = SamplingParams(temperature=0, max_new_tokens=6)


@pytest.fixture
def engine(tiny_cfg, tiny_engine_weights) -> LLMEngine:
    e = LLMEngine(tiny_cfg, block_size=4, num_kv_blocks=32)
    e.load_weights(tiny_engine_weights, version=1)
    return e


def test_request_over_context_limit_is_refused(engine) -> None:
    """prompt + max_new_tokens beyond the context limit -> RequestRejected, engine unharmed."""
    assert engine.max_model_len == 128
    with pytest.raises(RequestRejected) as err:
        engine.add_request("long", list(range(120)), SamplingParams(max_new_tokens=9))
    assert err.value.reason == "context_limit" and "128" in str(err.value)
    assert not engine.has_unfinished()
    assert engine.generate([[1, 2, 3]], GREEDY)[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("prompt", "reason"), [([], "empty_prompt"), ([1, 260], "bad_token"), ([-1], "bad_token")]
)
def test_bad_requests_are_refused(engine, prompt, reason) -> None:
    with pytest.raises(RequestRejected) as err:
        engine.add_request("bad", prompt, GREEDY)
    assert err.value.reason == reason


def test_duplicate_and_unknown_ids(engine) -> None:
    engine.add_request("a", [1, 2], GREEDY)
    with pytest.raises(RequestRejected, match="duplicate_id"):
        engine.add_request("a", [1, 2], GREEDY)
    with pytest.raises(RequestRejected, match="unknown_id"):
        engine.abort("zzz")


def test_abort_returns_generated_prefix(engine) -> None:
    """abort() hands back every token generated so far and frees the KV."""
    engine.add_request("a", [5, 6, 7, 8, 9], SamplingParams(temperature=0, max_new_tokens=50))
    streamed = []
    for _ in range(4):
        for out in engine.step():
            streamed.extend(out.new_token_ids)
    out = engine.abort("a")
    assert out.finish_reason == "abort" and out.finished
    assert list(out.output_token_ids) == streamed and len(streamed) == 4
    assert len(out.output_logprobs) == 4
    assert not engine.has_unfinished() and engine.blocks.num_free_blocks == 32


def test_stop_token_finishes(engine) -> None:
    first = engine.generate([[3, 4, 5]], GREEDY)[0].output_token_ids
    stop = SamplingParams(temperature=0, max_new_tokens=6, stop_token_ids=(first[1],))
    out = engine.generate([[3, 4, 5]], stop)[0]
    assert out.finish_reason == "stop" and out.output_token_ids == first[:2]


def test_release_and_restore(engine) -> None:
    """release() aborts live requests and drops device state; restore() resumes identically."""
    before = engine.generate([[9, 8, 7]], GREEDY)[0].output_token_ids
    engine.add_request("live", [1, 2, 3], GREEDY)
    engine.step()
    aborted = engine.release()
    assert [o.request_id for o in aborted] == ["live"] and len(aborted[0].output_token_ids) == 1
    assert engine.is_released and engine.runner.kv is None and engine.runner.model is None
    with pytest.raises(EngineReleased):
        engine.add_request("x", [1], GREEDY)
    engine.restore()
    assert engine.generate([[9, 8, 7]], GREEDY)[0].output_token_ids == before


def test_start_released_builds_nothing_until_restore(tiny_cfg) -> None:
    """An engine started released holds its weights on the CPU only (no model, no KV);
    loading a snapshot works while released; restore() gives the same engine as one built
    normally, for the seeded init and for loaded weights alike."""
    built, parked = LLMEngine(tiny_cfg, seed=5), LLMEngine(tiny_cfg, seed=5, start_released=True)
    assert parked.is_released and parked.runner.model is None and parked.runner.kv is None
    with pytest.raises(EngineReleased):
        parked.add_request("x", [1], GREEDY)
    parked.restore()
    for k, v in built.state_dict().items():
        assert torch.equal(parked.state_dict()[k], v), k
    prompt = [[4, 2, 9, 1]]
    assert (
        parked.generate(prompt, GREEDY)[0].output_token_ids
        == built.generate(prompt, GREEDY)[0].output_token_ids
    )
    other = LLMEngine(tiny_cfg, seed=6).state_dict()
    late = LLMEngine(tiny_cfg, seed=5, start_released=True)
    late.load_weights(other, version=3)
    late.restore()
    assert late.weight_version == 3
    assert all(torch.equal(late.state_dict()[k], v) for k, v in other.items())


def test_load_weights_by_version(engine, tiny_cfg) -> None:
    """load_weights switches outputs and version; state_dict round-trips."""
    original = engine.state_dict()
    before = engine.generate([[9, 8, 7]], GREEDY)[0].output_token_ids
    other = {
        k: v * 8 if v.dim() > 1 else v for k, v in LLMEngine(tiny_cfg, seed=11).state_dict().items()
    }
    engine.load_weights(other, version=2)
    assert engine.weight_version == 2
    assert engine.generate([[9, 8, 7]], GREEDY)[0].output_token_ids != before
    engine.release()
    engine.load_weights(original, version=3)  # while released: installed at restore
    engine.restore()
    assert engine.weight_version == 3
    assert engine.generate([[9, 8, 7]], GREEDY)[0].output_token_ids == before


def test_loaded_weights_reach_the_fused_projections(engine, tiny_cfg) -> None:
    """The runner fuses q/k/v and gate/up; weights loaded in place into a live engine give
    the logprobs of an unfused model holding those weights."""
    other = {
        k: v * 8 if v.dim() > 1 else v for k, v in LLMEngine(tiny_cfg, seed=12).state_dict().items()
    }
    engine.generate([[4, 4, 2]], GREEDY)  # live, fused, with rows and pages in use
    engine.load_weights(other, version=2)
    assert all(torch.equal(v, other[k]) for k, v in engine.state_dict().items())
    prompt = [9, 8, 7]
    out = engine.generate([prompt], GREEDY)[0]
    ref = Qwen3ForCausalLM(tiny_cfg)
    ref.load_state_dict(other)
    tokens = prompt + list(out.output_token_ids)
    with torch.no_grad():
        logits = ref(torch.tensor([tokens[:-1]]), torch.arange(len(tokens) - 1)[None])[0]
    rows = torch.log_softmax(logits[len(prompt) - 1 :], dim=-1)
    assert rows.argmax(-1).tolist() == list(out.output_token_ids)
    chosen = rows.gather(1, torch.tensor(out.output_token_ids)[:, None])[:, 0]
    assert torch.allclose(chosen, torch.tensor(out.output_logprobs), atol=1e-4)


def test_load_weights_rejects_wrong_shapes(engine) -> None:
    sd = engine.state_dict()
    sd["model.norm.weight"] = torch.ones(3)
    with pytest.raises(InputError) as err:
        engine.load_weights(sd, version=9)
    assert err.value.field == "model.norm.weight" and engine.weight_version == 1
    engine.release()  # released: the shapes come from the offloaded weights, same checks
    sd["model.norm.weight"] = torch.ones(3)
    with pytest.raises(InputError) as err:
        engine.load_weights(sd, version=9)
    assert err.value.field == "model.norm.weight"
    sd["model.bogus.weight"] = torch.ones(3)
    del sd["model.norm.weight"]
    with pytest.raises(InputError) as err:
        engine.load_weights(sd, version=9)
    assert err.value.field == "model.bogus.weight"
    engine.restore()


def test_seeded_init_is_deterministic(tiny_cfg) -> None:
    a, b = LLMEngine(tiny_cfg, seed=1).state_dict(), LLMEngine(tiny_cfg, seed=1).state_dict()
    c = LLMEngine(tiny_cfg, seed=2).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["lm_head.weight"], c["lm_head.weight"])


def test_byte_tokenizer_round_trip() -> None:
    tok = ByteTokenizer()
    text = "héllo, wörld ✓"
    ids = tok.encode(text, add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    assert tok.decode(ids) == text
    assert tok.vocab_size == ModelConfig.tiny().vocab_size
    assert max(ids) < tok.vocab_size


def test_request_larger_than_the_kv_cache_is_refused(tiny_cfg) -> None:
    """With max_model_len above the cache size, a request that could never fit is refused."""
    e = LLMEngine(tiny_cfg, block_size=4, num_kv_blocks=8, max_model_len=1024)
    with pytest.raises(RequestRejected) as err:
        e.add_request("big", list(range(30)), SamplingParams(max_new_tokens=8))
    assert err.value.reason == "kv_capacity"
    e.add_request("fits", list(range(20)), SamplingParams(max_new_tokens=12))
    assert e.generate([[1]], GREEDY)[0].finished


def test_bfloat16_engine_runs_and_exports(tiny_cfg, tiny_engine_weights) -> None:
    """bfloat16 (the dtype of real checkpoints on GPUs) runs; its KV exports in bfloat16."""
    e = LLMEngine(tiny_cfg, block_size=4, num_kv_blocks=32, dtype=torch.bfloat16)
    e.load_weights(tiny_engine_weights, version=1)
    assert e.state_dict()["lm_head.weight"].dtype == torch.bfloat16
    e.add_request("b", [1, 2, 3, 4, 5], GREEDY, prefill_only=True)
    while e.has_unfinished():
        e.step()
    payload = e.export_kv("b")
    assert payload.k.dtype == torch.bfloat16 and payload.k.shape == (2, 5, 2, 16)
    out = e.generate([[1, 2, 3, 4, 5]], GREEDY)[0]
    assert len(out.output_token_ids) == 6 and all(lp <= 0 for lp in out.output_logprobs)
