"""Per-worker prefix cache: the KV of trajectories that wait between turns, evicted LRU
(each entry from its tail).

A multi-turn trajectory's next prompt extends its previous context, so a worker that still
holds that context (its KV) prefills only the new tokens. The cache holds one entry per
trajectory (the tokens of its latest context on this worker). Entries share the worker's KV
pool with the running requests: admitting a request or growing a decode evicts the least
recently used entries first. Whether a turn hits is an outcome of capacity, eviction and
routing, counted here (`num_lookups`, `num_hits`, `hit_tokens`), never an input.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """LRU map traj_id -> cached prefix tokens, bounded by `limit_tokens` in total.

    `enabled=False` turns it into a cache that never holds anything (every turn misses).
    """

    __slots__ = (
        "limit_tokens",
        "enabled",
        "_entries",
        "tokens",
        "num_lookups",
        "num_hits",
        "hit_tokens",
        "num_evictions",
        "evicted_tokens",
        "num_readmissions",
        "readmitted_hit_tokens",
    )

    def __init__(self, limit_tokens: int, *, enabled: bool = True) -> None:
        if limit_tokens < 0:
            raise ValueError("limit_tokens must be >= 0")
        self.limit_tokens = limit_tokens
        self.enabled = enabled
        self._entries: OrderedDict[int, int] = OrderedDict()
        self.tokens = 0  # sum of all entries
        self.num_lookups = 0
        self.num_hits = 0
        self.hit_tokens = 0
        self.num_evictions = 0
        self.evicted_tokens = 0
        self.num_readmissions = 0
        self.readmitted_hit_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, traj_id: object) -> bool:
        return traj_id in self._entries

    def peek(self, traj_id: int) -> int:
        """Tokens cached for `traj_id` (0 if none); does not touch LRU order or counters."""
        return self._entries.get(traj_id, 0)

    def take(self, traj_id: int) -> int:
        """Remove and return the entry of `traj_id` (its KV moves into a running request)."""
        tokens = self._entries.pop(traj_id, 0)
        self.tokens -= tokens
        return tokens

    def record_readmission(self, hit_tokens: int) -> None:
        """Count a preempted request's readmission and the tokens of its own KV it found
        (apart from the lookups: the hit rate is one of turns reusing earlier turns)."""
        self.num_readmissions += 1
        self.readmitted_hit_tokens += hit_tokens

    def record_lookup(self, hit_tokens: int) -> None:
        """Count one admission's lookup and the tokens it reused."""
        self.num_lookups += 1
        if hit_tokens > 0:
            self.num_hits += 1
            self.hit_tokens += hit_tokens

    def put(self, traj_id: int, tokens: int) -> None:
        """Insert (or replace) `traj_id`'s entry as most recently used; evict LRU entries
        beyond the limit. An entry larger than the limit is not kept."""
        self.take(traj_id)
        if not self.enabled or tokens <= 0 or tokens > self.limit_tokens:
            return
        self._entries[traj_id] = tokens
        self.tokens += tokens
        if self.tokens > self.limit_tokens:
            self.evict(self.tokens - self.limit_tokens)

    def evict(self, need_tokens: int) -> int:
        """Free `need_tokens` (or all there is) from the least recently used entries, each
        from its tail; returns the tokens freed. vLLM V1 frees a request's blocks tail first
        into an LRU queue, so an idle prefix loses its last tokens first and its head, the
        part a later turn can reuse, last. An entry left empty is dropped (an eviction)."""
        freed = 0
        entries = self._entries
        while freed < need_tokens and entries:
            traj_id, tokens = next(iter(entries.items()))
            cut = min(tokens, need_tokens - freed)
            if cut == tokens:
                del entries[traj_id]
                self.num_evictions += 1
            else:
                entries[traj_id] = tokens - cut  # keeps its place in the LRU order
            freed += cut
        self.evicted_tokens += freed
        self.tokens -= freed
        return freed

    def clear(self) -> None:
        """Drop everything (the worker's device state is gone); not counted as evictions."""
        self._entries.clear()
        self.tokens = 0
