"""What a simulated worker's KV memory admits: its pool, its prefix cache, and the rule by
which a queued request is let in (`WorkerConfig.admission`).

The worker's batching core (`pearl.sim.physics.batching`) asks it whether the head of the
queue fits, beside what the running requests' iteration already takes, and hands it what a
finished, aborted or preempted request leaves.
"""

from __future__ import annotations

import math

from pearl.sim.physics.inference_types import WorkerConfig
from pearl.sim.physics.kv_pool import KvPool
from pearl.sim.physics.prefix_cache import PrefixCache
from pearl.sim.physics.worker_state import Seq


class KvAdmission:
    """The KV pool of `capacity_tokens`, the prefix cache in it, and admission into it."""

    __slots__ = ("kv", "cache", "watermark", "chunk_kv", "_admissions")

    def __init__(self, capacity_tokens: int, config: WorkerConfig) -> None:
        self.cache = PrefixCache(
            int(config.prefix_cache_fraction * capacity_tokens), enabled=config.prefix_caching
        )
        self.kv = KvPool(capacity_tokens, self.cache)
        self.watermark = math.ceil(config.kv_watermark_fraction * capacity_tokens)
        self.chunk_kv = config.admission == "first_chunk"  # KV allocated chunk by chunk
        self._admissions = 0

    def reused_tokens(self, seq: Seq, own: int) -> int:
        """Tokens of `seq`'s prompt it may take from its trajectory's idle prefix of `own`."""
        if seq.prefilled:
            return 0
        prompt = seq.prompt
        if seq.num_preemptions:  # what it computed here before: its own tokens
            return min(own, prompt - 1)
        if seq.req.full_prefill:
            return 0
        cached = min(own, prompt - 1)
        if seq.req.reusable_prefix_tokens is not None:
            cached = min(cached, seq.req.reusable_prefix_tokens)
        return cached

    def try_admit(self, seq: Seq, budget: int, committed: int, t_s: float) -> int | None:
        """Admit `seq` at t_s if its KV fits once idle prefixes are evicted, beside the
        `committed` tokens this iteration already adds (a scheduler allocates the running
        requests' slots before it admits); returns the tokens its admission adds to this
        iteration (None: it does not fit, and nothing was evicted: FIFO head-of-line
        blocking).

        Its KV: the whole prompt and one token of growth (`admission` "prompt"), or its
        cached prefix and its first chunk of at most `budget` tokens ("first_chunk"); a
        request whose KV was transferred here takes all of it either way. Its own cached
        prefix becomes part of its KV."""
        prompt = seq.prompt
        own_cached = self.cache.peek(seq.req.traj_id)
        cached = self.reused_tokens(seq, own_cached)
        if self.chunk_kv and not seq.prefilled:
            alloc, adds = cached, min(prompt - cached, budget)
        else:
            alloc, adds = prompt, 1 if seq.prefilled else 0
        need = alloc + max(adds, 1) + self.watermark + committed
        # the room includes this trajectory's own prefix, which is reused, not evicted
        if self.kv.room_tokens < need:
            return None
        self.cache.take(seq.req.traj_id)
        self.kv.make_room(need)
        if seq.num_preemptions:
            self.cache.record_readmission(cached)
        elif not seq.prefilled:
            self.cache.record_lookup(cached)
        self._admissions += 1
        seq.admit(self._admissions, t_s, cached, alloc)
        self.kv.allocate(alloc)
        return adds
