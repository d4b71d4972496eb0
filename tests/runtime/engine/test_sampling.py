"""Sampling: seeds, temperature, top-p, and the logprobs RL needs."""

from __future__ import annotations

import pytest
import torch

from pearl.runtime.engine.sampling import SamplingParams, sample


def test_greedy_picks_argmax_with_its_logprob() -> None:
    """temperature 0 takes the argmax; its logprob is log_softmax of the raw logits."""
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    tokens, lps = sample(logits, [SamplingParams(temperature=0)] * 3, [0] * 3, [0] * 3)
    assert tokens == logits.argmax(-1).tolist()
    ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(lps), ref)


def test_seeded_sampling_is_reproducible_and_seed_dependent() -> None:
    """Same (seed, index) -> same token, regardless of the row's batch neighbours."""
    logits = torch.zeros(1, 1000)
    p = SamplingParams(temperature=1.0)
    a = sample(logits, [p], [42], [3])[0]
    b = sample(torch.zeros(4, 1000), [p] * 4, [1, 2, 42, 3], [0, 0, 3, 0])[0][2]
    assert a[0] == b
    draws = {sample(logits, [p], [s], [0])[0][0] for s in range(20)}
    assert len(draws) > 10


def test_top_p_keeps_only_the_nucleus() -> None:
    """With top_p below the top token's mass, only the top token can be drawn."""
    logits = torch.tensor([[5.0, 1.0, 0.5, 0.0]])
    p = SamplingParams(temperature=1.0, top_p=0.5)
    assert {sample(logits, [p], [s], [0])[0][0] for s in range(50)} == {0}
    wide = SamplingParams(temperature=1.0, top_p=1.0)
    assert len({sample(logits, [wide], [s], [0])[0][0] for s in range(400)}) > 1


def test_temperature_logprob_and_frequencies() -> None:
    """Logprobs are of the temperature-scaled distribution; draws follow it."""
    logits = torch.tensor([[1.0, 0.0]])
    p = SamplingParams(temperature=0.5)
    probs = torch.softmax(logits / 0.5, -1)[0]
    draws = [sample(logits, [p], [s], [0]) for s in range(2000)]
    freq0 = sum(1 for t, _ in draws if t[0] == 0) / len(draws)
    assert abs(freq0 - probs[0].item()) < 0.04
    tok, lp = draws[0]
    assert lp[0] == pytest.approx(torch.log(probs[tok[0]]).item(), rel=1e-5)


@pytest.mark.parametrize("kw", [{"temperature": -1}, {"top_p": 0}, {"max_new_tokens": 0}])
def test_invalid_params_are_refused(kw) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**kw)
