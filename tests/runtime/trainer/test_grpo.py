"""GRPO maths against hand-computed values."""

import math

import pytest
import torch

from pearl.runtime.trainer.grpo import group_advantages, grpo_loss, token_logprobs


def test_group_advantages_are_relative_within_each_group():
    """Each group is normalised on its own; a constant group and a singleton get 0."""
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 3.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    adv = group_advantages(rewards, groups, eps=0.0)
    assert torch.allclose(adv[:4], torch.tensor([1.0, -1.0, 1.0, -1.0]))
    assert torch.all(adv[4:] == 0)


def test_loss_without_clipping_is_minus_mean_advantage_at_ratio_one():
    """With new == old, ratio is 1 and the loss is -mean over response tokens of A."""
    lp = torch.log(torch.full((2, 4), 0.5))
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]])
    adv = torch.tensor([2.0, -1.0])
    parts = grpo_loss(lp, lp, adv, mask)
    assert parts.loss.item() == pytest.approx(-(2 * 2 + 3 * -1) / 5)
    assert parts.clip_fraction == 0.0 and parts.ratio_mean == pytest.approx(1.0)


def test_clipping_stops_gradient_beyond_the_trust_region():
    """A positive-advantage token whose ratio is above 1+eps gets no gradient."""
    old = torch.zeros(1, 1)
    new = torch.full((1, 1), math.log(1.5), requires_grad=True)
    parts = grpo_loss(new, old, torch.tensor([1.0]), torch.ones(1, 1), clip_eps=0.2)
    parts.loss.backward()
    assert parts.loss.item() == pytest.approx(-1.2)
    assert new.grad.abs().item() == 0.0
    assert parts.clip_fraction == 1.0


def test_kl_term_is_zero_at_the_reference_and_positive_elsewhere():
    lp = torch.log(torch.tensor([[0.25, 0.5]]))
    mask = torch.ones(1, 2)
    same = grpo_loss(lp, lp, torch.tensor([0.0]), mask, ref_logprobs=lp, kl_coef=1.0)
    other = grpo_loss(lp, lp, torch.tensor([0.0]), mask, ref_logprobs=lp - 0.3, kl_coef=1.0)
    assert same.kl == pytest.approx(0.0) and other.kl > 0


def test_token_logprobs_gather_the_next_token():
    logits = torch.log(torch.tensor([[[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]]]))
    ids = torch.tensor([[0, 1, 0]])
    lp = token_logprobs(logits, ids)
    assert torch.allclose(lp, torch.tensor([[0.0, math.log(0.3), math.log(0.2)]]), atol=1e-6)
