"""Attention over a paged KV cache: write this step's K/V into blocks, gather, attend.

Correctness first (paper §4.4 needs real KV to move between workers, not a fast kernel):
each sequence's blocks are gathered into a padded [B, Lk] key grid. The step's tokens come
in two groups so that decodes never pay for a prefill chunk's length: first one token per
decoding sequence (a [Bd, 1] query, one SDPA call per layer for the whole decode batch),
then the prefill chunks in a padded [Bp, Lq] query grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class AttentionContext:
    """Per-forward metadata for T packed tokens: `num_decode_tokens` decodes, then chunks.

    Decode group (tokens [0, num_decode_tokens), one per sequence):
      decode_positions [Bd], decode_block_tables [Bd, max_blocks].
    Chunk group (the remaining tokens, of num_seqs sequences):
      q_slot[t]     index of chunk token t in the flattened [num_seqs * max_q_len] grid
      q_positions   [num_seqs, max_q_len] position of each grid cell (padding repeats one)
      block_tables  [num_seqs, max_blocks] cache blocks of each sequence (padded with 0)
    slot_mapping [T]: cache slot (block * block_size + offset) receiving token t's K/V.
    kv_caches: per layer (k, v), each [num_blocks, block_size, num_kv_heads, head_dim].
    Without kv_caches (a trainer's full-sequence pass) keys are the step's own tokens.
    """

    q_slot: torch.Tensor
    num_seqs: int
    max_q_len: int
    q_positions: torch.Tensor
    slot_mapping: torch.Tensor | None = None
    block_tables: torch.Tensor | None = None
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    num_decode_tokens: int = 0
    decode_positions: torch.Tensor | None = None
    decode_block_tables: torch.Tensor | None = None
    decode_mask: torch.Tensor | None = None
    chunk_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        """Build the boolean masks once per forward (every layer shares them)."""
        dev = self.q_positions.device
        if self.num_decode_tokens:
            assert self.decode_block_tables is not None and self.decode_positions is not None
            num_keys = self.decode_block_tables.shape[1] * self._block_size()
            key_pos = torch.arange(num_keys, device=dev)
            self.decode_mask = (key_pos[None, :] <= self.decode_positions[:, None])[:, None, None]
        if self.num_seqs:
            if self.kv_caches is None:
                key_pos = self.q_positions
            else:
                assert self.block_tables is not None
                num_keys = self.block_tables.shape[1] * self._block_size()
                key_pos = torch.arange(num_keys, device=dev).expand(self.num_seqs, -1)
            self.chunk_mask = (key_pos[:, None, :] <= self.q_positions[:, :, None])[:, None]

    def _block_size(self) -> int:
        assert self.kv_caches is not None
        return self.kv_caches[0][0].shape[1]

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
    num_heads, head_dim = q.shape[1], q.shape[2]
    gqa = k.shape[1] != num_heads
    if ctx.kv_caches is None:
        return _chunk_attention(q, _to_grid(k, ctx), _to_grid(v, ctx), ctx, gqa)
    assert ctx.slot_mapping is not None
    k_cache, v_cache = ctx.kv_caches[layer_idx]
    k_cache.view(-1, *k.shape[1:]).index_copy_(0, ctx.slot_mapping, k)
    v_cache.view(-1, *v.shape[1:]).index_copy_(0, ctx.slot_mapping, v)
    outs = []
    nd = ctx.num_decode_tokens
    if nd:
        assert ctx.decode_block_tables is not None and ctx.decode_positions is not None
        k_keys = _gather(k_cache, ctx.decode_block_tables).transpose(1, 2)
        v_keys = _gather(v_cache, ctx.decode_block_tables).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q[:nd, :, None, :], k_keys, v_keys, attn_mask=ctx.decode_mask, enable_gqa=gqa
        )
        outs.append(out.reshape(nd, num_heads * head_dim))
    if ctx.num_seqs:
        assert ctx.block_tables is not None
        k_keys = _gather(k_cache, ctx.block_tables)
        v_keys = _gather(v_cache, ctx.block_tables)
        outs.append(_chunk_attention(q[nd:], k_keys, v_keys, ctx, gqa))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _chunk_attention(
    q: torch.Tensor,
    k_keys: torch.Tensor,
    v_keys: torch.Tensor,
    ctx: AttentionContext,
    gqa: bool,
) -> torch.Tensor:
    """Chunk group: q [Tc, H, D]; keys [B, Lk, Hkv, D] masked by ctx.chunk_mask."""
    b, lq = ctx.num_seqs, ctx.max_q_len
    num_heads, head_dim = q.shape[1], q.shape[2]
    q_grid = _to_grid(q, ctx).transpose(1, 2)
    out = F.scaled_dot_product_attention(
        q_grid,
        k_keys.transpose(1, 2),
        v_keys.transpose(1, 2),
        attn_mask=ctx.chunk_mask,
        enable_gqa=gqa,
    )
    out = out.transpose(1, 2).reshape(b * lq, num_heads * head_dim)
    return out[ctx.q_slot]


def _gather(cache: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """Keys of each sequence in order: [B, max_blocks * block_size, kv_heads, head_dim].

    index_select over whole blocks (contiguous rows) is several times faster on CPU than
    advanced indexing with a 2-D index.
    """
    b, nb = block_tables.shape
    rows = cache.index_select(0, block_tables.reshape(-1))
    return rows.view(b, nb * cache.shape[1], *cache.shape[2:])


def _to_grid(x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
    if x.shape[0] == ctx.num_seqs * ctx.max_q_len:  # no padding: the grid is a view
        return x.view(ctx.num_seqs, ctx.max_q_len, *x.shape[1:])
    grid = x.new_zeros(ctx.num_seqs * ctx.max_q_len, *x.shape[1:])
    grid[ctx.q_slot] = x
    return grid.view(ctx.num_seqs, ctx.max_q_len, *x.shape[1:])
