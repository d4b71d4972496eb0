"""The learnable task really learns under GRPO with our engine and trainer."""

import pytest
import torch

from pearl.runtime.local_loop import LocalRunConfig, run_local


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reward_rises_under_grpo(seed):
    """Mean reward over the last fifth of the run clearly exceeds the first fifth."""
    torch.set_num_threads(1)
    rewards = run_local(LocalRunConfig(seed=seed, num_steps=20))
    k = len(rewards) // 5
    first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
    assert last > first + 0.15, rewards
