"""One request's state inside the engine, and what the engine reports back for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from pearl.runtime.engine.sampling import SamplingParams


class SeqStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """Tokens (prompt + outputs), how many have KV in the cache, and the blocks holding it.

    Invariant: num_computed_tokens <= num_tokens <= len(block_table) * block_size once
    scheduled; the last token has no KV until the step that feeds it runs.
    """

    request_id: str
    token_ids: list[int]
    num_prompt_tokens: int
    sampling: SamplingParams
    seed: int
    prefill_only: bool = False
    output_logprobs: list[float] = field(default_factory=list)
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    num_hashed_blocks: int = 0
    last_block_hash: int | None = None
    num_cached_prefix_tokens: int = 0
    status: SeqStatus = SeqStatus.WAITING
    finish_reason: str | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens


@dataclass(frozen=True)
class RequestOutput:
    """What one step (or an abort) produced for a request.

    new_token_ids/new_logprobs: tokens sampled in this step (empty while a prefill is still
    being chunked). output_token_ids/output_logprobs: everything generated so far.
    finish_reason: "stop" (a stop token), "length" (max_new_tokens), "context_limit",
    "prefill" (a prefill_only request whose KV awaits export_kv), "abort"; None while running.
    num_cached_prefix_tokens: prompt tokens served from the prefix cache at admission.
    """

    request_id: str
    new_token_ids: tuple[int, ...]
    new_logprobs: tuple[float, ...]
    finished: bool
    finish_reason: str | None
    num_cached_prefix_tokens: int
    output_token_ids: tuple[int, ...] = ()
    output_logprobs: tuple[float, ...] = ()
    num_prompt_tokens: int = 0

    @classmethod
    def of(cls, seq: Sequence, new_ids: list[int], new_logprobs: list[float]) -> RequestOutput:
        return cls(
            request_id=seq.request_id,
            new_token_ids=tuple(new_ids),
            new_logprobs=tuple(new_logprobs),
            finished=seq.status is SeqStatus.FINISHED,
            finish_reason=seq.finish_reason,
            num_cached_prefix_tokens=seq.num_cached_prefix_tokens,
            output_token_ids=tuple(seq.output_token_ids),
            output_logprobs=tuple(seq.output_logprobs),
            num_prompt_tokens=seq.num_prompt_tokens,
        )
