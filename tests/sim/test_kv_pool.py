"""A worker's KV pool: its account, and the property that lets a segment settle the
evictions of many iterations' growth at once."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.sim.physics.kv_pool import KvPool
from pearl.sim.physics.prefix_cache import PrefixCache


def _pool(entries: list[int], active: int, capacity: int = 1000) -> KvPool:
    cache = PrefixCache(capacity)
    for traj, tokens in enumerate(entries):
        cache.put(traj, tokens)
    pool = KvPool(capacity, cache)
    pool.allocate(active)
    return pool


def test_room_counts_idle_prefixes_and_make_room_evicts_them():
    pool = _pool([100, 200], active=600)
    assert (pool.free_tokens, pool.room_tokens) == (100, 400)
    assert pool.make_room(250) and pool.free_tokens == 250 and pool.cache.peek(0) == 0
    assert not pool.make_room(401) and pool.cache.tokens == 0


@settings(max_examples=200, deadline=None)
@given(
    entries=st.lists(st.integers(1, 150), max_size=6),
    steps=st.lists(st.integers(0, 60), min_size=1, max_size=8),
)
def test_settling_growth_at_the_end_equals_settling_each_step(entries, steps):
    """Growth settled iteration by iteration leaves the same cache as settled once at the
    end (tail-first eviction of a then b tokens equals a + b)."""
    active = 1000 - sum(entries) if sum(entries) <= 1000 else 0
    each, once = _pool(entries, active), _pool(entries, active)
    room = each.room_tokens
    for grow in steps:
        if grow > each.room_tokens:
            break
        each.allocate(grow)
        each.settle()
        once.allocate(grow)
    once.settle()
    assert each.room_tokens <= room
    assert [each.cache.peek(t) for t in range(6)] == [once.cache.peek(t) for t in range(6)]
    assert each.free_tokens == once.free_tokens >= 0
