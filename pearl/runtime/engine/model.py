"""Qwen3 decoder (dense, or MoE as in Qwen3-30B-A3B) with HF-compatible parameter names.

Parameter names equal those of HF transformers' `Qwen3ForCausalLM` / `Qwen3MoeForCausalLM`
(MoE experts in the fused layout `mlp.experts.gate_up_proj` [E, 2I, H] and
`mlp.experts.down_proj` [E, H, I]), so an HF state dict loads with `load_state_dict`.

Two ways to call `forward`:
- a trainer's full-sequence pass: `model(input_ids[B, L], positions[B, L])` -> logits
  [B, L, V], causal within each row, no cache;
- the engine's paged pass: packed `input_ids[T]`, `positions[T]` and an `AttentionContext`
  that carries the KV cache; `logits_indices` selects the tokens whose logits are needed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pearl.runtime.engine.attention import AttentionContext, paged_attention
from pearl.runtime.engine.model_config import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 like the reference."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _rms_norm(x, self.weight, self.eps)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x / rms(x)) over the last dim, the normalisation in float32 and the
    product in x's dtype (the reference's rounding). `weight` broadcasts against x (per-head
    weights [heads, dim] are fine). A float32 vector weight takes one fused call
    (bit-identical to the two-step form)."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32 and weight.dim() == 1:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, with rotate_half(x) = (-x2, x1) written as
    roll(x) = (x2, x1) times sin with its first half negated (`sin_signed`): the
    same products, bit for bit, in fewer ops."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * sin_signed


class Attention(nn.Module):
    """GQA with per-head RMSNorm on q and k before RoPE (the Qwen3 recipe)."""

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        h, d, bias = cfg.hidden_size, cfg.head_dim, cfg.attention_bias
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=bias)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=bias)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=bias)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.qkv_weight: torch.Tensor | None = None  # set by fuse_projections()
        self.qkv_bias: torch.Tensor | None = None

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        t, nh, nkv, d = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        if self.qkv_weight is None:
            q = _rope(self.q_norm(self.q_proj(x).view(t, nh, d)), cos, sin_signed)
            k = _rope(self.k_norm(self.k_proj(x).view(t, nkv, d)), cos, sin_signed)
            v = self.v_proj(x).view(t, nkv, d)
        else:  # one projection; q and k normed and rotated together (same arithmetic)
            qkv = F.linear(x, self.qkv_weight, self.qkv_bias).view(t, nh + 2 * nkv, d)
            norm_w = torch.cat(
                (self.q_norm.weight.expand(nh, d), self.k_norm.weight.expand(nkv, d))
            )
            qk = _rope(_rms_norm(qkv[:, : nh + nkv], norm_w, self.q_norm.eps), cos, sin_signed)
            q, k, v = qk[:, :nh], qk[:, nh:], qkv[:, nh + nkv :]
        return self.o_proj(paged_attention(q, k, v, ctx, self.layer_idx))

    def fuse_projections(self) -> None:
        """Store q/k/v weights (and biases) in one tensor; the parameters become views of
        it, so in-place loads (`copy_`) keep the fused projection current."""
        self.qkv_weight = _fuse(self.q_proj.weight, self.k_proj.weight, self.v_proj.weight)
        if self.q_proj.bias is not None:
            self.qkv_bias = _fuse(self.q_proj.bias, self.k_proj.bias, self.v_proj.bias)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.gate_up_weight: torch.Tensor | None = None  # set by fuse_projections()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_weight is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate, up = F.linear(x, self.gate_up_weight).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)

    def fuse_projections(self) -> None:
        """gate and up weights in one tensor (the parameters become views of it)."""
        self.gate_up_weight = _fuse(self.gate_proj.weight, self.up_proj.weight)


def _fuse(*params: torch.Tensor) -> torch.Tensor:
    """Concatenate parameters along dim 0 and re-point each at its slice of the result."""
    fused = torch.cat([p.detach() for p in params])
    start = 0
    for p in params:
        p.data = fused[start : start + p.shape[0]]
        start += p.shape[0]
    return fused


class Router(nn.Module):
    """Top-k softmax router; `norm_topk_prob` renormalises the kept probabilities."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.top_k = cfg.num_experts_per_tok
        self.norm_topk_prob = cfg.norm_topk_prob
        self.weight = nn.Parameter(torch.zeros(cfg.num_experts, cfg.hidden_size))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(F.linear(x, self.weight), dim=-1, dtype=torch.float32)
        top_w, top_i = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        return top_w.to(x.dtype), top_i


class Experts(nn.Module):
    """E SwiGLU experts stored fused: gate_up_proj [E, 2I, H], down_proj [E, H, I]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))

    def forward(self, x: torch.Tensor, top_w: torch.Tensor, top_i: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for expert in torch.unique(top_i).tolist():
            token_idx, k_idx = torch.where(top_i == expert)
            gate, up = F.linear(x[token_idx], self.gate_up_proj[expert]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj[expert])
            out.index_add_(0, token_idx, y * top_w[token_idx, k_idx, None])
        return out


class SparseMoE(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = Router(cfg)
        self.experts = Experts(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top_w, top_i = self.gate(x)
        return self.experts(x, top_w, top_i)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, layer_idx)
        self.mlp: nn.Module = (
            SparseMoE(cfg)
            if cfg.is_moe_layer(layer_idx)
            else MLP(cfg.hidden_size, cfg.intermediate_size)
        )
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin_signed, ctx)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3ForCausalLM(nn.Module):
    """The causal LM. See the module docstring for the two calling conventions."""

    inv_freq: torch.Tensor  # a buffer (register_buffer), for the type checker

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = Qwen3Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        inv_freq = 1.0 / (
            cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim)
        )
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def fuse_projections(self) -> None:
        """Inference layout: one q/k/v projection and one gate/up projection per layer
        (fewer, larger matmuls; same arithmetic). Parameter names, shapes and `state_dict`
        are unchanged and in-place writes to the parameters stay visible; only a later
        change of parameter storage (`.to(dtype)`, `load_state_dict(assign=True)`) would
        detach them, so call this last. The engine's model runner does; a trainer's model
        need not."""
        for layer in self.model.layers:
            assert isinstance(layer, DecoderLayer)
            layer.self_attn.fuse_projections()
            if isinstance(layer.mlp, MLP):
                layer.mlp.fuse_projections()

    def init_weights(self, seed: int) -> None:
        """Seeded random init: N(0, initializer_range) matrices, unit norms, zero biases."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        std = self.config.initializer_range
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    w = torch.randn(p.shape, generator=gen, dtype=torch.float32) * std
                    p.copy_(w.to(p.dtype))

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """cos, sin of shape [T, 1, head_dim] for flat positions [T]."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: AttentionContext | None = None,
        logits_indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batched = ctx is None
        if ctx is None:  # trainer path: [B, L] whole sequences
            ctx = AttentionContext.full_sequences(positions)
            shape = input_ids.shape
            input_ids, positions = input_ids.reshape(-1), positions.reshape(-1)
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.rotary(positions, x.dtype)
        half = sin.shape[-1] // 2
        sin_signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)  # see _rope
        for layer in self.model.layers:
            x = layer(x, cos, sin_signed, ctx)
        if logits_indices is not None:
            x = x[logits_indices]
        logits = self.lm_head(self.model.norm(x))
        return logits.view(*shape, -1) if batched else logits
