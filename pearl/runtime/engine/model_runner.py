"""Runs one scheduled batch on the device: pack tokens, build paged-attention metadata,
forward, sample. Owns the model weights and the KV cache storage (the device state that
`release()` frees and `restore()` rebuilds), including the decode rows (`decode_kv`) that
let a decode step read each sequence's KV without gathering its blocks."""

from __future__ import annotations

import torch

from pearl.runtime.engine.attention import AttentionContext
from pearl.runtime.engine.decode_kv import DecodeRows
from pearl.runtime.engine.kv_cache import KVCache
from pearl.runtime.engine.model import Qwen3ForCausalLM
from pearl.runtime.engine.model_config import ModelConfig
from pearl.runtime.engine.sampling import sample
from pearl.runtime.engine.scheduler import ScheduledBatch


class ModelRunner:
    """`use_decode_rows`: keep contiguous decode rows next to the pages (at most as many
    token slots as the paged cache, i.e. up to twice the KV memory). On by default on CPU,
    where the per-step gather of blocks dominates a small model's decode step; off on
    accelerators, whose memory is better spent on pages. Tokens are the same either way."""

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        device: torch.device,
        dtype: torch.dtype,
        num_kv_blocks: int,
        block_size: int,
    ) -> None:
        self.cfg = cfg
        self.device = device
        self.dtype = dtype
        self.num_kv_blocks = num_kv_blocks
        self.block_size = block_size
        self.model: Qwen3ForCausalLM | None = None
        self.kv: KVCache | None = None
        self.decode_rows: DecodeRows | None = None
        self.use_decode_rows = device.type == "cpu"

    # -- device state -------------------------------------------------------------------
    def host_weights(
        self, state_dict: dict[str, torch.Tensor] | None, seed: int
    ) -> dict[str, torch.Tensor]:
        """The weights `build` would install, as CPU tensors in the model's dtype, without
        touching the device (the seeded init draws on the CPU either way: same values)."""
        model = Qwen3ForCausalLM(self.cfg)
        if state_dict is None:
            model.init_weights(seed)
        else:
            model.load_state_dict(state_dict, strict=True)
        model = model.to(self.dtype)
        return {k: v.detach() for k, v in model.state_dict().items()}

    def build(self, state_dict: dict[str, torch.Tensor] | None, seed: int) -> None:
        """Create the model on the device (from state_dict, else seeded random) and the KV."""
        with torch.device(self.device):
            model = Qwen3ForCausalLM(self.cfg)
        if state_dict is None:
            model.init_weights(seed)
        else:
            model.load_state_dict(state_dict, strict=True)
        self.model = model.to(self.dtype).eval()
        self.model.inv_freq = self.model.inv_freq.float()  # keep RoPE frequencies exact
        self.model.fuse_projections()  # after every change of parameter storage
        c = self.cfg
        self.kv = KVCache(
            c.num_hidden_layers,
            self.num_kv_blocks,
            self.block_size,
            c.num_key_value_heads,
            c.head_dim,
            dtype=self.dtype,
            device=self.device,
        )
        self.decode_rows = DecodeRows(
            c.num_hidden_layers,
            c.num_key_value_heads,
            c.head_dim,
            dtype=self.dtype,
            device=self.device,
            max_tokens=self.num_kv_blocks * self.block_size,
        )

    def free(self) -> None:
        self.model = None
        self.kv = None
        self.decode_rows = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @property
    def ready(self) -> bool:
        return self.model is not None

    # -- one step -----------------------------------------------------------------------
    def prepare(
        self, batch: ScheduledBatch
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionContext, list[int], list[int]]:
        """Pack a batch: decodes (1 new token, KV already cached) first, then chunks.

        Returns input ids [T], positions [T], the attention context, the batch indices of
        sequences to sample (in packed order) and the packed index of each one's last token.
        """
        assert self.kv is not None
        bs, dev = self.block_size, self.device
        decodes: list[int] = []
        chunks: list[int] = []
        for b, n in enumerate(batch.num_new_tokens):
            (decodes if n == 1 else chunks).append(b)
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        sample_rows: list[int] = []
        logits_idx: list[int] = []
        decode_seqs = [batch.seqs[b] for b in decodes]
        for b, seq in zip(decodes, decode_seqs, strict=True):
            start = seq.num_computed_tokens
            ids.append(seq.token_ids[start])
            pos.append(start)
            slots.append(seq.block_table[start // bs] * bs + start % bs)
            if start + 1 == seq.num_tokens:
                sample_rows.append(b)
                logits_idx.append(len(ids) - 1)
        max_q = max((batch.num_new_tokens[b] for b in chunks), default=0)
        q_slot: list[int] = []
        q_pos: list[int] = []
        for row, b in enumerate(chunks):
            seq, n = batch.seqs[b], batch.num_new_tokens[b]
            start, table = seq.num_computed_tokens, seq.block_table
            ids.extend(seq.token_ids[start : start + n])
            pos.extend(range(start, start + n))
            slots.extend(table[i // bs] * bs + i % bs for i in range(start, start + n))
            if start + n == seq.num_tokens:
                sample_rows.append(b)
                logits_idx.append(len(ids) - 1)
            q_slot.extend(range(row * max_q, row * max_q + n))
            q_pos.extend(range(start, start + n))
            q_pos.extend([start + n - 1] * (max_q - n))  # padding repeats the last position
        packed = torch.tensor([ids, pos, slots], dtype=torch.long, device=dev)
        ids_t, pos_t, slots_t = packed[0], packed[1], packed[2]
        plan = None
        if self.use_decode_rows and self.decode_rows is not None:
            plan = self.decode_rows.plan(decode_seqs, self.kv)
        ctx = AttentionContext(
            q_slot=torch.tensor(q_slot, dtype=torch.long, device=dev),
            num_seqs=len(chunks),
            max_q_len=max_q,
            q_positions=torch.tensor(q_pos, dtype=torch.long, device=dev).view(len(chunks), max_q),
            slot_mapping=slots_t,
            block_tables=self._tables([batch.seqs[b] for b in chunks]) if chunks else None,
            kv_caches=self.kv.layers,
            num_decode_tokens=len(decodes),
            decode_positions=pos_t[: len(decodes)],
            decode_block_tables=None if plan is not None else self._tables(decode_seqs),
            decode_plan=plan,
            num_queries_per_kv=self.cfg.num_attention_heads // self.cfg.num_key_value_heads,
        )
        return ids_t, pos_t, ctx, sample_rows, logits_idx

    def _tables(self, seqs: list) -> torch.Tensor:
        width = max((len(s.block_table) for s in seqs), default=0)
        rows = [s.block_table + [0] * (width - len(s.block_table)) for s in seqs]
        return torch.tensor(rows, dtype=torch.long, device=self.device).view(len(seqs), width)

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> list[tuple[int, float] | None]:
        """Feed every scheduled chunk; sample for sequences whose chunk reaches their end.

        Returns, per scheduled sequence (batch order), (token id, logprob) or None (its
        prefill continues next step).
        """
        assert self.model is not None
        ids, pos, ctx, sample_rows, logits_idx = self.prepare(batch)
        results: list[tuple[int, float] | None] = [None] * len(batch.seqs)
        if not sample_rows:  # only mid-prompt chunks: fill the KV, no logits needed
            logits_idx = [len(ids) - 1]
        logits = self.model(
            ids, pos, ctx, logits_indices=torch.tensor(logits_idx, device=ids.device)
        )
        if not sample_rows:
            return results
        seqs = [batch.seqs[b] for b in sample_rows]
        tokens, logprobs = sample(
            logits,
            [s.sampling for s in seqs],
            [s.seed for s in seqs],
            [s.num_output_tokens for s in seqs],
        )
        for b, t, lp in zip(sample_rows, tokens, logprobs, strict=True):
            results[b] = (t, lp)
        return results
