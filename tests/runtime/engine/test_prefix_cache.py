"""Prefix caching: block hashing, ref counts, LRU eviction, and hits that change nothing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.runtime.engine import LLMEngine, SamplingParams
from pearl.runtime.engine.kv_cache import BlockManager
from pearl.runtime.engine.sampling import SamplingParams as SP
from pearl.runtime.engine.sequence import Sequence


def engine(cfg, weights, **kw) -> LLMEngine:
    e = LLMEngine(cfg, block_size=4, num_kv_blocks=64, max_num_batched_tokens=32, **kw)
    e.load_weights(weights, version=1)
    return e


def test_prefix_hit_gives_same_tokens_as_miss(tiny_cfg, tiny_engine_weights) -> None:
    """A second turn sharing the first turn's prefix hits the cache and decodes identically."""
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    turn1 = list(range(60, 83))
    warm = engine(tiny_cfg, tiny_engine_weights)
    out1 = warm.generate([turn1], greedy)[0]
    turn2 = turn1 + list(out1.output_token_ids) + [5, 6, 7]
    hit = warm.generate([turn2], greedy)[0]
    cold = engine(tiny_cfg, tiny_engine_weights)
    miss = cold.generate([turn2], greedy)[0]
    assert hit.num_cached_prefix_tokens >= 24  # turn 1 and part of its output were reused
    assert miss.num_cached_prefix_tokens == 0
    assert hit.output_token_ids == miss.output_token_ids


def test_new_weights_invalidate_prefix_cache(tiny_cfg, tiny_engine_weights) -> None:
    """After load_weights, KV computed under the old version is never matched."""
    e = engine(tiny_cfg, tiny_engine_weights)
    prompt = list(range(30, 50))
    e.generate([prompt], SamplingParams(temperature=0, max_new_tokens=2))
    assert e.generate([prompt], SamplingParams(max_new_tokens=2))[0].num_cached_prefix_tokens
    e.load_weights(tiny_engine_weights, version=2)
    assert e.generate([prompt], SamplingParams(max_new_tokens=2))[0].num_cached_prefix_tokens == 0


def _seq(tokens: list[int]) -> Sequence:
    return Sequence("s", list(tokens), len(tokens), SP(max_new_tokens=1), 0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "free"]), st.lists(st.integers(0, 3), min_size=1, max_size=20)
        ),
        min_size=1,
        max_size=30,
    )
)
def test_block_manager_invariants(ops) -> None:
    """Ref counts, free list and hash map stay consistent under any admit/grow/free order."""
    bm = BlockManager(num_blocks=12, block_size=4)
    live: list[Sequence] = []
    for op, tokens in ops:
        if op == "add":
            seq = _seq(tokens)
            bm.admit(seq)
            assert seq.num_computed_tokens < seq.num_tokens
            if bm.grow(seq, seq.num_tokens):
                seq.num_computed_tokens = seq.num_tokens
                bm.register_full_blocks(seq)
                live.append(seq)
            else:
                bm.free_seq(seq)
        elif live:
            bm.free_seq(live.pop(0))
        bm.check_invariants(full=True)
        refs = {}
        for s in live:
            for b in s.block_table:
                refs[b] = refs.get(b, 0) + 1
        assert all(bm.blocks[b].ref_count == n for b, n in refs.items())
        for h, b in bm.hash_to_block.items():
            assert bm.blocks[b].hash == h
    for s in live:
        bm.free_seq(s)
    assert bm.num_free_blocks == 12


def test_eviction_prefers_unhashed_then_lru() -> None:
    """Free blocks without content go first; cached blocks are evicted oldest-freed first."""
    bm = BlockManager(num_blocks=4, block_size=2)
    a = _seq([1, 2, 3, 4, 9])  # two full blocks + one partial
    bm.admit(a)
    bm.grow(a, 5)
    a.num_computed_tokens = 5
    bm.register_full_blocks(a)
    bm.free_seq(a)
    assert len(bm.hash_to_block) == 2
    b = _seq([7, 7])
    bm.admit(b)
    bm.grow(b, 2)  # takes the partial (unhashed) block or the untouched one, not a cached one
    assert len(bm.hash_to_block) == 2
    c = _seq([1, 2, 3, 4, 5])
    bm.admit(c)
    assert c.num_cached_prefix_tokens == 4
