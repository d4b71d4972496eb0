"""KV export/import: a prefill engine hands a request to a decode engine mid-flight."""

from __future__ import annotations

import pickle

import pytest
import torch

from pearl.runtime.engine import LLMEngine, ModelConfig, RequestRejected, SamplingParams


def make_engine(cfg: ModelConfig, weights: dict[str, torch.Tensor], **kw) -> LLMEngine:
    engine = LLMEngine(cfg, block_size=4, num_kv_blocks=96, max_num_batched_tokens=16, **kw)
    engine.load_weights(weights, version=7)
    return engine


def run_to_end(engine: LLMEngine) -> dict[str, tuple[int, ...]]:
    done = {}
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.output_token_ids
    return done


PROMPTS = [list(range(40, 59)), [7, 8, 9], list(range(100, 111))]


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=0, max_new_tokens=12),
        SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=12, seed=5),
    ],
    ids=["greedy", "seeded"],
)
def test_prefill_export_import_decode_equals_colocated(
    tiny_cfg, tiny_engine_weights, sampling
) -> None:
    """Prefill-only + export + import into another engine generates the same tokens."""
    colocated = make_engine(tiny_cfg, tiny_engine_weights)
    for i, p in enumerate(PROMPTS):
        colocated.add_request(f"r{i}", p, sampling)
    expected = run_to_end(colocated)

    prefill = make_engine(tiny_cfg, tiny_engine_weights)
    decode = make_engine(tiny_cfg, tiny_engine_weights, seed=99)  # other engine seed
    for i, p in enumerate(PROMPTS):
        prefill.add_request(f"r{i}", p, sampling, prefill_only=True)
    finished = [o for o in _drain(prefill) if o.finished]
    assert {o.finish_reason for o in finished} == {"prefill"}
    for o in finished:
        payload = pickle.loads(pickle.dumps(prefill.export_kv(o.request_id)))
        assert payload.num_kv_tokens == len(PROMPTS[int(o.request_id[1:])])
        assert payload.k.device.type == "cpu" and payload.weight_version == 7
        decode.import_kv(o.request_id, payload, sampling)
    assert not prefill.has_unfinished() and prefill.blocks.num_free_blocks == 96
    assert run_to_end(decode) == expected


def _drain(engine: LLMEngine) -> list:
    outs = []
    while engine.has_unfinished():
        outs.extend(engine.step())
    return outs


def test_mid_decode_migration_continues_exactly(tiny_cfg, tiny_engine_weights) -> None:
    """Exporting a running request after some decode steps and resuming elsewhere is exact."""
    sampling = SamplingParams(temperature=0.8, max_new_tokens=20, seed=11)
    a = make_engine(tiny_cfg, tiny_engine_weights)
    a.add_request("x", PROMPTS[0], sampling)
    expected = run_to_end(a)["x"]
    b = make_engine(tiny_cfg, tiny_engine_weights)
    c = make_engine(tiny_cfg, tiny_engine_weights)
    b.add_request("x", PROMPTS[0], sampling)
    for _ in range(6):
        b.step()
    payload = b.export_kv("x")
    assert 0 < len(payload.output_token_ids) < 20
    c.import_kv("x", payload, sampling)
    assert run_to_end(c)["x"] == expected


def test_import_refuses_incompatible_payload(tiny_cfg, tiny_engine_weights) -> None:
    """A payload from a differently shaped model is rejected with a reason, not a crash."""
    a = make_engine(tiny_cfg, tiny_engine_weights)
    a.add_request("x", PROMPTS[1], SamplingParams(max_new_tokens=4), prefill_only=True)
    _drain(a)
    payload = a.export_kv("x")
    other = LLMEngine(ModelConfig.tiny(num_key_value_heads=4))
    with pytest.raises(RequestRejected) as err:
        other.import_kv("x", payload, SamplingParams(max_new_tokens=4))
    assert err.value.reason == "incompatible_kv"


def test_import_of_an_already_finished_payload_reports_it(tiny_cfg, tiny_engine_weights) -> None:
    """A payload whose tokens already reach max_new_tokens finishes at import, KV freed."""
    a = make_engine(tiny_cfg, tiny_engine_weights)
    a.add_request("x", PROMPTS[0], SamplingParams(max_new_tokens=5), prefill_only=True)
    _drain(a)
    payload = a.export_kv("x")
    b = make_engine(tiny_cfg, tiny_engine_weights)
    out = b.import_kv("x", payload, SamplingParams(max_new_tokens=1))
    assert out is not None and out.finished and out.finish_reason == "length"
    assert out.output_token_ids == payload.output_token_ids
    assert not b.has_unfinished() and b.blocks.num_free_blocks == 96
    assert b.import_kv("y", payload, SamplingParams(max_new_tokens=5)) is None


def test_moe_model_disaggregated_equals_colocated() -> None:
    """The MoE variant (top-k routing) also decodes identically after a KV hand-off."""
    cfg = ModelConfig.tiny(moe=True)
    weights = {
        k: v * 8 if v.dim() > 1 else v for k, v in LLMEngine(cfg, seed=5).state_dict().items()
    }
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    colocated = make_engine(cfg, weights)
    expected = colocated.generate([PROMPTS[0]], greedy)[0].output_token_ids
    prefill, decode = make_engine(cfg, weights), make_engine(cfg, weights)
    prefill.add_request("m", PROMPTS[0], greedy, prefill_only=True)
    _drain(prefill)
    decode.import_kv("m", prefill.export_kv("m"), greedy)
    assert run_to_end(decode)["m"] == expected


def test_imports_beyond_kv_capacity_all_finish(tiny_cfg, tiny_engine_weights) -> None:
    """Imported requests that together outgrow the decode engine's KV are preempted and
    recomputed, never deadlocked, and still produce the colocated tokens."""
    greedy = SamplingParams(temperature=0, max_new_tokens=14)
    prompts = [list(range(10 * i, 10 * i + 11)) for i in range(3)]
    colocated = make_engine(tiny_cfg, tiny_engine_weights)
    expected = [o.output_token_ids for o in colocated.generate(prompts, greedy)]
    prefill = make_engine(tiny_cfg, tiny_engine_weights)
    for i, p in enumerate(prompts):
        prefill.add_request(f"r{i}", p, greedy, prefill_only=True)
    _drain(prefill)
    decode = LLMEngine(tiny_cfg, block_size=4, num_kv_blocks=12, max_num_seqs=2)
    decode.load_weights(tiny_engine_weights, version=7)
    for i in range(3):
        assert decode.import_kv(f"r{i}", prefill.export_kv(f"r{i}"), greedy) is None
    done = run_to_end(decode)
    assert [done[f"r{i}"] for i in range(3)] == expected
