"""Attention over a paged KV cache: write this step's K/V into blocks, then attend.

The step's tokens come in two groups so that decodes never pay for a prefill chunk's
length: first one token per decoding sequence, then the prefill chunks in a padded
[Bp, Lq] query grid. Both groups run one scaled_dot_product_attention call per layer.

Grouped-query attention without repeating K/V: the G = heads / kv_heads query heads that
share a KV head become G query rows of that KV head, so every call has the shape
[kv_heads, sequences, rows, head_dim] with contiguous keys [kv_heads, sequences, keys,
head_dim] (the heads-major cache layout makes the gather produce exactly that). Decode keys
come from `decode_kv.DecodeRows` (contiguous per-sequence rows, no gather) when the runner
provides a plan, else from a gather of the sequences' blocks. Masks are additive (0/-inf),
built once per forward and shared by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pearl.runtime.engine.decode_kv import DecodePlan


@dataclass
class AttentionContext:
    """Per-forward metadata for T packed tokens: `num_decode_tokens` decodes, then chunks.

    Decode group (tokens [0, num_decode_tokens), one per sequence):
      decode_positions [Bd]; keys from `decode_plan` if given, else decode_block_tables
      [Bd, max_blocks].
    Chunk group (the remaining tokens, of num_seqs sequences):
      q_slot[t]     index of chunk token t in the flattened [num_seqs * max_q_len] grid
      q_positions   [num_seqs, max_q_len] position of each grid cell (padding repeats one)
      block_tables  [num_seqs, max_blocks] cache blocks of each sequence (padded with 0)
    slot_mapping [T]: cache slot (block * block_size + offset) receiving token t's K/V.
    kv_caches: per layer (k, v), each [kv_heads, num_blocks, block_size, head_dim].
    num_queries_per_kv: G = attention heads / kv heads (needed for the chunk mask).
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
    decode_plan: DecodePlan | None = None
    num_queries_per_kv: int = 1
    decode_mask: torch.Tensor | None = None
    chunk_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        """Build the masks once per forward (every layer shares them)."""
        dev = self.q_positions.device
        if self.kv_caches is None:  # trainer path: boolean causal mask per row
            if self.num_seqs:
                key_pos = self.q_positions
                self.chunk_mask = (key_pos[:, None, :] <= self.q_positions[:, :, None])[:, None]
            return
        dtype = self.kv_caches[0][0].dtype
        if self.num_decode_tokens and self.decode_plan is None:
            assert self.decode_block_tables is not None and self.decode_positions is not None
            num_keys = self.decode_block_tables.shape[1] * self._block_size()
            allowed = torch.arange(num_keys, device=dev)[None, :] <= self.decode_positions[:, None]
            self.decode_mask = _additive(allowed, dtype)[None, :, None, :]
        if self.num_seqs:
            assert self.block_tables is not None
            b, lq, g = self.num_seqs, self.max_q_len, self.num_queries_per_kv
            num_keys = self.block_tables.shape[1] * self._block_size()
            allowed = torch.arange(num_keys, device=dev) <= self.q_positions[:, :, None]
            mask = _additive(allowed, dtype)[:, :, None, :].expand(b, lq, g, num_keys)
            self.chunk_mask = mask.reshape(1, b, lq * g, num_keys)

    def _block_size(self) -> int:
        assert self.kv_caches is not None
        return self.kv_caches[0][0].shape[2]

    @classmethod
    def full_sequences(cls, positions: torch.Tensor) -> AttentionContext:
        """Context for a [B, L] batch of whole sequences, causal over each row, no cache."""
        num_seqs, seq_len = positions.shape
        q_slot = torch.arange(num_seqs * seq_len, device=positions.device)
        return cls(q_slot=q_slot, num_seqs=num_seqs, max_q_len=seq_len, q_positions=positions)


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, float("-inf"))


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    ctx: AttentionContext,
    layer_idx: int,
) -> torch.Tensor:
    """q [T, H, D], k/v [T, Hkv, D] -> attention output [T, H * D] (scale 1/sqrt(D))."""
    if ctx.kv_caches is None:
        return _full_sequence_attention(q, k, v, ctx)
    assert ctx.slot_mapping is not None
    num_kv_heads, head_dim = k.shape[1], k.shape[2]
    k_cache, v_cache = ctx.kv_caches[layer_idx]
    k_t, v_t = k.transpose(0, 1), v.transpose(0, 1)  # [Hkv, T, D]
    k_cache.view(num_kv_heads, -1, head_dim).index_copy_(1, ctx.slot_mapping, k_t)
    v_cache.view(num_kv_heads, -1, head_dim).index_copy_(1, ctx.slot_mapping, v_t)
    outs = []
    nd = ctx.num_decode_tokens
    if nd:
        outs.append(_decode_attention(q[:nd], k_t[:, :nd], v_t[:, :nd], ctx, layer_idx))
    if ctx.num_seqs:
        outs.append(_chunk_attention(q[nd:], k_cache, v_cache, ctx))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _decode_attention(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    ctx: AttentionContext,
    layer_idx: int,
) -> torch.Tensor:
    """One query token per sequence: q [Bd, H, D]; k_new/v_new [Hkv, Bd, D] (this step's)."""
    nd, num_heads, head_dim = q.shape
    num_kv_heads = k_new.shape[0]
    g = num_heads // num_kv_heads
    plan = ctx.decode_plan
    q_rows = q.view(nd, num_kv_heads, g, head_dim)
    if plan is None:  # gather the blocks: keys [Hkv, Bd, max_blocks * block_size, D]
        assert ctx.decode_block_tables is not None and ctx.kv_caches is not None
        k_cache, v_cache = ctx.kv_caches[layer_idx]
        table = ctx.decode_block_tables.reshape(-1)
        keys = k_cache.index_select(1, table).view(num_kv_heads, nd, -1, head_dim)
        values = v_cache.index_select(1, table).view(num_kv_heads, nd, -1, head_dim)
        out = F.scaled_dot_product_attention(
            q_rows.transpose(0, 1).contiguous(), keys, values, attn_mask=ctx.decode_mask
        )  # [Hkv, Bd, G, D]
        return out.transpose(0, 1).reshape(nd, num_heads * head_dim)
    # contiguous rows: write this step's token, read views
    k_rows, v_rows = plan.k[layer_idx], plan.v[layer_idx]  # [Hkv, slots, row_len, D]
    k_rows.view(num_kv_heads, -1, head_dim).index_copy_(1, plan.write_index, k_new)
    v_rows.view(num_kv_heads, -1, head_dim).index_copy_(1, plan.write_index, v_new)
    identity, num_rows = plan.identity, plan.num_rows
    if not identity:
        q_rows = q_rows.new_zeros(num_rows, num_kv_heads, g, head_dim).index_copy_(
            0, plan.rows, q_rows
        )
    q_heads = q_rows.transpose(0, 1).contiguous()  # [Hkv, rows, G, D]
    outs = [  # each row range over its own keys (see row_groups)
        F.scaled_dot_product_attention(
            q_heads[:, lo:hi],
            k_rows[:, lo:hi, :keys],
            v_rows[:, lo:hi, :keys],
            attn_mask=plan.mask[:, lo:hi, :, :keys],
        )
        for lo, hi, keys in plan.groups
    ]
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    out = out.transpose(0, 1).reshape(num_rows, num_heads * head_dim)
    if not identity:
        out = out.index_select(0, plan.rows)
    return out


def _chunk_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, ctx: AttentionContext
) -> torch.Tensor:
    """Chunk group: q [Tc, H, D] against each sequence's gathered blocks."""
    assert ctx.block_tables is not None
    b, lq = ctx.num_seqs, ctx.max_q_len
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_cache.shape[0]
    g = num_heads // num_kv_heads
    table = ctx.block_tables.reshape(-1)
    keys = k_cache.index_select(1, table).view(num_kv_heads, b, -1, head_dim)
    values = v_cache.index_select(1, table).view(num_kv_heads, b, -1, head_dim)
    q_grid = _to_grid(q, ctx).view(b, lq, num_kv_heads, g, head_dim)
    q_grid = q_grid.permute(2, 0, 1, 3, 4).reshape(num_kv_heads, b, lq * g, head_dim)
    out = F.scaled_dot_product_attention(q_grid, keys, values, attn_mask=ctx.chunk_mask)
    out = out.view(num_kv_heads, b, lq, g, head_dim).permute(1, 2, 0, 3, 4)
    return out.reshape(b * lq, num_heads * head_dim)[ctx.q_slot]


def _full_sequence_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: AttentionContext
) -> torch.Tensor:
    """Trainer path: q/k/v of [B, L] whole rows, causal within each row."""
    b, lq = ctx.num_seqs, ctx.max_q_len
    num_heads, head_dim = q.shape[1], q.shape[2]
    out = F.scaled_dot_product_attention(
        _to_grid(q, ctx).transpose(1, 2),
        _to_grid(k, ctx).transpose(1, 2),
        _to_grid(v, ctx).transpose(1, 2),
        attn_mask=ctx.chunk_mask,
        enable_gqa=k.shape[1] != num_heads,
    )
    out = out.transpose(1, 2).reshape(b * lq, num_heads * head_dim)
    return out[ctx.q_slot]


def _to_grid(x: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
    if x.shape[0] == ctx.num_seqs * ctx.max_q_len:  # no padding: the grid is a view
        return x.view(ctx.num_seqs, ctx.max_q_len, *x.shape[1:])
    grid = x.new_zeros(ctx.num_seqs * ctx.max_q_len, *x.shape[1:])
    grid[ctx.q_slot] = x
    return grid.view(ctx.num_seqs, ctx.max_q_len, *x.shape[1:])
