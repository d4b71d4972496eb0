"""Runs one scheduled batch on the device: pack tokens, build paged-attention metadata,
forward, sample. Owns the model weights and the KV cache storage (the device state that
`release()` frees and `restore()` rebuilds)."""

from __future__ import annotations

import torch

from pearl.runtime.engine.attention import AttentionContext
from pearl.runtime.engine.config import ModelConfig
from pearl.runtime.engine.kv_cache import KVCache
from pearl.runtime.engine.model import Qwen3ForCausalLM
from pearl.runtime.engine.sampling import sample
from pearl.runtime.engine.scheduler import ScheduledBatch


class ModelRunner:
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

    # -- device state -------------------------------------------------------------------
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

    def free(self) -> None:
        self.model = None
        self.kv = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @property
    def ready(self) -> bool:
        return self.model is not None

    # -- one step -----------------------------------------------------------------------
    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> list[tuple[int, float] | None]:
        """Feed every scheduled chunk; sample for sequences whose chunk reaches their end.

        Returns, per scheduled sequence, (token id, logprob) or None (prefill continues).
        """
        assert self.model is not None and self.kv is not None
        bs = self.block_size
        ids: list[int] = []
        pos: list[int] = []
        q_slot: list[int] = []
        slots: list[int] = []
        logits_idx: list[int] = []
        sample_rows: list[int] = []
        max_q = max(batch.num_new_tokens)
        max_blocks = max(len(s.block_table) for s in batch.seqs)
        q_positions = torch.zeros(len(batch.seqs), max_q, dtype=torch.long)
        tables = torch.zeros(len(batch.seqs), max_blocks, dtype=torch.long)
        for b, (seq, n) in enumerate(zip(batch.seqs, batch.num_new_tokens, strict=True)):
            start = seq.num_computed_tokens
            ids.extend(seq.token_ids[start : start + n])
            pos.extend(range(start, start + n))
            q_slot.extend(range(b * max_q, b * max_q + n))
            table = seq.block_table
            slots.extend(table[i // bs] * bs + i % bs for i in range(start, start + n))
            q_positions[b, :n] = torch.arange(start, start + n)
            q_positions[b, n:] = start + n - 1
            tables[b, : len(table)] = torch.tensor(table)
            if start + n == seq.num_tokens:
                logits_idx.append(len(ids) - 1)
                sample_rows.append(b)
        dev = self.device
        ctx = AttentionContext(
            q_slot=torch.tensor(q_slot, device=dev),
            num_seqs=len(batch.seqs),
            max_q_len=max_q,
            q_positions=q_positions.to(dev),
            slot_mapping=torch.tensor(slots, device=dev),
            block_tables=tables.to(dev),
            kv_caches=self.kv.layers,
        )
        results: list[tuple[int, float] | None] = [None] * len(batch.seqs)
        if not sample_rows:
            self.model(
                torch.tensor(ids, device=dev),
                torch.tensor(pos, device=dev),
                ctx,
                logits_indices=torch.tensor([len(ids) - 1], device=dev),
            )
            return results
        logits = self.model(
            torch.tensor(ids, device=dev),
            torch.tensor(pos, device=dev),
            ctx,
            logits_indices=torch.tensor(logits_idx, device=dev),
        )
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
