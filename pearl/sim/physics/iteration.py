"""The simulator's hardware model: time of one inference iteration from FLOPs and bytes.

This is the simulated world's ground truth. It is written independently of the decision
engine's coarse fitted models (`pearl.control.makespan`), which it must never import or
share formulas with, or validation would prove nothing (docs/architecture.md).

One iteration of a worker processes some prefill chunks (tokens at known positions) and one
token for each decoding sequence (at its context length). Its time is the sum of its
operator groups, each bound by its own roofline (as Vidur times operators one by one, and
as a real engine runs them: the dense layers as one GEMM over every token of the batch,
then the prefill chunks' attention, then the decodes' attention, each its own kernel):

    t = hypot(linear flops / C, weight bytes / M)            dense layers + LM head
      + max(prefill attention flops / C, prefix KV bytes / M)  prefill chunks
      + max(decode attention flops / C, decode KV bytes / M)   decoding sequences
      + tp_comm + overhead_s + per_seq_overhead_s * num_seqs

with C = eff_compute * peak_flops and M = eff_memory * hbm_bw. The dense layers' roofline
is smooth, the root of the sum of the squares of its two sides: GEMMs near the balance point
(a few hundred tokens) saturate neither side, and over Vidur's whole H100 profile of
Llama-2-7B's dense operators (1 to 4,096 tokens) that form has the least error of the
p-norms: RMS log error 0.069 against 0.114 for the plain max, which was up to 32% fast
(216 tokens) and more than 15% off at 41 of the 259 token counts profiled, against 3 (none
beyond 16%) for this form; on Vidur's H100 profiles of four larger models (20-72B) at tp 1
and 2 it is closer than the max too (docs/simulator-model.md). Far from the knee it equals
the max within 1%.

So a decode riding in a prefill chunk's iteration shares the weight read and the GEMM, but
its KV read is not hidden under the chunk's compute: colocated prefill and decode interfere
as in a real engine (Sarathi-Serve's hybrid batches), not as one ideally overlapped kernel.

- flops: 2 * (active params without embeddings) per token (dense, or MoE active experts),
  2 * vocab * hidden per sampled token (only the last position of a sequence gets logits),
  attention 4 * heads * head_dim * layers per (query token, context position) pair
  (QK^T and AV), causal within a prefill chunk.
- bytes: the weights read once per iteration (for MoE the non-expert weights plus the
  expected fraction of experts touched by the T tokens of the iteration,
  1 - (1 - k/E)^T), the KV cache read (each decode token reads its whole context; a prefill
  chunk reads the prefix before it once) and the KV written.
- tensor parallel over `tp` GPUs divides flops and bytes by tp and adds two all-reduces of
  the activations per layer over NVLink (latency + ring bandwidth term).

KV capacity = tp * hbm * memory_utilisation - weights - activation reserve, in tokens.
KV transfer between workers = latency + bytes / link bandwidth (NVLink within a node, the
NIC bandwidth across nodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pearl.sim.physics.linear_sums import fit_linear, sum_max_linear
from pearl.specs.hardware import GpuSpec, ModelSpec

# Efficiencies per GPU type: (compute, memory).
# * memory 0.82: vLLM's decode of Llama-3.1-8B on an A100-40GB, one request at a time, runs
#   at 75 tok/s (a published benchmark, pearl/sim/calibration_refs.py), which with this
#   model's per-iteration overhead is 0.82 of peak HBM bandwidth for the weight and KV
#   reads. The same decode kernels run on Hopper; 0.82 stays under the 0.90 of peak that a
#   plain device copy reaches on this workplace's H200. (Before that measurement: 0.72, the
#   middle of gpus.yaml's 60-79% lead.)
# * compute: prefill GEMMs reach ~55-65% of peak bf16 end to end (gpus.yaml's lead), under
#   the 0.78-0.81 of a large GEMM on this workplace's H200. Vidur's per-operator profile of
#   Llama-2-7B on an H100 (all of a layer but attention) runs a 4,096-token iteration at
#   0.64 of peak, 8% faster than this model (pearl/sim/calibration_vidur.py).
# * A100 compute 0.64: Vidur's per-operator profiles on the A100 (Llama-2-7B, Llama-2-70B
#   and Llama-3-8B at tp 1 and 2, every operator of a layer but attention, 1,956 token
#   counts from 1 to 4,096) fit best at 0.64 with the smooth roofline (RMS log error 0.060,
#   mean error +0.4%). The 0.55 used before (gpus.yaml's "older kernels" low end, never
#   measured) was 16-30% slow from 2,048 tokens up (RMS 0.160), and it left GPUStack's
#   Qwen3-32B serving runs on an A100 19-20% slow (two calibration misses, now within).
DEFAULT_EFFICIENCY: dict[str, tuple[float, float]] = {
    "h100-sxm": (0.60, 0.82),
    "h100-pcie": (0.60, 0.82),  # the SXM's figures: same chip, no measurement of its own
    "h800": (0.60, 0.82),
    "h200": (0.60, 0.82),
    "h20": (0.65, 0.82),
    "a100-80g": (0.64, 0.82),
    "a100-40g": (0.64, 0.82),  # the same chip: the 80 GB card's figures
}
_FALLBACK_EFFICIENCY = (0.55, 0.65)


@dataclass(frozen=True, slots=True)
class HardwareParams:
    """Knobs of the hardware model that datasheets do not give (seconds, bytes, fractions)."""

    compute_efficiency: float | None = None  # None: DEFAULT_EFFICIENCY of the GPU type
    memory_efficiency: float | None = None  # None: DEFAULT_EFFICIENCY of the GPU type
    iteration_overhead_s: float = 0.0015  # scheduler + launch per iteration (CUDA graphs)
    per_seq_overhead_s: float = 10e-6  # per sequence in the batch (sampling, bookkeeping)
    memory_utilisation: float = 0.90  # fraction of HBM the engine may use (vLLM default)
    activation_reserve_bytes: float = 2e9  # per GPU: activations, CUDA graphs, workspace
    allreduce_latency_s: float = 8e-6  # per all-reduce, tensor parallel
    inter_node_bytes_per_s: float = 25e9  # one 200 Gb/s NIC at line rate (gpus.yaml comment)
    transfer_latency_s: float = 0.002  # per KV transfer (handshake, metadata)

    def __post_init__(self) -> None:
        for name in ("compute_efficiency", "memory_efficiency"):
            v = getattr(self, name)
            if v is not None and not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        if not 0 < self.memory_utilisation <= 1:
            raise ValueError("memory_utilisation must be in (0, 1]")
        if self.inter_node_bytes_per_s <= 0:
            raise ValueError("inter_node_bytes_per_s must be > 0")


@dataclass(frozen=True, slots=True)
class IterationCost:
    """Raw work of one iteration (before dividing by speeds)."""

    flops: float
    bytes: float
    num_tokens: int
    num_seqs: int


@dataclass(frozen=True)
class WorkerHardware:
    """Performance model of one inference worker: `model` on `tp` GPUs of type `gpu`.

    All methods are pure. Times in seconds, sizes in tokens or bytes.
    """

    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    params: HardwareParams = field(default_factory=HardwareParams)
    # Derived in __post_init__ (coefficients precomputed once, for speed).
    compute_rate: float = field(init=False, repr=False)  # effective FLOP/s of the worker
    memory_rate: float = field(init=False, repr=False)  # effective HBM bytes/s
    flops_per_token: float = field(init=False, repr=False)
    flops_per_logit: float = field(init=False, repr=False)
    attn_flops_per_pair: float = field(init=False, repr=False)
    kv_bytes_per_token: float = field(init=False, repr=False)
    dense_weight_bytes: float = field(init=False, repr=False)  # read every iteration
    expert_weight_bytes: float = field(init=False, repr=False)  # all routed experts
    expert_miss_prob: float = field(init=False, repr=False)  # 1 - k/E per token
    tp_fixed_s: float = field(init=False, repr=False)
    tp_per_token_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError("tp must be >= 1")
        m, p = self.model, self.params
        # the knobs, else the card's own (a GPU file), else its calibrated figures
        eff_c, eff_m = DEFAULT_EFFICIENCY.get(self.gpu.name, _FALLBACK_EFFICIENCY)
        eff_c = p.compute_efficiency or self.gpu.compute_efficiency or eff_c
        eff_m = p.memory_efficiency or self.gpu.memory_efficiency or eff_m
        embed = m.vocab_size * m.hidden_size
        set_ = object.__setattr__  # frozen dataclass
        set_(self, "compute_rate", eff_c * self.gpu.flops_per_s * self.tp)
        set_(self, "memory_rate", eff_m * self.gpu.hbm_bytes_per_s * self.tp)
        # The input embedding is a lookup; the LM head runs only for sampled positions.
        set_(self, "flops_per_token", 2.0 * (m.active_params - 2 * embed))
        set_(self, "flops_per_logit", 2.0 * embed)
        set_(
            self,
            "attn_flops_per_pair",
            4.0 * m.num_attention_heads * m.head_dim * m.num_hidden_layers,
        )
        set_(self, "kv_bytes_per_token", float(m.kv_bytes_per_token_bf16))
        bytes_per_param = m.weight_bytes_bf16 / m.params_total
        weight_read = m.weight_bytes_bf16 - embed * bytes_per_param
        if m.is_moe:
            assert m.num_experts and m.num_experts_per_tok and m.moe_intermediate_size
            expert = 3.0 * m.hidden_size * m.moe_intermediate_size * bytes_per_param
            expert_bytes = m.num_hidden_layers * m.num_experts * expert
            set_(self, "dense_weight_bytes", weight_read - expert_bytes)
            set_(self, "expert_weight_bytes", expert_bytes)
            set_(self, "expert_miss_prob", 1.0 - m.num_experts_per_tok / m.num_experts)
        else:
            set_(self, "dense_weight_bytes", weight_read)
            set_(self, "expert_weight_bytes", 0.0)
            set_(self, "expert_miss_prob", 1.0)
        if self.tp > 1:
            ring = 2.0 * (self.tp - 1) / self.tp
            act_bytes = m.hidden_size * 2.0  # bf16 activations per token
            n_ar = 2 * m.num_hidden_layers
            set_(self, "tp_fixed_s", n_ar * p.allreduce_latency_s)
            set_(
                self,
                "tp_per_token_s",
                n_ar * ring * act_bytes / (self.gpu.nvlink_gb_s_per_dir * 1e9),
            )
        else:
            set_(self, "tp_fixed_s", 0.0)
            set_(self, "tp_per_token_s", 0.0)

    # -- memory ------------------------------------------------------------------------

    @property
    def weight_bytes(self) -> float:
        return float(self.model.weight_bytes_bf16)

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens that fit: usable HBM of all tp GPUs minus weights and reserves.

        Zero when the weights do not fit (such a worker cannot serve; use a larger tp).
        """
        p = self.params
        usable = self.tp * (self.gpu.hbm_bytes * p.memory_utilisation - p.activation_reserve_bytes)
        free = usable - self.weight_bytes
        return max(0, int(free // self.model.kv_bytes_per_token_bf16))

    def weight_bytes_read(self, num_tokens: int) -> float:
        """Weight bytes one iteration over `num_tokens` tokens reads (MoE: experts touched)."""
        if num_tokens <= 0:
            return 0.0
        if self.expert_weight_bytes == 0.0:
            return self.dense_weight_bytes
        coverage = 1.0 - self.expert_miss_prob**num_tokens
        return self.dense_weight_bytes + self.expert_weight_bytes * coverage

    # -- one iteration -----------------------------------------------------------------

    def iteration_time_s(
        self,
        *,
        num_prefill_tokens: int = 0,
        prefill_pairs: float = 0.0,
        prefill_prefix_tokens: int = 0,
        num_prefill_logits: int = 0,
        num_decode: int = 0,
        decode_context_tokens: int = 0,
    ) -> float:
        """Time of one iteration.

        `prefill_pairs`: attention (query, key) pairs of all prefill chunks (see
        `chunk_pairs`); `prefill_prefix_tokens`: KV tokens before the chunks, read once;
        `num_prefill_logits`: chunks that end a prompt (they sample a token);
        `decode_context_tokens`: sum of the decoding sequences' context lengths.
        """
        tokens = num_prefill_tokens + num_decode
        if tokens == 0:
            return 0.0
        busy = self.dense_time_s(tokens, num_decode + num_prefill_logits)
        if num_prefill_tokens:
            busy += self.prefill_attention_time_s(
                prefill_pairs, prefill_prefix_tokens, num_prefill_tokens
            )
        if num_decode:
            busy += self.decode_attention_time_s(num_decode, decode_context_tokens)
        p = self.params
        return (
            busy
            + self.tp_fixed_s
            + self.tp_per_token_s * tokens
            + p.iteration_overhead_s
            + p.per_seq_overhead_s * (num_decode + num_prefill_logits)
        )

    def dense_time_s(self, num_tokens: int, num_logits: int = 0) -> float:
        """The dense layers (and the LM head for `num_logits` sampled positions) over an
        iteration's `num_tokens` tokens: one GEMM group on its own (smooth) roofline."""
        flops = self.flops_per_token * num_tokens + self.flops_per_logit * num_logits
        return math.hypot(
            flops / self.compute_rate, self.weight_bytes_read(num_tokens) / self.memory_rate
        )

    def prefill_attention_time_s(
        self, pairs: float, prefix_tokens: int, chunk_tokens: int
    ) -> float:
        """The prefill chunks' attention: `pairs` (query, key) pairs on the compute side;
        the prefix read once and the chunks' KV written on the memory side."""
        return max(
            self.attn_flops_per_pair * pairs / self.compute_rate,
            self.kv_bytes_per_token * (prefix_tokens + chunk_tokens) / self.memory_rate,
        )

    def decode_attention_time_s(self, num_decode: int, context_tokens: int) -> float:
        """The decoding sequences' attention: each reads its whole context (the contexts
        sum to `context_tokens`) and writes one token's KV, on its own roofline."""
        return max(
            self.attn_flops_per_pair * context_tokens / self.compute_rate,
            self.kv_bytes_per_token * (context_tokens + num_decode) / self.memory_rate,
        )

    @staticmethod
    def chunk_pairs(start_pos: int, num_tokens: int) -> float:
        """Causal attention pairs of a chunk of `num_tokens` at positions start_pos.. ."""
        return num_tokens * start_pos + num_tokens * (num_tokens + 1) / 2.0

    def decode_step_time_s(self, num_decode: int, context_tokens: int) -> float:
        """One decode-only iteration of `num_decode` sequences whose contexts sum to
        `context_tokens`."""
        return self.iteration_time_s(num_decode=num_decode, decode_context_tokens=context_tokens)

    def prefill_time_s(
        self, num_tokens: int, cached_tokens: int = 0, chunk_tokens: int = 0
    ) -> float:
        """A prefill of `num_tokens` new tokens after `cached_tokens` cached ones, alone on
        the worker, in chunks of `chunk_tokens` (0: one chunk). Samples the first token."""
        if num_tokens <= 0:
            return 0.0
        chunk = chunk_tokens if chunk_tokens > 0 else num_tokens
        total, done = 0.0, 0
        while done < num_tokens:
            n = min(chunk, num_tokens - done)
            pos = cached_tokens + done
            done += n
            total += self.iteration_time_s(
                num_prefill_tokens=n,
                prefill_pairs=self.chunk_pairs(pos, n),
                prefill_prefix_tokens=pos,
                num_prefill_logits=1 if done == num_tokens else 0,
            )
        return total

    # -- decode stretches (closed form) --------------------------------------------------

    def _decode_linear(self, d: int, ctx0: int) -> tuple[float, float, float, float, float]:
        """Step n of a decode-only stretch takes max(c0 + c1*n, m0 + m1*n) + fixed: the
        attention's two rooflines grow with the contexts; the dense layers (their own
        roofline, a constant for a fixed batch) and the overheads are in `fixed`."""
        p = self.params
        cr, mr = self.compute_rate, self.memory_rate
        c0 = self.attn_flops_per_pair * ctx0 / cr
        c1 = self.attn_flops_per_pair * d / cr
        m0 = self.kv_bytes_per_token * (ctx0 + d) / mr
        m1 = self.kv_bytes_per_token * d / mr
        fixed = (
            self.dense_time_s(d, d)
            + self.tp_fixed_s
            + self.tp_per_token_s * d
            + p.iteration_overhead_s
            + p.per_seq_overhead_s * d
        )
        return c0, c1, m0, m1, fixed

    def decode_stretch_time_s(self, num_decode: int, context_tokens: int, num_steps: int) -> float:
        """Total time of `num_steps` decode-only iterations; each step every one of the
        `num_decode` sequences gains one token, so the context sum grows by num_decode."""
        if num_steps <= 0 or num_decode <= 0:
            return 0.0
        c0, c1, m0, m1, fixed = self._decode_linear(num_decode, context_tokens)
        return sum_max_linear(c0, c1, m0, m1, num_steps) + fixed * num_steps

    def decode_steps_within(
        self, num_decode: int, context_tokens: int, budget_s: float, max_steps: int
    ) -> tuple[int, float]:
        """The most whole decode steps (<= max_steps) that fit in `budget_s`, and their time."""
        if budget_s <= 0 or max_steps <= 0 or num_decode <= 0:
            return 0, 0.0
        c0, c1, m0, m1, fixed = self._decode_linear(num_decode, context_tokens)

        def total(k: int) -> float:
            return sum_max_linear(c0, c1, m0, m1, k) + fixed * k

        full = total(max_steps)
        if full <= budget_s:
            return max_steps, full
        # Each piece alone takes no longer than the max of both, so the steps that fit under
        # either piece alone bound the answer from above; usually it is exact.
        k = min(
            max_steps, fit_linear(c0 + fixed, c1, budget_s), fit_linear(m0 + fixed, m1, budget_s)
        )
        t = total(k)
        if t > budget_s:  # the crossover made it too optimistic: bisect below k
            lo, hi = 0, k
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if total(mid) <= budget_s:
                    lo = mid
                else:
                    hi = mid
            return lo, total(lo)
        while k < max_steps:
            t_next = total(k + 1)
            if t_next > budget_s:
                break
            k, t = k + 1, t_next
        return k, t

    # -- KV transfer -----------------------------------------------------------------------

    def kv_transfer_time_s(self, num_tokens: int, *, same_node: bool = False) -> float:
        """Moving the KV of `num_tokens` tokens to another worker (prefill -> decode).

        Within a node over NVLink (per direction, all tp GPUs in parallel); across nodes over
        `inter_node_bytes_per_s` per GPU NIC, tp NICs in parallel.
        """
        if num_tokens <= 0:
            return 0.0
        nbytes = num_tokens * self.kv_bytes_per_token
        link = (
            self.gpu.nvlink_gb_s_per_dir * 1e9 if same_node else self.params.inter_node_bytes_per_s
        )
        return self.params.transfer_latency_s + nbytes / (link * self.tp)
