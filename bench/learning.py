"""Learning on the `guess` task: mean reward of the first and last fifth of a GRPO run, 3 seeds.

In-process loop (`pearl.runtime.local_loop`): the same engine, trainer and environment as
`pearl run`, without Ray or elasticity. Rerun: `.venv/bin/python -m bench.learning`.
"""

from __future__ import annotations

import sys
import time

from bench._md import machine_line, write_section
from pearl.runtime.local_loop import LocalRunConfig, run_local


def main() -> None:
    import torch

    torch.set_num_threads(1)
    rows = []
    for seed in (0, 1, 2):
        t0 = time.perf_counter()
        cfg = LocalRunConfig(seed=seed, num_steps=25)
        rewards = run_local(cfg)
        k = len(rewards) // 5
        first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
        wall = time.perf_counter() - t0
        rows.append(
            f"| {seed} | {cfg.num_steps} | {cfg.num_prompts * cfg.group_size} | {first:.3f} | {last:.3f} | {wall:.0f} |"
        )
        print(f"seed {seed}: first fifth {first:.3f}, last fifth {last:.3f} ({wall:.0f} s)")
    body = "\n".join(
        [
            "## Learning: GRPO on the `guess` task",
            "",
            "Tiny Qwen3-architecture model (2 layers, hidden 64, byte vocabulary), random init; "
            f"batches of 4 prompts x 4 samples, lr 1e-2. Machine: {machine_line()}. "
            "Rerun: `.venv/bin/python -m bench.learning`.",
            "",
            "| seed | steps | trajectories/step | mean reward, first fifth | mean reward, last fifth | wall (s) |",
            "|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    if "--no-write" not in sys.argv:
        write_section("learning", body)


if __name__ == "__main__":
    main()
