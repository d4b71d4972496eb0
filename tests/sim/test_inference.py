"""Simulated inference workers: hand-computed cases (paper-level acceptance) and an
iteration-by-iteration reference that the analytical worker must match exactly."""

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_toys import toy

from pearl.control.state import Role
from pearl.sim.hardware import HardwareParams, WorkerHardware
from pearl.sim.inference import InferenceWorker
from pearl.sim.inference_types import CompletionKind, Phase, Request, WorkerConfig
from pearl.specs import get_gpu, get_model

H8 = WorkerHardware(get_model("qwen3-8b"), get_gpu("h100-sxm"))


def run(worker, submissions):
    """Drive one worker like the event loop does; returns completions in time order.

    Checks that no completion comes late: none ends before the wake-up time the worker
    asked for (`next_change_time_s` never overshoots a completion)."""
    pending = deque(sorted(submissions, key=lambda x: x[0]))
    out = []
    while True:
        wake = worker.next_change_time_s()
        t_next = min(pending[0][0] if pending else float("inf"), wake)
        if t_next == float("inf"):
            return out
        done = worker.advance(t_next)
        assert all(c.t_end_s >= wake for c in done), "a completion was reported late"
        out += done
        while pending and pending[0][0] <= t_next:
            worker.submit(pending.popleft()[1], t_next)


# -- hand-computed cases ---------------------------------------------------------------


def test_one_request_alone_on_one_worker():
    """Prefill of the whole prompt (samples token 1), then 99 decode steps, by hand."""
    w = InferenceWorker("w", toy())
    [c] = run(w, [(0.0, Request(7, 0, 1000, 100))])
    prefill = 0.220022  # see test_hardware: compute-bound, 2.20022e11 flops at 1e12
    # decode step n reads weights 202e6 B + KV 8000 * (1000 + n + 1) B at 1e11 B/s, n = 0..98
    decode = sum((202e6 + 8000 * (1000 + n + 1)) / 1e11 for n in range(99))
    assert c.t_prefill_end_s == pytest.approx(prefill, rel=1e-12)
    assert c.t_decode_end_s == pytest.approx(prefill + decode, rel=1e-12)
    assert (c.generated_tokens, c.decode_steps, c.new_prefill_tokens) == (100, 99, 1000)
    assert c.kind == CompletionKind.DECODE and c.finished and c.cached_prefix_tokens == 0
    s = w.take_stats(c.t_decode_end_s)
    assert s.num_iterations == 100 and s.prefill_tokens == 1000 and s.decode_tokens == 99
    assert s.busy_s == pytest.approx(c.t_decode_end_s)
    assert s.prefill_busy_s == pytest.approx(prefill)


def test_prefill_interrupts_decode():
    """A prompt arriving mid-decode shares (and lengthens) one iteration of the decode:
    the decoding request finishes later by exactly (mixed - decode-only) iteration time."""
    cfg = WorkerConfig(max_batched_tokens=4096)
    alone = run(InferenceWorker("w", toy(), config=cfg), [(0.0, Request(1, 0, 1000, 200))])[0]
    w = InferenceWorker("w", toy(), config=cfg)
    t_arr = 0.3  # during A's decode (its prefill ends at 0.220022)
    a, b = run(w, [(0.0, Request(1, 0, 1000, 200)), (t_arr, Request(2, 0, 3000, 10))])
    assert (a.traj_id, b.traj_id) == (1, 2) or (b.traj_id, a.traj_id) == (1, 2)
    a, b = sorted([a, b], key=lambda c: c.traj_id)
    hw = toy()
    # B joins at the first boundary after t_arr: A's decode steps are (202e6+8000*(1001+n))/1e11
    t, n = alone.t_prefill_end_s, 0
    while t < t_arr:
        t += hw.decode_step_time_s(1, 1000 + n)
        n += 1
    assert b.t_prefill_start_s == pytest.approx(t, rel=1e-12)
    # the mixed iteration: B's 3000-token prompt (one chunk) + A's decode token at 1000+n
    mixed = hw.iteration_time_s(
        num_prefill_tokens=3000 + 1,
        prefill_pairs=3000 * 3001 / 2,
        num_prefill_logits=1,
        num_decode=0,
    )
    mixed = (2e8 * 3001 + 2e6 * 2 + 4e4 * (3000 * 3001 / 2 + 1000 + n)) / 1e12
    assert b.t_prefill_end_s - b.t_prefill_start_s == pytest.approx(mixed, rel=1e-12)
    extra = mixed - hw.decode_step_time_s(1, 1000 + n)
    # B then decodes 9 more tokens beside A: both decode steps read both contexts
    both = sum(hw.decode_step_time_s(2, 1000 + n + 1 + 3000 + 2 * j) for j in range(9))
    alone_same = sum(hw.decode_step_time_s(1, 1000 + n + 1 + j) for j in range(9))
    assert a.t_decode_end_s == pytest.approx(alone.t_decode_end_s + extra + both - alone_same)
    assert a.t_decode_end_s > alone.t_decode_end_s + 0.1  # a 3000-token prefill stalls A


def test_chunked_prefill_splits_a_long_prompt_under_the_budget():
    """A 10,000-token prompt with a 4,096-token budget takes three iterations (4096, 4096,
    1808), each timed with its position, the last one sampling the first token."""
    hw = toy()
    w = InferenceWorker("w", hw, config=WorkerConfig(max_batched_tokens=4096))
    [c] = run(w, [(0.0, Request(1, 0, 10_000, 1))])
    assert c.t_prefill_end_s == pytest.approx(hw.prefill_time_s(10_000, chunk_tokens=4096))
    assert c.decode_steps == 0 and c.generated_tokens == 1
    assert w.take_stats(c.t_end_s).num_iterations == 3


def test_kv_transfer_between_prefill_and_decode_workers():
    """Disaggregated turn: prefill worker (samples token 1) -> KV transfer -> decode worker."""
    p = HardwareParams(
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        iteration_overhead_s=0.0,
        per_seq_overhead_s=0.0,
        activation_reserve_bytes=0.0,
        transfer_latency_s=0.001,
        inter_node_bytes_per_s=25e9,
    )
    hw = toy(params=p)
    pw = InferenceWorker("p", hw, Role.PREFILL)
    dw = InferenceWorker("d", hw, Role.DECODE)
    [pc] = run(pw, [(0.0, Request(3, 0, 2000, 50))])
    assert pc.kind == CompletionKind.PREFILL and not pc.finished
    assert pc.generated_tokens == 1 and pc.prompt_tokens == 2000
    assert pc.t_prefill_end_s == pytest.approx(hw.prefill_time_s(2000))
    xfer = hw.kv_transfer_time_s(pc.prompt_tokens)
    assert xfer == pytest.approx(0.001 + 2000 * 8000 / 25e9)
    t_ready = pc.t_prefill_end_s + xfer
    req = Request(3, 0, 2000, 50, generated_tokens=pc.generated_tokens, t_queued_s=0.0)
    [dc] = run(dw, [(t_ready, req)])
    assert dc.kind == CompletionKind.DECODE and dc.new_prefill_tokens == 0
    assert dc.t_decode_start_s == pytest.approx(t_ready)
    steps = sum(hw.decode_step_time_s(1, 2001 + j) for j in range(49))
    assert dc.t_decode_end_s == pytest.approx(t_ready + steps)
    assert dc.generated_tokens == 50 and dc.decode_steps == 49 and dc.t_queued_s == 0.0
    # the prefill worker keeps the prompt as a cached prefix; the decode worker keeps nothing
    assert pw.holds_prefix(3) == 2000 and dw.holds_prefix(3) == 0


def test_prefix_cache_hit_vs_miss():
    """Turn 2 routed back to the worker that holds turn 1's context prefills only the new
    tokens; on another worker it pays the full context. Hits are counted, not configured."""
    hw = toy()
    w1, w2 = InferenceWorker("a", hw), InferenceWorker("b", hw)
    [c1] = run(w1, [(0.0, Request(5, 0, 3000, 100))])
    held = w1.holds_prefix(5)
    assert held == 3000 + 99  # prompt + written decode tokens (the last sampled one is not)
    ctx2 = 3000 + 100 + 400  # + generated + observation
    t2 = c1.t_decode_end_s + 2.0
    [hit] = run(w1, [(t2, Request(5, 1, ctx2, 10))])
    [miss] = run(w2, [(t2, Request(5, 1, ctx2, 10))])
    assert hit.cached_prefix_tokens == held and hit.new_prefill_tokens == ctx2 - held
    assert miss.cached_prefix_tokens == 0 and miss.new_prefill_tokens == ctx2
    assert hit.t_prefill_end_s - t2 == pytest.approx(hw.prefill_time_s(ctx2 - held, held))
    assert miss.t_prefill_end_s - t2 == pytest.approx(hw.prefill_time_s(ctx2))
    assert miss.t_prefill_end_s - t2 > 5 * (hit.t_prefill_end_s - t2)
    assert (w1.cache.num_lookups, w1.cache.num_hits, w1.cache.hit_tokens) == (2, 1, held)
    assert (w2.cache.num_lookups, w2.cache.num_hits) == (1, 0)
    # the router may also force a full prefill on the worker that holds the prefix
    w3 = InferenceWorker("c", hw)
    run(w3, [(0.0, Request(5, 0, 3000, 100))])
    [forced] = run(w3, [(t2, Request(5, 1, ctx2, 10, full_prefill=True))])
    assert forced.cached_prefix_tokens == 0 and forced.new_prefill_tokens == ctx2


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
    p = HardwareParams(
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        iteration_overhead_s=0.0,
        per_seq_overhead_s=0.0,
        activation_reserve_bytes=9e9 - 204e6 - 8000 * 6000,
    )
    hw = toy(params=p)
    assert hw.kv_capacity_tokens == 6000
    w = InferenceWorker("w", hw, config=WorkerConfig(kv_watermark_fraction=0.0))
    done = run(w, [(0.0, Request(1, 0, 2000, 1500)), (0.0, Request(2, 0, 2000, 1500))])
    assert len(done) == 2 and w.stats.num_preemptions >= 1
    by = {c.traj_id: c for c in done}
    assert by[2].num_preemptions >= 1 and by[2].new_prefill_tokens > 2000
    assert all(c.generated_tokens == 1500 for c in done)
    assert by[1].t_decode_end_s < by[2].t_decode_end_s


def test_admission_waits_for_kv_room():
    """A prompt that does not fit next to a running request waits (FIFO) until it finishes."""
    p = HardwareParams(
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        iteration_overhead_s=0.0,
        per_seq_overhead_s=0.0,
        activation_reserve_bytes=9e9 - 204e6 - 8000 * 6000,
    )
    w = InferenceWorker("w", toy(params=p), config=WorkerConfig(kv_watermark_fraction=0.0))
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


# -- the analytical worker against an iteration-by-iteration reference ---------------------


def reference(hw, role, cfg, submissions, cap=None):
    """Naive simulation: one iteration at a time, the same rules, including the KV pool of
    `cap` tokens (default: the hardware's): LRU prefixes evicted only when needed, FIFO
    admission that evicts nothing in vain, preemption of the latest admitted request."""
    from collections import OrderedDict

    cap = hw.kv_capacity_tokens if cap is None else cap
    watermark = -(-cfg.kv_watermark_fraction * cap // 1)
    limit = int(cfg.prefix_cache_fraction * cap)
    pending = deque(sorted(submissions, key=lambda x: x[0]))
    waiting, prefilling, decoding, out = deque(), [], [], {}
    cache = OrderedDict()
    kv = {"active": 0, "admits": 0}
    budget0 = cfg.prefill_max_batched_tokens if role == Role.PREFILL else cfg.max_batched_tokens

    def free():
        return cap - kv["active"] - sum(cache.values())

    def evict(amount):
        freed = 0
        while freed < amount and cache:
            freed += cache.popitem(last=False)[1]

    def put(traj, tokens):
        cache.pop(traj, None)
        if role == Role.DECODE or tokens > limit:
            return
        cache[traj] = tokens
        if sum(cache.values()) > limit:
            evict(sum(cache.values()) - limit)

    def finish(s, t):
        kv["active"] -= s["kv"]
        out[(s["r"].traj_id, s["r"].turn)] = (t, s["gen"], s["cached"], s["pre"])
        put(s["r"].traj_id, s["kv"])

    t = 0.0
    while pending or waiting or prefilling or decoding:
        if not (waiting or prefilling or decoding):
            t = max(t, pending[0][0])
        while pending and pending[0][0] <= t:
            r = pending.popleft()[1]
            waiting.append(
                dict(
                    r=r,
                    prompt=r.prompt_tokens,
                    gen=r.generated_tokens,
                    done=0,
                    kv=0,
                    cached=0,
                    pre=0,
                    ready=role == Role.DECODE,
                )
            )
        if decoding and free() < len(decoding):  # room for one step of growth
            evict(len(decoding) - free())
            while free() < len(decoding) and (decoding or prefilling):
                v = max(decoding + prefilling, key=lambda x: x["no"])
                (decoding if v in decoding else prefilling).remove(v)
                kv["active"] -= v["kv"]
                v.update(
                    prompt=v["r"].context_tokens + v["gen"],
                    ready=False,
                    kv=0,
                    done=0,
                    cached=0,
                    pre=v["pre"],
                    preempted=True,
                )
                waiting.appendleft(v)
        budget = budget0 - len(decoding)
        chunks = []
        for s in prefilling:
            if budget <= 0:
                break
            n = min(s["prompt"] - s["done"], budget)
            chunks.append((s, n))
            budget -= n
        while waiting and budget > 0 and len(prefilling) + len(decoding) < cfg.max_num_seqs:
            s = waiting[0]
            need = s["prompt"] + 1 + watermark
            if free() + sum(cache.values()) < need:
                break
            waiting.popleft()
            own = cache.pop(s["r"].traj_id, 0)
            if free() < need:
                evict(need - free())
            kv["admits"] += 1
            s.update(no=kv["admits"], kv=s["prompt"])
            kv["active"] += s["prompt"]
            if s["ready"]:
                s.update(done=s["prompt"], cached=0)
                decoding.append(s)
                budget -= 1
                continue
            s["cached"] = 0 if s["r"].full_prefill else min(own, s["prompt"] - 1)
            s["done"] = s["cached"]
            prefilling.append(s)
            n = min(s["prompt"] - s["done"], budget)
            chunks.append((s, n))
            budget -= n
        ctx = sum(s["kv"] for s in decoding)
        dt = hw.iteration_time_s(
            num_prefill_tokens=sum(n for _, n in chunks),
            prefill_pairs=sum(hw.chunk_pairs(s["done"], n) for s, n in chunks),
            prefill_prefix_tokens=sum(s["done"] for s, _ in chunks),
            num_prefill_logits=sum(s["done"] + n >= s["prompt"] for s, n in chunks),
            num_decode=len(decoding),
            decode_context_tokens=ctx,
        )
        t += dt
        for s in decoding:
            s["gen"] += 1
            s["kv"] += 1
        kv["active"] += len(decoding)
        for s, n in chunks:
            s["done"] += n
            s["pre"] += n
        for s in sorted(decoding, key=lambda x: x["no"]):
            if s["gen"] >= s["r"].decode_tokens:
                decoding.remove(s)
                finish(s, t)
        for s, _ in chunks:
            if s["done"] >= s["prompt"]:
                prefilling.remove(s)
                s["gen"] += 1
                if role == Role.PREFILL or s["gen"] >= s["r"].decode_tokens:
                    finish(s, t)
                else:
                    decoding.append(s)
    return out


request_lists = st.lists(
    st.tuples(
        st.floats(0.0, 3.0),  # submit time
        st.integers(0, 5),  # trajectory (repeats give prefix-cache hits)
        st.integers(1, 12_000),  # context tokens
        st.integers(1, 400),  # decode tokens
        st.integers(0, 3),  # generated already (resumed)
        st.booleans(),  # full prefill
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=120, deadline=None)
@given(
    reqs=request_lists,
    role=st.sampled_from([Role.COLOCATED, Role.PREFILL, Role.DECODE]),
    budget=st.sampled_from([512, 2048, 8192]),
    max_seqs=st.integers(1, 8),
    model=st.sampled_from(["qwen3-8b", "qwen3-30b-a3b"]),
)
def test_analytical_worker_matches_iteration_by_iteration_reference(
    reqs, role, budget, max_seqs, model
):
    """Same completions (time, tokens, cache hits) as stepping every single iteration."""
    hw = WorkerHardware(get_model(model), get_gpu("h100-sxm"), tp=2)
    cfg = WorkerConfig(
        max_batched_tokens=budget, prefill_max_batched_tokens=budget, max_num_seqs=max_seqs
    )
    subs = []
    for i, (t, traj, ctx, dec, gen, full) in enumerate(reqs):
        dec = max(dec, gen + 1)
        subs.append(
            (round(t, 3), Request(traj, i, ctx, dec, generated_tokens=gen, full_prefill=full))
        )
    expected = reference(hw, role, cfg, subs)
    got = run(InferenceWorker("w", hw, role, cfg), subs)
    assert len(got) == len(subs)
    assert [c.t_end_s for c in got] == sorted(c.t_end_s for c in got)
    for c in got:
        t, gen, cached, pre = expected[(c.traj_id, c.turn)]
        assert c.t_end_s == pytest.approx(t, rel=1e-9, abs=1e-9)
        assert (c.generated_tokens, c.cached_prefix_tokens, c.new_prefill_tokens) == (
            gen,
            cached,
            pre,
        )


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


def test_transferred_kv_can_land_on_a_colocated_worker():
    """kv_ready=True: a colocated worker decodes a transferred request without prefill."""
    w = InferenceWorker("w", toy())
    w.submit(Request(1, 0, 2000, 20, generated_tokens=1), 0.0, kv_ready=True)
    [c] = run(w, [])
    assert c.new_prefill_tokens == 0 and c.t_prefill_start_s is None and c.decode_steps == 19


def test_late_submit_buffers_completions_and_reports_them_next():
    """A submit after a completion's time (without advance) keeps that completion for the
    next advance, and next_change_time_s points at it."""
    w2 = InferenceWorker("w2", toy())
    w2.submit(Request(1, 0, 1000, 5), 0.0)
    t_done = run(InferenceWorker("w3", toy()), [(0.0, Request(1, 0, 1000, 5))])[0].t_end_s
    w2.submit(Request(2, 0, 500, 5), t_done + 1.0)  # no advance in between
    assert w2.next_change_time_s() == pytest.approx(t_done)
    [c] = w2.advance(t_done + 1.0)
    assert c.traj_id == 1 and c.t_end_s == pytest.approx(t_done)


def test_next_change_skips_internal_boundaries_it_can_predict():
    """A prompt that finishes and goes on decoding is no event for the world: the first
    wake-up asked for is the turn's end, and advancing there yields the completion."""
    w = InferenceWorker("w", toy())
    w.submit(Request(1, 0, 1000, 50), 0.0)
    t = w.next_change_time_s()
    [c] = w.advance(t)
    assert c.t_end_s == t and c.t_prefill_end_s < t
    # a prompt arriving while another request decodes: still one wake-up per completion
    w.submit(Request(2, 0, 3000, 40), t)
    w.submit(Request(3, 0, 500, 80), t)
    wakes, done = 0, []
    while (t := w.next_change_time_s()) < float("inf"):
        wakes += 1
        done += w.advance(t)
    assert [c.traj_id for c in done] == [2, 3] and wakes == 2


@settings(max_examples=150, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(
            st.floats(0.0, 2.0),
            st.integers(0, 5),
            st.integers(1, 4000),
            st.integers(1, 800),
            st.integers(0, 2),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
    cap=st.integers(5000, 30_000),
    role=st.sampled_from([Role.COLOCATED, Role.PREFILL, Role.DECODE]),
    budget=st.sampled_from([256, 1024, 4096]),
    max_seqs=st.integers(1, 8),
)
def test_analytical_worker_matches_reference_under_kv_pressure(reqs, cap, role, budget, max_seqs):
    """With a small KV pool (evictions, blocked admissions, preemptions with recompute)
    the segment worker still matches the iteration-by-iteration reference exactly."""
    reserve = 9e9 - 204e6 - 8000 * cap
    hw = toy(params=HardwareParams(activation_reserve_bytes=reserve))
    assert hw.kv_capacity_tokens == cap
    cfg = WorkerConfig(
        max_batched_tokens=budget, prefill_max_batched_tokens=budget, max_num_seqs=max_seqs
    )
    w = InferenceWorker("w", hw, role, cfg)
    subs = []
    for i, (t, traj, ctx, dec, gen, full) in enumerate(reqs):
        r = Request(traj, i, ctx, max(dec, gen + 1), generated_tokens=gen, full_prefill=full)
        if r.prompt_tokens + r.decode_tokens + 2 + cap // 100 <= cap:
            subs.append((round(t, 3), r))
    expected = reference(hw, role, cfg, subs)
    got = run(w, subs)
    assert len(got) == len(subs) == len(expected)
    for c in got:
        t, gen, cached, pre = expected[(c.traj_id, c.turn)]
        assert c.t_end_s == pytest.approx(t, rel=1e-9, abs=1e-9)
        assert (c.generated_tokens, c.cached_prefix_tokens, c.new_prefill_tokens) == (
            gen,
            cached,
            pre,
        )
