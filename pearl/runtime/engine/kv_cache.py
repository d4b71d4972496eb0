"""Paged KV cache: block allocation with prefix caching (block hashing, ref counts, LRU).

`BlockManager` is pure bookkeeping (no tensors); `KVCache` owns the per-layer K/V storage
[num_kv_heads, num_blocks, block_size, head_dim] and copies token rows in and out (for KV
export/import between prefill and decode workers, paper §4.3.1 disaggregation).

Prefix caching: a full block's hash chains the previous block's hash, the block's tokens
and a namespace (the weight version), so KV computed under other weights never matches.
Freed blocks keep their hash and stay reusable until evicted; eviction takes unhashed free
blocks first, then the least recently freed hashed block.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from pearl.runtime.engine.sequence import Sequence


@dataclass(eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()


def block_hash(prev_hash: int | None, token_ids: tuple[int, ...], namespace: int) -> int:
    return hash((namespace, prev_hash, token_ids))


class BlockManager:
    """Allocates cache blocks to sequences; shares full blocks with equal token prefixes."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.hash_to_block: dict[int, int] = {}
        self.namespace = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def admit(self, seq: Sequence) -> None:
        """Attach cached blocks for the longest full-block prefix of seq (leaving >= 1 token
        to compute, so the step that feeds it yields logits)."""
        assert not seq.block_table and seq.num_computed_tokens == 0
        bs, prev = self.block_size, None
        for i in range((seq.num_tokens - 1) // bs):
            tokens = tuple(seq.token_ids[i * bs : (i + 1) * bs])
            h = block_hash(prev, tokens, self.namespace)
            bid = self.hash_to_block.get(h)
            if bid is None or self.blocks[bid].token_ids != tokens:
                break
            block = self.blocks[bid]
            if block.ref_count == 0:
                del self.free[bid]
            block.ref_count += 1
            seq.block_table.append(bid)
            prev = h
        seq.num_hashed_blocks = len(seq.block_table)
        seq.last_block_hash = prev
        seq.num_computed_tokens = len(seq.block_table) * bs
        seq.num_cached_prefix_tokens = seq.num_computed_tokens

    def can_grow(self, seq: Sequence, num_tokens: int) -> bool:
        return self.blocks_needed(num_tokens) - len(seq.block_table) <= len(self.free)

    def grow(self, seq: Sequence, num_tokens: int) -> bool:
        """Give seq enough blocks to hold num_tokens; False (and no change) if out of blocks."""
        need = self.blocks_needed(num_tokens)
        if need <= len(seq.block_table):  # the common decode step: room in the last block
            return True
        if need - len(seq.block_table) > len(self.free):
            return False
        while len(seq.block_table) < need:
            bid, _ = self.free.popitem(last=False)
            block = self.blocks[bid]
            if block.hash is not None and self.hash_to_block.get(block.hash) == bid:
                del self.hash_to_block[block.hash]
            block.hash, block.token_ids, block.ref_count = None, (), 1
            seq.block_table.append(bid)
        return True

    def register_full_blocks(self, seq: Sequence) -> None:
        """Hash the blocks whose KV is now fully computed so later requests can reuse them."""
        bs = self.block_size
        if seq.num_computed_tokens // bs <= seq.num_hashed_blocks:
            return
        for i in range(seq.num_hashed_blocks, seq.num_computed_tokens // bs):
            tokens = tuple(seq.token_ids[i * bs : (i + 1) * bs])
            h = block_hash(seq.last_block_hash, tokens, self.namespace)
            block = self.blocks[seq.block_table[i]]
            if h not in self.hash_to_block:
                block.hash, block.token_ids = h, tokens
                self.hash_to_block[h] = block.block_id
            seq.last_block_hash = h
            seq.num_hashed_blocks = i + 1

    def free_seq(self, seq: Sequence) -> None:
        """Drop seq's references; tail blocks are freed first so prefixes are evicted last."""
        for bid in reversed(seq.block_table):
            block = self.blocks[bid]
            block.ref_count -= 1
            assert block.ref_count >= 0, f"block {bid} freed twice"
            if block.ref_count == 0:
                self.free[bid] = None
                if block.hash is None:  # nothing to reuse: evict these first
                    self.free.move_to_end(bid, last=False)
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_hashed_blocks = 0
        seq.last_block_hash = None

    def set_namespace(self, namespace: int) -> None:
        """Switch the hash namespace (e.g. on new weights): old cached KV stops matching."""
        self.namespace = namespace

    def check_invariants(self, *, full: bool = False) -> None:
        """Cheap check every step; `full` also scans every block (tests)."""
        assert 0 <= len(self.free) <= self.num_blocks
        if full:
            in_use = sum(1 for b in self.blocks if b.ref_count > 0)
            assert in_use + len(self.free) == self.num_blocks, "a block is both used and free"
            assert all(self.blocks[b].ref_count == 0 for b in self.free)
            assert all(self.blocks[b].hash == h for h, b in self.hash_to_block.items())


class KVCache:
    """K and V storage for all layers, heads-major: [num_layers, kv_heads, num_blocks,
    block_size, head_dim]. Heads-major makes a gather of blocks along dim 2 a ready
    [kv_heads, sequences, keys, head_dim] attention operand (no transposed copy).
    Rows exchanged with the outside (`read`/`write`, KV export/import) are token-major:
    [num_layers, num_tokens, kv_heads, head_dim]."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (num_layers, num_kv_heads, num_blocks, block_size, head_dim)
        self.block_size = block_size
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # Per layer (k, v) views, each [kv_heads, num_blocks, block_size, head_dim].
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = [
            (self.k[i], self.v[i]) for i in range(num_layers)
        ]

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def slots(self, block_table: list[int], start: int, stop: int) -> torch.Tensor:
        bs = self.block_size
        idx = [block_table[i // bs] * bs + i % bs for i in range(start, stop)]
        return torch.tensor(idx, dtype=torch.long, device=self.k.device)

    def read_heads_major(
        self, block_table: list[int], num_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of the first num_tokens tokens: each [num_layers, kv_heads, n, dim]."""
        nb = -(-num_tokens // self.block_size)
        blocks = torch.tensor(block_table[:nb], dtype=torch.long, device=self.k.device)
        k = self.k.index_select(2, blocks).flatten(2, 3)[:, :, :num_tokens]
        v = self.v.index_select(2, blocks).flatten(2, 3)[:, :, :num_tokens]
        return k, v

    def read(self, block_table: list[int], num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V rows of the first num_tokens tokens: each [num_layers, n, kv_heads, dim]."""
        k, v = self.read_heads_major(block_table, num_tokens)
        return k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()

    def write(self, block_table: list[int], k: torch.Tensor, v: torch.Tensor) -> None:
        """Store rows [num_layers, n, kv_heads, dim] as tokens 0..n-1 of block_table."""
        slots = self.slots(block_table, 0, k.shape[1])
        self.k.flatten(2, 3)[:, :, slots] = k.transpose(1, 2).to(self.k)
        self.v.flatten(2, 3)[:, :, slots] = v.transpose(1, 2).to(self.v)
