"""The per-worker prefix cache: LRU order, capacity, counters."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.sim.physics.prefix_cache import PrefixCache


def test_lru_evicts_the_least_recently_used_entry_from_its_tail():
    c = PrefixCache(100)
    c.put(1, 40)
    c.put(2, 40)
    c.put(1, 45)  # refreshes trajectory 1
    c.put(3, 30)  # 45 + 40 + 30 > 100: 15 tokens off the tail of trajectory 2 (LRU)
    assert (c.peek(1), c.peek(2), c.peek(3)) == (45, 25, 30)
    assert c.tokens == 100 and c.num_evictions == 0 and c.evicted_tokens == 15
    c.put(4, 50)  # trajectory 2 goes whole, then 25 off trajectory 1's tail
    assert (2 in c, c.peek(1), c.peek(3), c.peek(4)) == (False, 20, 30, 50)
    assert c.num_evictions == 1 and c.evicted_tokens == 65


def test_take_removes_and_peek_does_not():
    c = PrefixCache(100)
    c.put(1, 40)
    assert c.peek(1) == 40 and c.tokens == 40
    assert c.take(1) == 40 and c.tokens == 0 and c.take(1) == 0


def test_evict_frees_exactly_what_is_asked_when_possible():
    c = PrefixCache(1000)
    for i in range(5):
        c.put(i, 100)
    assert c.evict(150) == 150 and len(c) == 4 and c.peek(1) == 50
    assert c.evict(10_000) == 350 and c.tokens == 0 and c.num_evictions == 5


def test_disabled_cache_and_oversized_entries_hold_nothing():
    off = PrefixCache(1000, enabled=False)
    off.put(1, 10)
    assert off.peek(1) == 0 and off.tokens == 0
    small = PrefixCache(50)
    small.put(1, 60)
    assert small.peek(1) == 0


def test_lookup_counters():
    c = PrefixCache(100)
    c.record_lookup(0)
    c.record_lookup(30)
    assert (c.num_lookups, c.num_hits, c.hit_tokens) == (2, 1, 30)


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from("pte"), st.integers(0, 6), st.integers(0, 80))))
def test_tokens_always_equal_the_sum_of_entries_within_the_limit(ops):
    c = PrefixCache(120)
    for op, traj, n in ops:
        if op == "p":
            c.put(traj, n)
        elif op == "t":
            c.take(traj)
        else:
            c.evict(n)
        assert c.tokens == sum(c.peek(i) for i in range(7)) <= 120
