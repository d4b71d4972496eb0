"""Is the `guess` environment learnable? A minimal GRPO loop on the tiny byte-level Qwen3.

This is a self-contained check of the environment's signal (not PEARL's trainer): a randomly
initialised `Qwen3ForCausalLM` (ModelConfig.tiny(), byte tokenizer) plays the guessing game
for `--iters` steps of G tasks x S samples; rewards are normalised within each task's group
(GRPO advantages) and one on-policy policy-gradient step is taken per batch. It prints the
reference returns of the scripted oracle and random policies, then the mean return of the
first and last fifth of training, for each seed.

    .venv/bin/python -m bench.envs_learnable [--iters 60] [--seeds 0 1 2] [--write]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from pearl.envs import play
from pearl.envs.learnable import GuessEnv, oracle_policy, random_byte_policy
from pearl.runtime.engine import ByteTokenizer, ModelConfig, Qwen3ForCausalLM

TOK = ByteTokenizer()


def _sample_turn(
    model: Qwen3ForCausalLM, contexts: list[list[int]], num_tokens: int, gen: torch.Generator
) -> list[list[int]]:
    """Sample `num_tokens` tokens for every context (right-padded full forward passes)."""
    out: list[list[int]] = [[] for _ in contexts]
    seqs = [list(c) for c in contexts]
    for _ in range(num_tokens):
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), TOK.pad_token_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
        pos = torch.arange(width).expand(len(seqs), width)
        with torch.no_grad():
            logits = model(ids, pos)
        last = torch.tensor([len(s) - 1 for s in seqs])
        probs = torch.softmax(logits[torch.arange(len(seqs)), last].float(), dim=-1)
        probs[:, TOK.vocab_size - 4 :] = 0.0  # bytes only: specials are not actions here
        nxt = torch.multinomial(probs, 1, generator=gen).squeeze(1).tolist()
        for i, t in enumerate(nxt):
            seqs[i].append(t)
            out[i].append(t)
    return out


def _rollout(model, env_cfg, task_ids, num_tokens, gen):
    """Play one episode per task id in lockstep; return token sequences, masks, returns."""
    envs = [GuessEnv(env_cfg) for _ in task_ids]
    seqs = [
        [TOK.bos_token_id, *TOK.encode(e.reset(t).text)]
        for e, t in zip(envs, task_ids, strict=True)
    ]
    masks = [[0] * len(s) for s in seqs]
    returns = [0.0] * len(envs)
    live = list(range(len(envs)))
    for _ in range(env_cfg.max_turns):
        if not live:
            break
        actions = _sample_turn(model, [seqs[i] for i in live], num_tokens, gen)
        still = []
        for i, act in zip(live, actions, strict=True):
            res = envs[i].step(bytes(act).decode("latin-1"))
            returns[i] += res.reward
            obs = TOK.encode(res.observation.text)
            seqs[i] += act + obs
            masks[i] += [1] * len(act) + [0] * len(obs)
            if not res.done:
                still.append(i)
        live = still
    return seqs, masks, returns


def _grpo_step(model, opt, seqs, masks, returns, group_size):
    r = torch.tensor(returns).view(-1, group_size)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), TOK.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width))
    for i, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    pos = torch.arange(width).expand(len(seqs), width)
    logits = model(ids[:, :-1], pos[:, :-1]).float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    m = mask[:, 1:]
    loss = -((logp * m).sum(1) * adv).sum() / m.sum().clamp(min=1)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def train(seed: int, iters: int, num_tasks: int, group_size: int, num_tokens: int, lr: float):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = Qwen3ForCausalLM(ModelConfig.tiny())
    model.init_weights(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    env_cfg = GuessEnv().config
    curve = []
    for it in range(iters):
        tasks = [(seed * 7919 + it * num_tasks + g) % env_cfg.num_tasks for g in range(num_tasks)]
        task_ids = [t for t in tasks for _ in range(group_size)]
        seqs, masks, returns = _rollout(model, env_cfg, task_ids, num_tokens, gen)
        curve.append(statistics.mean(returns))
        _grpo_step(model, opt, seqs, masks, returns, group_size)
    return curve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--tasks", type=int, default=8, help="tasks (groups) per step")
    ap.add_argument("--group", type=int, default=8, help="samples per task")
    ap.add_argument("--tokens", type=int, default=3, help="sampled bytes per turn")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args()
    torch.set_num_threads(1)

    env = GuessEnv()
    oracle = statistics.mean(play(env, oracle_policy(), t)[0] for t in range(500))
    noise_policy = random_byte_policy(0, args.tokens)  # one RNG across all episodes
    noise = statistics.mean(play(env, noise_policy, t)[0] for t in range(500))
    print(f"reference returns: oracle {oracle:.3f}, random {args.tokens}-byte policy {noise:.3f}")
    rows = []
    for seed in args.seeds:
        start = time.monotonic()
        curve = train(seed, args.iters, args.tasks, args.group, args.tokens, args.lr)
        fifth = max(1, len(curve) // 5)
        first, last = statistics.mean(curve[:fifth]), statistics.mean(curve[-fifth:])
        wall = time.monotonic() - start
        rows.append((seed, first, last, wall))
        print(f"seed {seed}: first fifth {first:.3f} -> last fifth {last:.3f} ({wall:.0f} s)")
    if args.write:
        from bench._md import machine_line, write_section

        lines = [
            "## Environments: is `guess` learnable? (`python -m bench.envs_learnable`)",
            "",
            f"Minimal GRPO (one on-policy step per batch of {args.tasks} tasks x {args.group} "
            f"samples, {args.tokens} sampled bytes per turn, Adam lr {args.lr}) on the tiny "
            f"byte-level Qwen3 from random init, {args.iters} steps. Mean episode return; "
            f"reference: oracle {oracle:.3f}, random bytes {noise:.3f}. {machine_line()}; "
            f"1-min load average at the end {os.getloadavg()[0]:.1f} (wall times are noisy).",
            "",
            "| seed | first fifth | last fifth | wall s |",
            "|---|---|---|---|",
            *[f"| {s} | {a:.3f} | {b:.3f} | {w:.0f} |" for s, a, b, w in rows],
        ]
        write_section("envs_learnable", "\n".join(lines))


if __name__ == "__main__":
    main()
