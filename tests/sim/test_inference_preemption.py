"""Simulated inference workers under interruption and a bounded KV pool: preemption keeps
generated tokens and the cached KV, admission waits for room, LRU eviction of cached
prefixes, role changes, and token/KV conservation at any interrupt time."""

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_toys import toy

from pearl.control.state import Role
from pearl.sim.physics.inference import InferenceWorker
from pearl.sim.physics.inference_types import Phase, Request, WorkerConfig
from pearl.sim.physics.iteration import HardwareParams, WorkerHardware
from pearl.specs import get_gpu, get_model

from ._inference_helpers import request_lists, run

H8 = WorkerHardware(get_model("qwen3-8b"), get_gpu("h100-sxm"))


def ideal_toy(kv_tokens: int) -> WorkerHardware:
    """The toy hardware at peak speed with no fixed costs, holding `kv_tokens` of KV."""
    p = HardwareParams(
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        iteration_overhead_s=0.0,
        per_seq_overhead_s=0.0,
        activation_reserve_bytes=9e9 - 204e6 - 8000 * kv_tokens,
    )
    return toy(params=p)


def test_preemption_mid_decode_keeps_the_generated_prefix():
    """interrupt_all mid-decode returns each request's generated tokens; resuming elsewhere
    pays one full prefill of context + generated and generates only the rest."""
    hw = toy()
    w = InferenceWorker("w", hw)
    w.submit(Request(9, 2, 1000, 300), 0.0)
    prefill = hw.prefill_time_s(1000)
    t_int = prefill + 0.05
    assert w.advance(t_int) == []
    n_done = hw.decode_steps_within(1, 1000, t_int - prefill, 10_000)[0]
    [p] = w.interrupt_all(t_int)
    assert p.phase == Phase.DECODE and p.generated_tokens == 1 + n_done and n_done > 5
    assert (p.traj_id, p.turn, p.context_tokens, p.decode_tokens) == (9, 2, 1000, 300)
    assert w.num_in_flight == 0 and w.kv_used_tokens == 0 and w.next_change_time_s() == float("inf")
    other = InferenceWorker("v", hw)
    [c] = run(other, [(t_int, p.resume())])
    assert c.new_prefill_tokens == 1000 + p.generated_tokens and c.cached_prefix_tokens == 0
    assert c.generated_tokens == 300 and c.decode_steps == 300 - p.generated_tokens - 1
    assert c.t_prefill_end_s - t_int == pytest.approx(hw.prefill_time_s(1000 + p.generated_tokens))


def test_interrupt_returns_queued_and_prefilling_requests_too():
    """Every in-flight request comes back, whatever its phase; nothing is generated twice."""
    w = InferenceWorker("w", toy(), config=WorkerConfig(max_batched_tokens=2048, max_num_seqs=2))
    for i in range(4):
        w.submit(Request(i, 0, 6000, 50), 0.0)
    w.next_change_time_s()
    parts = w.interrupt_all(0.001)
    assert sorted(p.traj_id for p in parts) == [0, 1, 2, 3]
    assert {p.phase for p in parts} == {Phase.PREFILL, Phase.QUEUED}
    assert all(p.generated_tokens == 0 for p in parts)


def test_kv_pressure_preempts_and_recomputes_keeping_generated_tokens():
    """When decodes outgrow the KV pool the latest admitted request is preempted, recomputes
    its prompt (context + generated) later, and still generates exactly its tokens."""
    hw = ideal_toy(6000)
    assert hw.kv_capacity_tokens == 6000
    w = InferenceWorker("w", hw, config=WorkerConfig(kv_watermark_fraction=0.0))
    done = run(w, [(0.0, Request(1, 0, 2000, 1500)), (0.0, Request(2, 0, 2000, 1500))])
    assert len(done) == 2 and w.stats.num_preemptions >= 1
    by = {c.traj_id: c for c in done}
    assert by[2].num_preemptions >= 1 and by[2].new_prefill_tokens > 2000
    assert all(c.generated_tokens == 1500 for c in done)
    assert by[1].t_decode_end_s < by[2].t_decode_end_s


def test_a_preempted_request_reuses_the_kv_it_computed_unless_evicted():
    """A preempted request's KV waits as its idle prefix (vLLM V1 keeps its blocks cached),
    so readmitted it recomputes only the tail that decode growth evicted meanwhile; with
    prefix caching off it recomputes all of context + generated tokens."""
    hw = ideal_toy(6000)
    subs = [(0.0, Request(1, 0, 2000, 1500)), (0.0, Request(2, 0, 2000, 1500))]
    on = InferenceWorker("w", hw, config=WorkerConfig(admission="prompt"))
    kept = {c.traj_id: c for c in run(on, subs)}
    off = InferenceWorker("w", hw, config=WorkerConfig(admission="prompt", prefix_caching=False))
    lost = {c.traj_id: c for c in run(off, subs)}
    assert kept[2].num_preemptions == lost[2].num_preemptions == 1
    # the readmitted prompt is context + generated; what it did not find cached it prefilled
    again = lost[2].new_prefill_tokens - 2000  # all of it: nothing was kept
    assert off.cache.readmitted_hit_tokens == 0 and again > 2000
    reused = on.cache.readmitted_hit_tokens
    assert on.cache.num_readmissions == 1 and 0 < reused < again
    assert kept[2].new_prefill_tokens == 2000 + again - reused
    assert kept[2].cached_prefix_tokens == 0  # the turn's own reuse: none
    assert kept[2].t_decode_end_s < lost[2].t_decode_end_s


def test_first_chunk_admission_starts_a_prompt_that_whole_prompt_admission_holds_back():
    """With `admission="first_chunk"` (vLLM V1 up to 0.11) a request is admitted once its
    first chunk fits, so its prefill starts beside a running request whose whole prompt
    leaves no room for its own; the KV then runs out and it is preempted, keeping what it
    computed. With whole-prompt admission it waits for the first request to finish."""
    hw = ideal_toy(8000)
    subs = [(0.0, Request(1, 0, 5000, 800)), (0.0, Request(2, 0, 5000, 100))]
    by, by_cache = {}, {}
    for admission in ("prompt", "first_chunk"):
        cfg = WorkerConfig(max_batched_tokens=2048, admission=admission)
        w = InferenceWorker("w", hw, config=cfg)
        by[admission] = {c.traj_id: c for c in run(w, subs)}
        by_cache[admission] = w.cache
        assert w.kv_used_tokens == 0
        assert (by[admission][1].generated_tokens, by[admission][2].generated_tokens) == (800, 100)
    whole, chunked = by["prompt"], by["first_chunk"]
    assert whole[2].t_prefill_start_s == pytest.approx(whole[1].t_decode_end_s)
    assert whole[2].num_preemptions == 0
    assert whole[2].new_prefill_tokens == 5000
    # its first chunk shared an iteration with the first request's last one (which ends
    # later for it), then it was preempted; readmitted, it reused that chunk's KV
    assert chunked[1].t_prefill_end_s > whole[1].t_prefill_end_s
    assert chunked[2].num_preemptions == 1
    # the budget left by 5000 - 2 x 2048
    assert by_cache["first_chunk"].readmitted_hit_tokens == 2048 - 904
    assert chunked[2].new_prefill_tokens == 5000  # nothing of it was evicted meanwhile


def test_whole_prompt_admission_waits_for_kv_room():
    """A prompt that does not fit next to a running request waits (FIFO) until it finishes
    where admission reserves the whole prompt."""
    w = InferenceWorker("w", ideal_toy(6000), config=WorkerConfig(admission="prompt"))
    a, b = run(w, [(0.0, Request(1, 0, 3000, 20)), (0.0, Request(2, 0, 3000, 20))])
    assert b.t_prefill_start_s == pytest.approx(a.t_decode_end_s)
    assert w.stats.num_preemptions == 0


def test_request_larger_than_the_kv_pool_is_rejected():
    w = InferenceWorker("w", WorkerHardware(get_model("qwen3-30b-a3b"), get_gpu("h100-sxm")))
    with pytest.raises(ValueError, match="KV capacity"):
        w.submit(Request(1, 0, w.kv_capacity_tokens, 10), 0.0)


def test_role_change_needs_an_empty_worker():
    w = InferenceWorker("w", toy())
    w.submit(Request(1, 0, 100, 5), 0.0)
    with pytest.raises(ValueError):
        w.set_role(Role.DECODE)
    w.interrupt_all(0.0)
    w.set_role(Role.DECODE)
    assert w.role == Role.DECODE and w.budget_tokens == 8192


def test_lru_eviction_under_pressure_lowers_the_hit_rate():
    """Many trajectories cycling through one small worker evict each other's prefixes."""
    p = HardwareParams(activation_reserve_bytes=9e9 - 204e6 - 8000 * 20_000)
    hw = toy(params=p)
    big = InferenceWorker("big", toy())
    small = InferenceWorker("small", hw)
    for w in (big, small):
        t = 0.0
        for turn in range(3):
            reqs = [(t, Request(i, turn, 3000 + 1000 * turn, 50)) for i in range(8)]
            done = run(w, reqs)
            t = max(c.t_end_s for c in done) + 1.0
    assert big.cache.num_hits == 16  # every later turn hits
    assert small.cache.num_hits < 8 and small.cache.num_evictions > 0


@settings(max_examples=40, deadline=None)
@given(reqs=request_lists, t_cut=st.floats(0.0, 4.0))
def test_interrupt_at_any_time_conserves_tokens(reqs, t_cut):
    """Completed + interrupted requests account for every submitted one, generated counts
    never exceed their targets, and KV is fully released."""
    hw = H8
    w = InferenceWorker("w", hw, config=WorkerConfig(max_batched_tokens=2048))
    subs = [
        (t, Request(traj, i, ctx, max(dec, gen + 1), generated_tokens=gen))
        for i, (t, traj, ctx, dec, gen, _) in enumerate(reqs)
    ]
    done = run(w, [s for s in subs if s[0] <= t_cut])
    # run() drains everything, so interrupt a fresh worker mid-way instead
    w = InferenceWorker("w", hw, config=WorkerConfig(max_batched_tokens=2048))
    got = []
    for t, r in sorted((s for s in subs if s[0] <= t_cut), key=lambda x: x[0]):
        got += w.advance(t)
        w.submit(r, t)
    got += w.advance(t_cut)
    parts = w.interrupt_all(t_cut)
    seen = sorted([c.turn for c in got] + [p.turn for p in parts])
    assert seen == sorted(r.turn for t, r in subs if t <= t_cut)
    assert all(c.t_end_s <= t_cut for c in got)
    full = {c.turn: c for c in done}
    for p in parts:
        assert p.generated_tokens <= full[p.turn].generated_tokens
    assert w.kv_used_tokens == 0


@settings(max_examples=60, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(
            st.floats(0.0, 2.0), st.integers(0, 4), st.integers(100, 2500), st.integers(1, 1500)
        ),
        min_size=1,
        max_size=10,
    ),
    cap=st.integers(4200, 12_000),
    role=st.sampled_from([Role.COLOCATED, Role.DECODE]),
)
def test_kv_pressure_invariants(reqs, cap, role):
    """Under KV pressure every request still completes with exactly its tokens, and the
    running KV plus cached prefixes never exceed the pool."""
    reserve = 9e9 - 204e6 - 8000 * cap
    hw = toy(params=HardwareParams(activation_reserve_bytes=reserve))
    assert hw.kv_capacity_tokens == cap
    w = InferenceWorker("w", hw, role, WorkerConfig(max_batched_tokens=1024))
    subs = sorted(
        ((round(t, 3), Request(traj, i, ctx, dec)) for i, (t, traj, ctx, dec) in enumerate(reqs)),
        key=lambda x: x[0],
    )
    pending = deque(subs)
    done = []
    while True:
        t_next = min(pending[0][0] if pending else float("inf"), w.next_change_time_s())
        if t_next == float("inf"):
            break
        done += w.advance(t_next)
        assert w.kv_used_tokens + w.cache.tokens <= cap
        while pending and pending[0][0] <= t_next:
            w.submit(pending.popleft()[1], t_next)
    assert sorted(c.turn for c in done) == list(range(len(reqs)))
    for c in done:
        assert c.generated_tokens == reqs[c.turn][3]
        if c.num_preemptions:
            assert c.new_prefill_tokens > 0
    assert w.kv_used_tokens == 0


def test_withdraw_aborts_one_request_and_the_others_finish():
    """withdraw() takes one request out mid-decode (its generated tokens come back and
    its KV stays a cached prefix), out of the prefill and the queue too; the other
    requests finish as if it had never been there, except for the iteration in progress."""
    hw = toy()
    w = InferenceWorker("w", hw)
    w.submit(Request(1, 0, 1000, 300), 0.0)
    w.submit(Request(2, 0, 1000, 300), 0.0)
    t = hw.prefill_time_s(2000) + 0.05
    assert w.advance(t) == []
    assert w.withdraw(7, t) is None  # not held here
    gen = w.withdraw(1, t)
    assert gen is not None and gen > 1
    assert w.num_in_flight == 1 and w.holds_prefix(1) > 1000
    rest = run(w, [])
    assert [c.traj_id for c in rest] == [2] and rest[0].generated_tokens == 300
    assert w.num_in_flight == 0 and w.kv_used_tokens == 0 and w.holds_prefix(2) > 1000
    # queued and prefilling requests are withdrawn before they cost anything
    v = InferenceWorker("v", hw)
    v.submit(Request(3, 0, 5000, 10), 0.0)
    assert v.withdraw(3, 0.0) == 0 and v.num_in_flight == 0
    assert v.next_change_time_s() == float("inf")
