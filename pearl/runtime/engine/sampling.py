"""Sampling parameters and the batched sampler (temperature, top-p, per-request seeds).

Reproducibility contract: the k-th output token of a request with `seed=s` is drawn from a
generator seeded by (s, k) alone, so it does not depend on batching, on which engine ran
the step, or on a KV export/import in between (paper §4.4: decode can move between
workers). Logprobs are those of the chosen token under the temperature-scaled distribution
before top-p truncation (the greedy case, temperature 0, uses temperature 1), which is what
an RL trainer's importance ratio compares against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_SEED_MIX = 1_000_003
_SEED_MOD = 2**63 - 1


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. temperature 0 means greedy; seed None means engine-derived."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 16
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def token_seed(seed: int, index: int) -> int:
    """Seed of the generator that draws output token `index` of a request seeded `seed`."""
    return (seed * _SEED_MIX + index + 1) % _SEED_MOD


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    seeds: list[int],
    indices: list[int],
) -> tuple[list[int], list[float]]:
    """Pick one token per row of `logits` [B, V]; return (token ids, their logprobs).

    `seeds[i]` is row i's request seed, `indices[i]` the output index of the token drawn.
    """
    logits = logits.float()
    temps = [p.temperature if p.temperature > 0 else 1.0 for p in params]
    scaled = logits
    if any(t != 1.0 for t in temps):  # dividing by 1 changes nothing: skip it
        scaled = logits / torch.tensor(temps, device=logits.device, dtype=torch.float32)[:, None]
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    tokens = torch.argmax(logits, dim=-1)
    sampled_rows = [i for i, p in enumerate(params) if not p.greedy]
    if sampled_rows:
        gen = torch.Generator(device=logits.device)
        for i in sampled_rows:
            probs = logprobs_all[i].exp()
            if params[i].top_p < 1.0:
                probs = _top_p_filter(probs, params[i].top_p)
            gen.manual_seed(token_seed(seeds[i], indices[i]))
            tokens[i] = torch.multinomial(probs, 1, generator=gen)[0]
    chosen = logprobs_all.gather(1, tokens[:, None])[:, 0]
    return tokens.tolist(), chosen.tolist()


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (always >= 1)."""
    sorted_probs, order = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=0) - sorted_probs
    sorted_probs = torch.where(mass_before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    kept = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    return kept / kept.sum()
