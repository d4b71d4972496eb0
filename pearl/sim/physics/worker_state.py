"""Mutable internals of a simulated inference worker (`pearl.sim.physics.inference`).

`Seq` is one request's progress on a worker, `Segment` a run of iterations with a fixed
composition, `WorkerStats` the worker's cumulative counters. Not part of the public API.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pearl.sim.physics.inference_types import Request


class Seq:
    """One request on one worker. `prompt` = context + generated tokens at (re)admission;
    `kv` = KV tokens allocated to it (the prompt, or its computed part where KV is allocated
    chunk by chunk, plus one per decode step)."""

    __slots__ = (
        "req",
        "t_submit_s",
        "t_queued_s",
        "prefilled",
        "prompt",
        "generated",
        "kv",
        "prefill_done",
        "cached",
        "new_prefill",
        "admit_no",
        "num_preemptions",
        "num_prefill_samples",
        "in_decode",
        "t_prefill_start_s",
        "t_prefill_end_s",
        "t_decode_start_s",
        "d0",
        "g0",
        "k0",
        "d_finish",
    )

    def __init__(self, req: Request, t_submit_s: float, *, prefilled: bool) -> None:
        self.req = req
        self.t_submit_s = t_submit_s
        self.t_queued_s = req.t_queued_s if req.t_queued_s is not None else t_submit_s
        self.prefilled = prefilled  # its KV arrived from a prefill worker
        self.prompt = req.context_tokens + req.generated_tokens
        self.generated = req.generated_tokens
        self.kv = 0
        self.prefill_done = 0
        self.cached = 0
        self.new_prefill = 0
        self.admit_no = 0
        self.num_preemptions = 0
        self.num_prefill_samples = 0
        self.in_decode = False
        self.t_prefill_start_s: float | None = None
        self.t_prefill_end_s: float | None = None
        self.t_decode_start_s: float | None = None
        self.d0 = self.g0 = self.k0 = self.d_finish = 0

    @property
    def left(self) -> int:
        """Tokens still to generate in this turn."""
        return self.req.decode_tokens - self.generated

    @property
    def prefill_left(self) -> int:
        return self.prompt - self.prefill_done

    @property
    def alloc(self) -> int:
        return self.kv

    @property
    def decode_steps(self) -> int:
        return self.generated - self.req.generated_tokens - self.num_prefill_samples

    def admit(self, admit_no: int, t_s: float, cached_tokens: int, kv_tokens: int) -> None:
        self.admit_no = admit_no
        self.kv = kv_tokens
        if not self.num_preemptions:  # the turn's reuse, as vLLM reports num_cached_tokens
            self.cached = cached_tokens
        self.prefill_done = self.prompt if self.prefilled else cached_tokens

    def start_decode(self, t_s: float, dstep: int) -> None:
        """Join the decode batch at the worker's decode step `dstep`."""
        self.in_decode = True
        if self.t_decode_start_s is None:
            self.t_decode_start_s = t_s
        self.d0, self.g0, self.k0 = dstep, self.generated, self.kv
        self.d_finish = dstep + self.req.decode_tokens - self.generated

    def sync(self, dstep: int) -> None:
        """Materialise generated/kv at the worker's decode step `dstep` (decoding only)."""
        if self.in_decode:
            self.generated = self.g0 + dstep - self.d0
            self.kv = self.k0 + dstep - self.d0

    def finish_prefill(self, t_s: float) -> None:
        self.t_prefill_end_s = t_s
        self.generated += 1  # the last prompt chunk samples the first token
        self.num_prefill_samples += 1

    def preempt(self) -> None:
        """Drop the KV; keep the generated tokens, which join the prompt (recompute)."""
        self.prompt = self.req.context_tokens + self.generated
        self.prefilled = False
        self.kv = 0
        self.prefill_done = 0
        self.in_decode = False
        self.num_preemptions += 1


@dataclass(slots=True)
class Segment:
    """Iterations [0, iters) starting at start_s with a fixed composition: `d` decodes whose
    contexts sum to ctx0 at the start (+d per iteration) and, if `chunks` is not None, the
    same prompt chunks (seq, tokens) in every iteration. `chunks is None`: a decode stretch,
    timed in closed form; otherwise `ends[i]` is the end of iteration i and `prefill_s[i]`
    its prefill-attributed time."""

    start_s: float
    d: int
    ctx0: int
    chunks: list[tuple[Seq, int]] | None
    iters: int
    end_s: float = 0.0
    ends: list[float] = field(default_factory=list)
    prefill_s: list[float] = field(default_factory=list)

    @property
    def is_decode_stretch(self) -> bool:
        return self.chunks is None


@dataclass(slots=True)
class WorkerStats:
    """Cumulative counters of one worker (see `StepStats` for the meaning of each)."""

    num_iterations: int = 0
    busy_s: float = 0.0
    prefill_busy_s: float = 0.0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    decode_iterations: int = 0
    decode_seq_steps: int = 0
    decode_context_steps: float = 0.0
    num_preemptions: int = 0
    num_segments: int = 0  # segments applied (cost of the simulation, not of the GPU)

    def snapshot(self) -> tuple[float, ...]:
        """The counters in `StepStats` order (num_iterations .. decode_context_steps)."""
        return (
            self.num_iterations,
            self.busy_s,
            self.prefill_busy_s,
            self.prefill_tokens,
            self.decode_tokens,
            self.decode_iterations,
            self.decode_seq_steps,
            self.decode_context_steps,
        )
