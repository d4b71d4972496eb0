"""KVPayload: one sequence's KV cache and token state, shipped from a prefill engine to a
decode engine (paper §4.3.1: disaggregated prefill/decode moves KV between workers)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

TOKENS = "tokens"


@dataclass(frozen=True, eq=False)
class KVPayload:
    """Picklable; tensors live on CPU.

    token_ids: prompt + outputs so far; k/v: [num_layers, num_kv_tokens, kv_heads, head_dim]
    for the first num_kv_tokens tokens (the last sampled token has no KV yet).
    seed: the request's sampling seed, so sampling continues the same random stream.
    model_signature: (num_layers, num_kv_heads, head_dim, vocab_size); an engine refuses
    a payload whose signature differs from its own.
    layout: how k/v hold the KV. TOKENS (PEARL's engine): as above. A vLLM engine's tag
    (`pearl.runtime.backends.vllm_kv.layout_of`): k holds that engine's raw paged blocks
    stacked by layer, v is empty; only an engine with the same tag takes it.
    """

    request_id: str
    token_ids: tuple[int, ...]
    num_prompt_tokens: int
    num_kv_tokens: int
    output_logprobs: tuple[float, ...]
    k: torch.Tensor
    v: torch.Tensor
    seed: int
    weight_version: int
    model_signature: tuple[int, int, int, int]
    num_cached_prefix_tokens: int = 0
    layout: str = TOKENS

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    @property
    def output_token_ids(self) -> tuple[int, ...]:
        return self.token_ids[self.num_prompt_tokens :]
