"""Simulated inference workers: the analytical (segment) worker must match an
iteration-by-iteration reference exactly, with and without KV pressure."""

import dataclasses
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_toys import toy

from pearl.control.state import Role
from pearl.sim.physics.inference import InferenceWorker
from pearl.sim.physics.inference_types import ADMISSIONS, Request, WorkerConfig
from pearl.sim.physics.iteration import HardwareParams, WorkerHardware
from pearl.specs import get_gpu, get_model

from ._inference_helpers import budget_config, request_lists, run, submissions


def reference(hw, role, cfg, submissions, cap=None):
    """Naive simulation: one iteration at a time, the same rules, including the KV pool of
    `cap` tokens (default: the hardware's): LRU prefixes evicted only when needed, FIFO
    admission that evicts nothing in vain, preemption of the latest admitted request, whose
    computed KV waits as an idle prefix it can reuse when readmitted."""
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

    def evict(amount):  # LRU entries, each from its tail
        while amount > 0 and cache:
            traj, tokens = next(iter(cache.items()))
            if tokens <= amount:
                del cache[traj]
            else:
                cache[traj] = tokens - amount
            amount -= min(tokens, amount)

    def put(traj, tokens, *, any_role=False):
        if role == Role.DECODE and not any_role:
            return  # a decode worker keeps a finished request's KV for nothing
        cache.pop(traj, None)
        if tokens <= 0 or tokens > limit:
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
        chunk_kv = cfg.admission == "first_chunk"
        preempted = False
        while True:  # this iteration's chunks and growth; preempt the latest until they fit
            budget = budget0 - len(decoding)
            chunks = []
            for s in prefilling:
                if budget <= 0:
                    break
                n = min(s["prompt"] - s["done"], budget)
                chunks.append((s, n))
                budget -= n
            grow = len(decoding) + (sum(n for _, n in chunks) if chunk_kv else 0)
            if free() < grow:
                evict(grow - free())
            if free() >= grow:
                break
            v = max(decoding + prefilling, key=lambda x: x["no"])
            computed = v["kv"] if v in decoding else v["done"]
            (decoding if v in decoding else prefilling).remove(v)
            kv["active"] -= v["kv"]
            put(v["r"].traj_id, computed, any_role=True)  # kept as an idle prefix
            v.update(
                prompt=v["r"].context_tokens + v["gen"],
                ready=False,
                kv=0,
                done=0,
                pre=v["pre"],
                preempted=True,
            )
            waiting.appendleft(v)
            preempted = True
        if preempted and (prefilling or decoding):
            budget = 0  # a step that preempts admits nothing
        committed = grow
        while waiting and budget > 0 and len(prefilling) + len(decoding) < cfg.max_num_seqs:
            s = waiting[0]
            own = cache.get(s["r"].traj_id, 0)
            reuse = s.get("preempted") or not s["r"].full_prefill
            cached = 0 if s["ready"] or not reuse else min(own, s["prompt"] - 1)
            if chunk_kv and not s["ready"]:
                alloc, adds = cached, min(s["prompt"] - cached, budget)
            else:
                alloc, adds = s["prompt"], 1 if s["ready"] else 0
            need = alloc + max(adds, 1) + watermark + committed
            if free() + sum(cache.values()) < need:
                break
            waiting.popleft()
            cache.pop(s["r"].traj_id, None)
            if free() < need:
                evict(need - free())
            kv["admits"] += 1
            s.update(no=kv["admits"], kv=alloc)
            kv["active"] += alloc
            committed += adds
            if s["ready"]:
                s.update(done=s["prompt"], cached=0)
                decoding.append(s)
                budget -= 1
                continue
            if not s.get("preempted"):
                s["cached"] = cached  # the first admission's reuse is the turn's
            s["done"] = cached
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
            if chunk_kv:
                s["kv"] += n
                kv["active"] += n
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


@settings(max_examples=120, deadline=None)
@given(
    reqs=request_lists,
    role=st.sampled_from([Role.COLOCATED, Role.PREFILL, Role.DECODE]),
    budget=st.sampled_from([512, 2048, 8192]),
    max_seqs=st.integers(1, 8),
    model=st.sampled_from(["qwen3-8b", "qwen3-30b-a3b"]),
    admission=st.sampled_from(ADMISSIONS),
)
def test_analytical_worker_matches_iteration_by_iteration_reference(
    reqs, role, budget, max_seqs, model, admission
):
    """Same completions (time, tokens, cache hits) as stepping every single iteration."""
    hw = WorkerHardware(get_model(model), get_gpu("h100-sxm"), tp=2)
    cfg = dataclasses.replace(budget_config(budget, max_seqs), admission=admission)
    subs = submissions(reqs)
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


@settings(max_examples=250, deadline=None)
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
    admission=st.sampled_from(ADMISSIONS),
)
def test_analytical_worker_matches_reference_under_kv_pressure(
    reqs, cap, role, budget, max_seqs, admission
):
    """With a small KV pool (evictions, blocked admissions, preemptions with recompute)
    the segment worker still matches the iteration-by-iteration reference exactly, with
    whole-prompt and first-chunk admission."""
    reserve = 9e9 - 204e6 - 8000 * cap
    hw = toy(params=HardwareParams(activation_reserve_bytes=reserve))
    assert hw.kv_capacity_tokens == cap
    cfg = WorkerConfig(
        max_batched_tokens=budget,
        prefill_max_batched_tokens=budget,
        max_num_seqs=max_seqs,
        admission=admission,
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
