"""Decode rows: each decoding sequence's K/V kept contiguous, so a decode step reads no pages.

The paged cache (`kv_cache.KVCache`) is the source of truth: prefix caching, KV export and
import, and chunked prefill all work on blocks. But gathering every decoding sequence's
blocks into a padded key grid costs a copy of the whole batch's KV per layer per step (the
same bytes HF's growing cache concatenates per step), a large share of a small model's
decode step on a CPU. `DecodeRows` keeps, next to the pages, one row per decoding
sequence: K/V of tokens [0, n) at positions [0, n) of the row, laid out
[num_layers, kv_heads, num_rows, row_tokens, head_dim] so that a layer's rows are directly
the [kv_heads, rows, keys, dim] operand of one batched attention call. A decode step writes
its new token into both the pages and the row; a sequence's row is (re)filled from its pages
only when it (re)enters the decode group (after prefill, an import, a preemption).

Rows of very different lengths (usual under continuous batching) are not padded to the
longest: the step attends in a few contiguous row ranges, each over its longest row's keys
(`row_groups`). Ranges only pay off when rows of similar length are neighbours, so when
the ranges would still read much more than the rows hold, the rows are re-laid out in
order of length (one copy of the rows' KV, a few times per hundred steps; every row grows
by one token per step, so only arrivals disturb the order).

Rows are freed as soon as a sequence is not in a step's decode group. The rows take at most
`max_tokens` token slots (rows x row length); past that the engine falls back to gathering
pages for the step (`plan` returns None), which is also what a device with a real paged
attention kernel would prefer. The storage grows with demand and is kept (never shrunk)
until the engine releases its device state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pearl.runtime.engine.kv_cache import KVCache
from pearl.runtime.engine.row_groups import RowGroup, group_cost, split_rows
from pearl.runtime.engine.sequence import Sequence

_ROW_GRANULE_TOKENS = 64  # row length grows in these steps (amortises the re-layout copy)
_SLOT_GRANULE = 8
_MAX_GROUPS = 4  # attention calls per layer for the decode group, at most
# KV bytes a further attention call must save to be worth its fixed cost (a CPU call costs
# tens of microseconds, a GPU launch a few; a GPU reads memory ~100x faster).
_MIN_SPLIT_BYTES = {"cpu": 128 << 10, "cuda": 8 << 20}
_RELAYOUT_RATIO = 1.5  # re-lay out rows by length when the ranges read more than this x


@dataclass(frozen=True)
class DecodePlan:
    """Where this step's decode tokens live in the rows (one per decode token, packed order).

    rows [Bd]: row of each decode token; write_index [Bd]: its flat index row * row_tokens +
    position; mask [1, num_rows, 1, num_keys]: additive (0 / -inf) key mask of every row in
    [0, num_rows) (rows not decoding this step see key 0 only, and their output is unused);
    identity: rows == [0, Bd) and num_rows == Bd (no scatter/gather of queries needed);
    groups: contiguous (first row, end row, keys) ranges covering [0, num_rows), each
    attended over its own first `keys` keys.
    """

    k: torch.Tensor
    v: torch.Tensor
    rows: torch.Tensor
    write_index: torch.Tensor
    mask: torch.Tensor
    num_rows: int
    num_keys: int
    identity: bool
    groups: tuple[RowGroup, ...]


class DecodeRows:
    """Row storage and row assignment for the decode group (see the module docstring)."""

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
        max_tokens: int,
    ) -> None:
        self.shape_prefix = (num_layers, num_kv_heads)
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = device
        self.max_tokens = max_tokens
        self.k = torch.zeros(0, device=device, dtype=dtype)
        self.v = torch.zeros(0, device=device, dtype=dtype)
        self.num_slots = 0
        self.row_tokens = 0
        self._row_of: dict[int, int] = {}  # id(seq) -> row
        self._seq_in_row: list[Sequence | None] = []  # keeps ids stable while assigned
        self._filled: list[int] = []  # tokens valid in each row
        row_key_bytes = 2 * num_kv_heads * head_dim * torch.finfo(dtype).bits // 8
        self.min_split = _MIN_SPLIT_BYTES.get(device.type, _MIN_SPLIT_BYTES["cuda"])
        self.min_split //= row_key_bytes  # in row-keys
        self.relayouts = 0  # how many times the rows were re-laid out by length
        # row-keys the decode attention read, the rows held, and one padded call would read
        self.keys_read = self.keys_needed = self.keys_padded = 0

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def clear(self) -> None:
        """Forget every assignment (rows become stale; the storage is kept)."""
        self._row_of.clear()
        self._seq_in_row = [None] * self.num_slots
        self._filled = [0] * self.num_slots

    def plan(self, seqs: list[Sequence], kv: KVCache) -> DecodePlan | None:
        """Assign rows to this step's decode sequences (packed order), fill rows that are
        new or stale from the pages, and return where the step reads and writes. Returns
        None when there is no decode, or (forgetting all rows) when the rows would exceed
        `max_tokens`."""
        # 1. Free the rows of sequences that left the decode group.
        keep = {id(s) for s in seqs}
        for key in [k for k in self._row_of if k not in keep]:
            gone = self._row_of.pop(key)
            self._seq_in_row[gone], self._filled[gone] = None, 0
        if not seqs:
            return None
        # 2. Assign free rows (lowest first, so the used rows stay dense).
        free = (r for r, s in enumerate(self._seq_in_row) if s is None)
        rows: list[int] = []
        for seq in seqs:
            row = self._row_of.get(id(seq))
            if row is None:
                row = next(free, len(self._seq_in_row))
                if row == len(self._seq_in_row):
                    self._seq_in_row.append(None)
                    self._filled.append(0)
                self._row_of[id(seq)] = row
                self._seq_in_row[row] = seq
            rows.append(row)
        positions = [s.num_computed_tokens for s in seqs]
        num_rows = max(rows) + 1
        num_keys = max(positions) + 1
        # 3. Storage large enough (or give up for this step).
        if not self._ensure_capacity(num_rows, num_keys):
            self.clear()
            return None
        # 4. Row ranges; re-lay out the rows by length when the ranges still read too much.
        groups = self._groups(rows, positions, num_rows)
        needed = sum(positions) + len(positions)
        cost = group_cost(groups)
        if cost > _RELAYOUT_RATIO * needed and cost - needed > 4 * self.min_split:
            rows = self._relayout(seqs, rows, positions)
            num_rows = len(rows)
            groups = self._groups(rows, positions, num_rows)
        self.keys_read += group_cost(groups)
        self.keys_needed += needed
        self.keys_padded += num_rows * num_keys
        # 5. Rows that do not hold exactly tokens [0, position) are refilled from the pages.
        for seq, row, pos in zip(seqs, rows, positions, strict=True):
            if self._filled[row] != pos:
                self._fill(row, seq, pos, kv)
            self._filled[row] = pos + 1  # the step writes the token at `pos`
        return self._plan_tensors(rows, positions, num_rows, num_keys, groups)

    def _groups(self, rows: list[int], positions: list[int], num_rows: int) -> list[RowGroup]:
        keys = [0] * num_rows
        for row, p in zip(rows, positions, strict=True):
            keys[row] = p + 1
        return split_rows(keys, _MAX_GROUPS, self.min_split)

    def _relayout(self, seqs: list[Sequence], rows: list[int], positions: list[int]) -> list[int]:
        """Move the decode rows to rows [0, n) in order of decreasing length (their valid
        tokens move with them); return each sequence's new row."""
        order = sorted(range(len(seqs)), key=lambda i: -positions[i])
        old = [rows[i] for i in order]
        filled = [self._filled[r] for r in old]
        width = max(filled)
        if width:
            index = torch.tensor(old, dtype=torch.long, device=self.device)
            n = len(old)
            for store in (self.k, self.v):
                store[:, :, :n, :width] = store[:, :, :, :width].index_select(2, index)
        self._seq_in_row = [None] * self.num_slots
        self._filled = [0] * self.num_slots
        new_rows = [0] * len(seqs)
        for new, i in enumerate(order):
            seq = seqs[i]
            self._row_of[id(seq)] = new
            self._seq_in_row[new] = seq
            self._filled[new] = filled[new]
            new_rows[i] = new
        self.relayouts += 1
        return new_rows

    def _ensure_capacity(self, num_rows: int, num_keys: int) -> bool:
        slots, length = self.num_slots, self.row_tokens
        if num_rows > slots:
            slots = -(-max(num_rows, slots + slots // 2) // _SLOT_GRANULE) * _SLOT_GRANULE
        if num_keys > length:
            length = max(num_keys, length + length // 2)
            length = -(-length // _ROW_GRANULE_TOKENS) * _ROW_GRANULE_TOKENS
        if (slots, length) == (self.num_slots, self.row_tokens):
            return True
        if slots * length > self.max_tokens:  # no headroom: just what this step needs
            slots, length = max(self.num_slots, num_rows), max(self.row_tokens, num_keys)
            if slots * length > self.max_tokens:
                return False
        shape = (*self.shape_prefix, slots, length, self.head_dim)
        with torch.inference_mode(False):  # normal tensors: writable inside and outside it
            new_k = torch.zeros(shape, dtype=self.dtype, device=self.device)
            new_v = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if self.k.numel():
                new_k[:, :, : self.num_slots, : self.row_tokens] = self.k
                new_v[:, :, : self.num_slots, : self.row_tokens] = self.v
        self.k, self.v = new_k, new_v
        self.num_slots, self.row_tokens = slots, length
        self._seq_in_row += [None] * (slots - len(self._seq_in_row))
        self._filled += [0] * (slots - len(self._filled))
        return True

    def _fill(self, row: int, seq: Sequence, num_tokens: int, kv: KVCache) -> None:
        if num_tokens:
            k, v = kv.read_heads_major(seq.block_table, num_tokens)
            self.k[:, :, row, :num_tokens] = k
            self.v[:, :, row, :num_tokens] = v

    def _plan_tensors(
        self,
        rows: list[int],
        positions: list[int],
        num_rows: int,
        num_keys: int,
        groups: list[RowGroup],
    ) -> DecodePlan:
        dev, length = self.device, self.row_tokens
        limit = [0] * num_rows  # rows not decoding this step attend to key 0 only
        for row, p in zip(rows, positions, strict=True):
            limit[row] = p
        index = torch.tensor(
            [rows, [r * length + p for r, p in zip(rows, positions, strict=True)]],
            dtype=torch.long,
            device=dev,
        )
        limit_t = torch.tensor(limit, dtype=torch.long, device=dev)
        key_pos = torch.arange(num_keys, device=dev)
        mask = torch.zeros(num_rows, num_keys, dtype=self.dtype, device=dev)
        mask.masked_fill_(key_pos[None, :] > limit_t[:, None], float("-inf"))
        return DecodePlan(
            k=self.k,
            v=self.v,
            rows=index[0],
            write_index=index[1],
            mask=mask.view(1, num_rows, 1, num_keys),
            num_rows=num_rows,
            num_keys=num_keys,
            identity=num_rows == len(rows) and rows == list(range(num_rows)),
            groups=tuple(groups),
        )
