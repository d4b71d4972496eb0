"""Continuous batching with chunked prefill under a per-step token budget.

Each `schedule()` builds one iteration: first the running sequences in arrival order (a
decode needs 1 token, an unfinished prefill continues with a chunk), then new sequences
from the waiting queue while budget, sequence slots and KV blocks last. A sequence that
cannot get a block preempts the newest running sequence (its KV is dropped and recomputed
later, mostly from the prefix cache). Chunked prefill bounds how long a long prompt can
stall the decodes batched with it (paper §3: prefill interrupts decode under colocation).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pearl.runtime.backends.interface import StepTelemetry
from pearl.runtime.engine.kv_cache import BlockManager
from pearl.runtime.engine.sequence import SeqStatus, Sequence


@dataclass
class ScheduledBatch:
    """Sequences of one step and how many of their uncomputed tokens each step feeds."""

    seqs: list[Sequence]
    num_new_tokens: list[int]
    preempted: list[Sequence]

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def is_empty(self) -> bool:
        return not self.seqs

    def telemetry(self) -> StepTelemetry:
        """What this batch feeds, counted before it runs: a sequence feeding one token past
        its prompt decodes (attending its computed context plus that token); every other
        fed token is prefill (prompt chunks, or a recompute after preemption)."""
        prefill = decode = context = 0
        for seq, n in zip(self.seqs, self.num_new_tokens, strict=True):
            if n == 1 and seq.num_tokens > seq.num_prompt_tokens:
                decode += 1
                context += seq.num_computed_tokens + 1
            else:
                prefill += n
        return StepTelemetry(len(self.seqs), prefill, decode, context)


class Scheduler:
    def __init__(
        self, blocks: BlockManager, *, max_num_batched_tokens: int, max_num_seqs: int
    ) -> None:
        if max_num_batched_tokens < 1 or max_num_seqs < 1:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be positive")
        self.blocks = blocks
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        """Add a sequence that already holds KV blocks (an import). It joins the running
        set, possibly above max_num_seqs for a while, so that under KV pressure it can be
        preempted like the others instead of holding blocks in the waiting queue."""
        seq.status = SeqStatus.RUNNING
        self.running.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, seq: Sequence) -> None:
        """Take seq out of the queues (finished or aborted); its blocks are the caller's."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch([], [], [])
        budget = self.max_num_batched_tokens
        # Phase 1: running sequences, oldest first; preempt the newest when out of blocks.
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_uncomputed_tokens, budget)
            while not self.blocks.grow(seq, seq.num_computed_tokens + n):
                victim = self.running[-1]
                self._preempt(victim)
                batch.preempted.append(victim)
                if victim is seq:
                    break
            else:
                batch.seqs.append(seq)
                batch.num_new_tokens.append(n)
                budget -= n
                i += 1
                continue
            break  # seq preempted itself: nothing newer is left to run
        # Phase 2: admit waiting sequences (prefix-cache hits first reduce their work).
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if seq in batch.preempted:
                break  # do not readmit in the step that evicted it
            admitted_now = not seq.block_table  # imported sequences arrive holding blocks
            if admitted_now:
                self.blocks.admit(seq)
            n = min(seq.num_uncomputed_tokens, budget)
            if not self.blocks.grow(seq, seq.num_computed_tokens + n):
                if admitted_now:
                    self.blocks.free_seq(seq)
                break
            self.waiting.popleft()
            seq.status = SeqStatus.RUNNING
            self.running.append(seq)
            batch.seqs.append(seq)
            batch.num_new_tokens.append(n)
            budget -= n
        assert budget >= 0 and all(n > 0 for n in batch.num_new_tokens)
        return batch

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.free_seq(seq)
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)
