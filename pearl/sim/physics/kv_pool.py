"""A simulated worker's KV memory: the tokens allocated to its running requests and the idle
prefixes of its prefix cache, within the pool's capacity.

The worker's admission rule (`pearl.sim.physics.kv_admission`) and batching core
(`pearl.sim.physics.batching`) decide what to allocate, admit and preempt; the pool keeps
the account and evicts idle prefixes (least recently used, each from its tail) when room
is needed.
"""

from __future__ import annotations

from pearl.sim.physics.prefix_cache import PrefixCache


class KvPool:
    """`capacity_tokens` of KV: `active_tokens` held by running requests, `cache.tokens` by
    idle prefixes, the rest free."""

    __slots__ = ("capacity_tokens", "active_tokens", "cache")

    def __init__(self, capacity_tokens: int, cache: PrefixCache) -> None:
        self.capacity_tokens = capacity_tokens
        self.active_tokens = 0
        self.cache = cache

    @property
    def free_tokens(self) -> int:
        return self.capacity_tokens - self.active_tokens - self.cache.tokens

    @property
    def room_tokens(self) -> int:
        """Tokens running requests may still take: free, or held by idle prefixes."""
        return self.capacity_tokens - self.active_tokens

    def allocate(self, tokens: int) -> None:
        self.active_tokens += tokens

    def release(self, tokens: int) -> None:
        self.active_tokens -= tokens

    def release_all(self) -> None:
        """Every running request is gone (aborted); idle prefixes stay."""
        self.active_tokens = 0

    def make_room(self, need_tokens: int) -> bool:
        """Free `need_tokens` by evicting idle prefixes; True if the room exists."""
        free = self.free_tokens
        if free < need_tokens:
            free += self.cache.evict(need_tokens - free)
        return free >= need_tokens

    def settle(self) -> None:
        """Evict what allocations made beyond free KV took from idle prefixes. Evicting tail
        first, a tokens and then b leave the cache as a + b at once do, so growth over many
        iterations can be settled at their end."""
        if self.free_tokens < 0:
            self.cache.evict(-self.free_tokens)
