"""The engine-backend contract, one suite run against every backend (`pearl.runtime.backends`).

Each backend is built from the same tiny random Qwen3 checkpoint (an HF directory written by
`transformers`), so a full-sequence forward of that model with `transformers` is the
reference for all of them: greedy tokens are its argmax and every sampled token's logprob
is its log-softmax. Then: abort returns the generated prefix; the prefix cache serves a
repeated prompt within a weight version and never across versions; weights installed by
version change the outputs to the new model's; release refuses requests until restore
(and gives back the prefixes of the requests it cut); per-step telemetry adds up to the
tokens the requests prefilled and decoded; a prefill-only request handed to a second
engine of the same backend (export -> import) decodes exactly as the colocated run did,
while each backend refuses the other's KV; and what a backend cannot do it refuses with
`RequestRejected`, as its capabilities say.

vLLM runs for real here, on CPU (the `vllm` extra, which `make test` installs). The suite
fails if vLLM is missing; `PEARL_SKIP_VLLM=1` leaves its backend out on purpose.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from pearl.errors import InputError
from pearl.runtime.backends import BACKENDS, StepTelemetry, capabilities_of
from pearl.runtime.engine import EngineReleased, LLMEngine, RequestRejected, SamplingParams

NAMES = ["pearl"] + ([] if os.environ.get("PEARL_SKIP_VLLM") == "1" else ["vllm"])
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)


def _prompt(n: int = 300, k: int = 7) -> list[int]:
    # longer than vLLM's CPU KV block, so the prefix cache has full blocks to share
    return [(k * i) % 500 + 3 for i in range(n)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # a head size vLLM's kernels support
        max_position_embeddings=2048,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-qwen3")
    Qwen3ForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    return path


def _reference(checkpoint: Path, state_dict: dict[str, torch.Tensor] | None = None) -> Any:
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(checkpoint, torch_dtype=torch.float32)
    if state_dict is not None:
        model.load_state_dict(state_dict, strict=False)
    return model.eval()


def _log_softmax_at(model: Any, prompt: list[int], tokens: tuple[int, ...]) -> torch.Tensor:
    """Log-softmax of the next token at each generated position, from one forward."""
    ids = torch.tensor([prompt + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    return torch.log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + len(tokens)], dim=-1)


def _build(name: str, checkpoint: Path) -> Any:
    if name == "pearl":
        return LLMEngine(checkpoint_dir=checkpoint, num_kv_blocks=128, max_num_batched_tokens=512)
    from pearl.runtime.backends.vllm_engine import VllmEngine

    return VllmEngine(
        checkpoint, seed=0, max_model_len=1024, max_num_batched_tokens=256, dtype="float32"
    )


@pytest.fixture(scope="module", params=NAMES)
def backend(request: pytest.FixtureRequest, checkpoint: Path) -> Any:
    return _build(request.param, checkpoint)


@pytest.fixture(scope="module")
def decode_side(backend: Any, checkpoint: Path) -> Any:
    """A second engine of the same backend: the decode side of a PD handoff."""
    return _build(backend.capabilities.name, checkpoint)


def _run(engine: Any, request_id: str) -> Any:
    """Step until `request_id` finishes; its final output."""
    while True:
        for out in engine.step():
            if out.request_id == request_id and out.finished:
                return out


def _new_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    model = _reference(checkpoint)
    return {k: (v * 1.5 if ".mlp." in k else v.clone()) for k, v in model.state_dict().items()}


def test_greedy_tokens_and_logprobs_are_the_models(backend: Any, checkpoint: Path) -> None:
    prompt = _prompt()
    out = backend.generate([prompt], GREEDY)[0]
    assert out.finished and out.finish_reason == "length" and len(out.output_token_ids) == 8
    ref = _log_softmax_at(_reference(checkpoint), prompt, out.output_token_ids)
    assert out.output_token_ids == tuple(int(t) for t in ref.argmax(-1))
    got = torch.tensor(out.output_logprobs)
    want = ref[torch.arange(8), torch.tensor(out.output_token_ids)]
    assert torch.allclose(got, want, atol=2e-3), (got, want)


def test_sampled_tokens_carry_their_logprob(backend: Any, checkpoint: Path) -> None:
    prompt = _prompt(120, 11)
    out = backend.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=6, seed=3))[0]
    ref = _log_softmax_at(_reference(checkpoint), prompt, out.output_token_ids)
    want = ref[torch.arange(6), torch.tensor(out.output_token_ids)]
    assert torch.allclose(torch.tensor(out.output_logprobs), want, atol=2e-3)


def test_seeded_sampling_does_not_depend_on_the_batch(backend: Any) -> None:
    """Seeded requests with long prompts, prefilled together, draw the same tokens as each
    alone (vLLM's CPU build once failed these when their prompts were chunked)."""
    prompts = [_prompt(260 + 10 * i, 3 + i) for i in range(3)]
    for i, p in enumerate(prompts):
        backend.add_request(f"s{i}", p, SamplingParams(temperature=1.0, max_new_tokens=6, seed=i))
    together: dict[str, tuple[int, ...]] = {}
    while backend.has_unfinished():
        together.update({o.request_id: o.output_token_ids for o in backend.step() if o.finished})
    alone = backend.generate(
        [prompts[1]], SamplingParams(temperature=1.0, max_new_tokens=6, seed=1)
    )
    assert len(together) == 3 and alone[0].output_token_ids == together["s1"]


def test_abort_returns_what_was_generated(backend: Any) -> None:
    backend.add_request("cut", _prompt(64, 3), SamplingParams(temperature=0.0, max_new_tokens=200))
    seen: tuple[int, ...] = ()
    for _ in range(50):
        for o in backend.step():
            seen = o.output_token_ids
        if len(seen) >= 3:
            break
    cut = backend.abort("cut")
    assert cut.finish_reason == "abort" and cut.finished
    assert len(cut.output_token_ids) >= 3 and cut.output_token_ids[: len(seen)] == seen
    assert len(cut.output_logprobs) == len(cut.output_token_ids)
    assert not backend.has_unfinished()
    with pytest.raises(RequestRejected):
        backend.abort("cut")


def test_weights_by_version_and_a_cache_per_version(backend: Any, checkpoint: Path) -> None:
    prompt = _prompt(300, 13)
    first = backend.generate([prompt], GREEDY)[0]
    again = backend.generate([prompt], GREEDY)[0]
    assert again.num_cached_prefix_tokens > 0 and again.output_token_ids == first.output_token_ids
    new = _new_weights(checkpoint)
    version = backend.weight_version + 1
    backend.load_weights(new, version)
    assert backend.weight_version == version
    after = backend.generate([prompt], GREEDY)[0]
    assert after.num_cached_prefix_tokens == 0  # the old version's prefix never matches
    ref = _log_softmax_at(_reference(checkpoint, new), prompt, after.output_token_ids)
    assert after.output_token_ids == tuple(int(t) for t in ref.argmax(-1))
    assert after.output_token_ids != first.output_token_ids
    back = _reference(checkpoint).state_dict()
    backend.load_weights(back, version + 1)  # later tests see the checkpoint's weights again
    assert backend.generate([prompt], GREEDY)[0].output_token_ids == first.output_token_ids


def test_a_weight_install_keeps_requests_in_flight(backend: Any, checkpoint: Path) -> None:
    if not backend.capabilities.inflight_weight_install:
        pytest.fail("every shipped backend installs weights with requests in flight")
    backend.add_request("live", _prompt(40, 5), SamplingParams(temperature=0.0, max_new_tokens=12))
    backend.step()
    backend.load_weights(_reference(checkpoint).state_dict(), backend.weight_version + 1)
    done = None
    while backend.has_unfinished():
        for o in backend.step():
            done = o if o.finished else done
    assert done is not None and done.request_id == "live" and len(done.output_token_ids) == 12


def test_release_refuses_until_restore(backend: Any) -> None:
    backend.add_request("held", _prompt(40, 9), SamplingParams(temperature=0.0, max_new_tokens=50))
    backend.step()
    backend.step()
    cut = backend.release()
    assert [o.request_id for o in cut] == ["held"] and cut[0].finish_reason == "abort"
    assert len(cut[0].output_token_ids) >= 1
    assert backend.is_released
    with pytest.raises(EngineReleased):
        backend.add_request("late", _prompt(8), GREEDY)
    backend.restore()
    assert not backend.is_released
    assert backend.generate([_prompt(20)], GREEDY)[0].finish_reason == "length"


def test_step_telemetry_adds_up_to_the_work(backend: Any) -> None:
    prompt = _prompt(200, 17)
    backend.add_request("t", prompt, SamplingParams(temperature=0.0, max_new_tokens=10))
    steps: list[StepTelemetry] = []
    final = None
    while backend.has_unfinished():
        outs = backend.step()
        steps.append(backend.last_step)
        final = next((o for o in outs if o.finished), final)
    assert final is not None
    prefilled = sum(s.prefill_tokens for s in steps)
    assert prefilled == len(prompt) - final.num_cached_prefix_tokens
    assert sum(s.decode_tokens for s in steps) == len(final.output_token_ids) - 1
    assert all(s.context_tokens >= len(prompt) * s.decode_tokens for s in steps)


def test_what_a_backend_cannot_do_it_refuses(backend: Any) -> None:
    caps = backend.capabilities
    assert caps == BACKENDS["pearl" if isinstance(backend, LLMEngine) else "vllm"]
    if not caps.kv_export:
        with pytest.raises(RequestRejected) as err:
            backend.add_request("p", _prompt(16), GREEDY, prefill_only=True)
        assert err.value.reason == "unsupported"
    too_long = backend.max_model_len
    with pytest.raises(RequestRejected) as err:
        backend.add_request("long", _prompt(too_long), GREEDY)
    assert err.value.reason == "context_limit"
    with pytest.raises(RequestRejected) as err:
        backend.add_request("bad", [10**6], GREEDY)
    assert err.value.reason == "bad_token"


def test_a_prefill_handed_to_another_engine_decodes_as_colocated(
    backend: Any, decode_side: Any
) -> None:
    """Prefill-only on one engine, export, import on another engine of the same backend:
    under greedy sampling the turn's tokens and logprobs equal a colocated run's. With a
    prefix-cache hit on the prefill side, and once more with the decode side holding the
    prefix itself (it loads only the blocks it lacks)."""
    prompt = _prompt(280, k=11)
    (colocated,) = backend.generate([prompt], GREEDY)
    for i in range(2):
        rid = f"pd{i}"
        backend.add_request(rid, prompt, GREEDY, prefill_only=True)
        first = _run(backend, rid)
        assert first.finish_reason == "prefill" and len(first.output_token_ids) == 1
        payload = backend.export_kv(rid)
        assert payload.num_kv_tokens == len(prompt) and payload.nbytes > 0
        assert payload.output_token_ids == colocated.output_token_ids[:1]
        assert decode_side.import_kv(rid, payload, GREEDY) is None
        out = _run(decode_side, rid)
        assert out.output_token_ids == colocated.output_token_ids
        assert out.output_logprobs == pytest.approx(colocated.output_logprobs, abs=1e-4)
        assert out.num_prompt_tokens == len(prompt)
    with pytest.raises(RequestRejected) as err:
        backend.export_kv("pd0")  # exported (and released) already
    assert err.value.reason == "unknown_id"


def test_a_payload_that_already_ends_its_turn_is_finished_at_import(
    backend: Any, decode_side: Any
) -> None:
    one = SamplingParams(temperature=0.0, max_new_tokens=2)
    backend.add_request("short", _prompt(40), one, prefill_only=True)
    _run(backend, "short")
    payload = backend.export_kv("short")
    done = decode_side.import_kv("short", payload, SamplingParams(max_new_tokens=1))
    assert done is not None and done.finished and done.output_token_ids == payload.output_token_ids


def test_payloads_cross_only_between_engines_of_one_layout(checkpoint: Path) -> None:
    """PEARL's engine and vLLM keep KV differently: each refuses the other's payload."""
    if "vllm" not in NAMES:
        pytest.skip("PEARL_SKIP_VLLM=1")
    engines = [_build("pearl", checkpoint), _build("vllm", checkpoint)]
    payloads = []
    for e in engines:
        e.add_request("x", _prompt(40), GREEDY, prefill_only=True)
        _run(e, "x")
        payloads.append(e.export_kv("x"))
    for e, foreign in zip(engines, reversed(payloads), strict=True):
        with pytest.raises(RequestRejected) as err:
            e.import_kv("x", foreign, GREEDY)
        assert err.value.reason == "incompatible_kv"


def test_capabilities_by_name() -> None:
    assert capabilities_of("pearl").disaggregation and capabilities_of("vllm").disaggregation
    assert capabilities_of("vllm").role_change == "per_request"
    assert capabilities_of("vllm").release == "none"
    with pytest.raises(ValueError, match="known: pearl, vllm"):
        capabilities_of("sglang")


@pytest.mark.skipif("vllm" not in NAMES, reason="PEARL_SKIP_VLLM=1")
def test_a_vllm_backend_without_a_model_directory_names_the_file(tmp_path: Path) -> None:
    from pearl.runtime.backends.vllm_engine import VllmEngine

    with pytest.raises(InputError) as err:
        VllmEngine(tmp_path / "missing")
    assert "config.json" in str(err.value)
