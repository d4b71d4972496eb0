"""Synchronous GRPO on one process: the engine, the trainer and an environment, no Ray.

The same pieces as `pearl run` (inference engine with per-token logprobs, GRPO trainer,
multi-turn environment, trajectory record) in the simplest loop: roll out a batch, train,
load the new weights, repeat. It is how the tests and `bench.learning` check that the
learnable task really learns, in seconds, apart from any elasticity.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from pearl.envs.registry import make_env
from pearl.runtime.engine import (
    ByteTokenizer,
    LLMEngine,
    ModelConfig,
    Qwen3ForCausalLM,
    SamplingParams,
)
from pearl.runtime.trainer.actor import causal_lm_logits
from pearl.runtime.trainer.grpo_trainer import GrpoConfig, GRPOTrainer
from pearl.runtime.trajectory import RuntimeTrajectory


@dataclass(frozen=True)
class LocalRunConfig:
    seed: int = 0
    num_steps: int = 20
    num_prompts: int = 4
    group_size: int = 4
    max_new_tokens: int = 3
    max_context_tokens: int = 128
    lr: float = 1e-2
    env: str = "guess"


def run_local(
    cfg: LocalRunConfig, on_step: Callable[[int, dict[str, float]], None] | None = None
) -> list[float]:
    """Train for `cfg.num_steps`; returns the mean reward of each step's batch."""
    torch.manual_seed(cfg.seed)
    tok = ByteTokenizer()
    model_cfg = ModelConfig.tiny()
    model = Qwen3ForCausalLM(model_cfg)
    model.init_weights(cfg.seed)
    trainer = GRPOTrainer(
        model, GrpoConfig(lr=cfg.lr), logits_fn=causal_lm_logits, pad_id=tok.pad_token_id
    )
    engine = LLMEngine(model_cfg, seed=cfg.seed)
    engine.load_weights(trainer.snapshot()[1], 0)
    rng = random.Random(cfg.seed)
    rewards: list[float] = []
    for step in range(cfg.num_steps):
        tasks = [rng.randrange(1000) for _ in range(cfg.num_prompts)]
        batch = _rollout_batch(engine, tok, cfg, step, tasks)
        metrics = trainer.train_step([t.to_sample() for t in batch])
        engine.load_weights(trainer.snapshot()[1], trainer.version)
        rewards.append(metrics["reward_mean"])
        if on_step is not None:
            on_step(step, metrics)
    return rewards


def _rollout_batch(
    engine: LLMEngine, tok: ByteTokenizer, cfg: LocalRunConfig, step: int, tasks: list[int]
) -> list[RuntimeTrajectory]:
    """All trajectories of a batch advance together: one batched generate per turn."""
    trajs, envs = [], []
    for p, task in enumerate(tasks):
        for g in range(cfg.group_size):
            traj = RuntimeTrajectory(f"s{step}-g{p}-{g}", step, p, task)
            env = make_env(cfg.env)
            traj.add_context([tok.bos_token_id, *tok.encode(env.reset(task, 0).text)])
            trajs.append(traj)
            envs.append(env)
    active = list(range(len(trajs)))
    while active:
        budgets = {
            i: min(cfg.max_new_tokens, cfg.max_context_tokens - len(trajs[i].token_ids))
            for i in active
        }
        active = [i for i in active if budgets[i] >= 1]
        if not active:
            break
        outs = engine.generate(
            [trajs[i].prompt() for i in active],
            SamplingParams(
                temperature=1.0,
                max_new_tokens=cfg.max_new_tokens,
                stop_token_ids=(tok.eos_token_id,),
            ),
        )
        still = []
        for i, out in zip(active, outs, strict=True):
            ids = trajs[i].finish_turn(
                out.output_token_ids[: budgets[i]],
                out.output_logprobs[: budgets[i]],
                engine.weight_version,
            )
            res = envs[i].step(tok.decode([t for t in ids if t < 256]))
            trajs[i].reward += res.reward
            trajs[i].add_context(list(tok.encode(res.observation.text)))
            if not res.done:
                still.append(i)
        active = still
    for env in envs:
        env.close()
    return trajs
