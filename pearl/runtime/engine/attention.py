"""Attention over a paged KV cache: write this step's K/V into blocks, gather, attend.

Correctness first (paper §4.4 needs real KV to move between workers, not a fast kernel):
each sequence's blocks are gathered into a padded [B, Lk] key grid and the step's query
tokens into a padded [B, Lq] grid; one masked SDPA call serves a whole batch of mixed
prefill chunks and decode tokens. Decode-only steps have Lq = 1, so a batch of decodes is
one attention call per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class AttentionContext:
    """Per-forward metadata for packed tokens (T tokens of B sequences).

    q_slot[t]      index of token t in the flattened [B * max_q_len] query grid
    q_positions    [B, max_q_len] position of each grid cell (padding repeats a valid one)
    slot_mapping   [T] cache slot (block * block_size + offset) that receives token t's K/V
    block_tables   [B, max_blocks] cache blocks of each sequence, in order (padded with 0)
    kv_caches      per layer (k, v), each [num_blocks, block_size, num_kv_heads, head_dim]
    Without kv_caches (a trainer's full-sequence pass) keys are the step's own tokens.
    """

    q_slot: torch.Tensor
    num_seqs: int
    max_q_len: int
    q_positions: torch.Tensor
    slot_mapping: torch.Tensor | None = None
    block_tables: torch.Tensor | None = None
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    @classmethod
    def full_sequences(cls, positions: torch.Tensor) -> AttentionContext:
        """Context for a [B, L] batch of whole sequences, causal over each row, no cache."""
        num_seqs, seq_len = positions.shape
        q_slot = torch.arange(num_seqs * seq_len, device=positions.device)
        return cls(q_slot=q_slot, num_seqs=num_seqs, max_q_len=seq_len, q_positions=positions)


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ctx: AttentionContext,
    layer_idx: int,
) -> torch.Tensor:
    """q [T, H, D], k/v [T, Hkv, D] -> attention output [T, H * D] (scale 1/sqrt(D))."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    b, lq = ctx.num_seqs, ctx.max_q_len
    q_grid = q.new_zeros(b * lq, num_heads, head_dim)
    q_grid[ctx.q_slot] = q
    q_grid = q_grid.view(b, lq, num_heads, head_dim).transpose(1, 2)
    if ctx.kv_caches is not None:
        assert ctx.slot_mapping is not None and ctx.block_tables is not None
        k_cache, v_cache = ctx.kv_caches[layer_idx]
        k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, ctx.slot_mapping, k)
        v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, ctx.slot_mapping, v)
        k_keys = k_cache[ctx.block_tables].flatten(1, 2).transpose(1, 2)
        v_keys = v_cache[ctx.block_tables].flatten(1, 2).transpose(1, 2)
        key_pos = torch.arange(k_keys.shape[2], device=q.device)[None, None, :]
    else:
        k_keys = _to_grid(k, ctx).transpose(1, 2)
        v_keys = _to_grid(v, ctx).transpose(1, 2)
        key_pos = ctx.q_positions[:, None, :]
    mask = key_pos <= ctx.q_positions[:, :, None]
    out = F.scaled_dot_product_attention(
        q_grid, k_keys, v_keys, attn_mask=mask[:, None], enable_gqa=num_kv_heads != num_heads
    )
    out = out.transpose(1, 2).reshape(b * lq, num_heads * head_dim)
    return out[ctx.q_slot]


def _to_grid(x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
    grid = x.new_zeros(ctx.num_seqs * ctx.max_q_len, *x.shape[1:])
    grid[ctx.q_slot] = x
    return grid.view(ctx.num_seqs, ctx.max_q_len, *x.shape[1:])
