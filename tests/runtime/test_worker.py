"""Rollout workers: serving, roles, interruption, weights; in-process and on a Ray cluster.

The first half drives `RolloutWorker` objects directly on one asyncio loop (no Ray): fast
checks of the serving logic. The second half (marked `ray`) runs the same workers as actors
on a local multi-node Ray cluster with zone-labelled nodes, and takes a preemptible node
away mid-decode. Every expected token sequence comes from a separately built reference
engine with the same seed (greedy decoding), never from a stored constant.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from pearl.control.state import Zone
from pearl.control.telemetry import TurnRecord
from pearl.runtime.engine import SamplingParams
from pearl.runtime.kv_transfer import InProcessTransport
from pearl.runtime.worker import RolloutWorker
from pearl.runtime.worker_api import EngineSpec, TurnRequest, TurnResult, collect_turn

SPEC = EngineSpec(seed=3, num_kv_blocks=512)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


def _prompt(i: int, n: int = 20) -> tuple[int, ...]:
    return tuple((7 * i + 3 * k) % 250 + 1 for k in range(n))


def _reference(prompts: list[tuple[int, ...]], sampling: SamplingParams, spec: EngineSpec = SPEC):
    """Greedy outputs of one colocated engine built like the workers' (same seed)."""
    engine = spec.build()
    return [
        tuple(o.output_token_ids) for o in engine.generate([list(p) for p in prompts], sampling)
    ]


def _worker(
    role: str, wid: str = "w", transport: InProcessTransport | None = None
) -> RolloutWorker:
    w = RolloutWorker(wid, role, SPEC, transport="in_process")
    if transport is not None:
        w.transport = transport
    return w


def _observation(turn: int) -> tuple[int, ...]:
    return tuple(100 + turn + k for k in range(5))


async def _multi_turn_disaggregated(
    prefill, decode, prefill_call, decode_call, num_trajs, num_turns
):
    """Run trajectories turn by turn: prefill -> KV handle -> decode; returns contexts."""

    async def one(i: int) -> tuple[tuple[int, ...], list[TurnResult]]:
        context, results = _prompt(i), []
        for turn in range(num_turns):
            req = TurnRequest(f"t{i}", turn, context, GREEDY)
            pre = await prefill_call(prefill, req)
            assert pre.error is None, pre.error
            res = await decode_call(decode, req, pre) if pre.needs_decode else pre.as_turn_result()
            assert res.ok, res
            results.append(res)
            context = context + res.token_ids + _observation(turn)
        return context, results

    return await asyncio.gather(*(one(i) for i in range(num_trajs)))


def _colocated_contexts(num_trajs: int, num_turns: int) -> list[tuple[int, ...]]:
    engine = SPEC.build()
    out = []
    for i in range(num_trajs):
        context = _prompt(i)
        for turn in range(num_turns):
            (res,) = engine.generate([list(context)], GREEDY)
            context = context + tuple(res.output_token_ids) + _observation(turn)
        out.append(context)
    return out


# -- in-process ---------------------------------------------------------------------------


def test_disaggregated_turns_equal_colocated_ones() -> None:
    """Prefill on one worker + KV transfer + decode on another = one colocated engine."""
    tr = InProcessTransport()
    pre, dec = _worker("prefill", "p", tr), _worker("decode", "d", tr)

    async def prefill_call(w, req):
        return await w.prefill(req)

    async def decode_call(w, req, p):
        return await w.generate(req, p)

    got = asyncio.run(_multi_turn_disaggregated(pre, dec, prefill_call, decode_call, 3, 3))
    assert [ctx for ctx, _ in got] == _colocated_contexts(3, 3)
    assert len(tr) == 0  # every payload was released once imported
    records = [r.record for _, results in got for r in results]
    assert all(isinstance(r, TurnRecord) and r.roles == ("prefill", "decode") for r in records)
    assert all(r.prefill_worker == "p" and r.decode_worker == "d" and r.kv_s >= 0 for r in records)
    assert all(r.decode_tokens == GREEDY.max_new_tokens for r in records)
    # Later turns reuse the prefill worker's prefix cache for the shared context.
    assert any(r.cached_prefix_tokens > 0 for r in records if r.turn > 0)
    turns, steps = dec.telemetry()
    assert len(turns) == 9 and steps and all(s.role == "decode" for s in steps)


def test_role_change_with_requests_in_flight_loses_none() -> None:
    """Turns admitted before a role change finish normally; new turns follow the new role."""
    w = _worker("colocated")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=40)
    prompts = [_prompt(i) for i in range(4)]

    async def run():
        tasks = [
            asyncio.create_task(w.generate(TurnRequest(f"t{i}", 0, p, sampling)))
            for i, p in enumerate(prompts)
        ]
        while w.status().num_engine_steps < 5:
            await asyncio.sleep(0.005)
        assert w.status().num_running == 4
        ms = await w.set_role("prefill")
        refused = await w.generate(TurnRequest("late", 0, prompts[0], sampling))
        pre = await w.prefill(TurnRequest("late", 0, prompts[0], sampling))
        return ms, await asyncio.gather(*tasks), refused, pre

    ms, results, refused, pre = asyncio.run(run())
    assert ms >= 0 and w.status().role == "prefill"
    assert [r.token_ids for r in results] == _reference(prompts, sampling)
    assert all(r.finish_reason == "length" for r in results)
    assert refused.error is not None and "prefill worker" in refused.error
    assert pre.needs_decode and pre.token_ids == _reference(prompts[:1], sampling)[0][:1]


def test_interrupt_keeps_prefix_and_resume_completes_it() -> None:
    """Interrupted turns return their generated prefix; resuming from it gives the same turn."""
    w = _worker("colocated")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=60)
    prompts = [_prompt(i, 30) for i in range(3)]

    async def run():
        streamed: dict[str, list[int]] = {f"t{i}": [] for i in range(3)}

        async def consume(i, p):
            req = TurnRequest(f"t{i}", 0, p, sampling)
            async for chunk in w.serve(req):
                streamed[req.traj_id].extend(chunk.token_ids)
                if chunk.finished:
                    return chunk.result

        tasks = [asyncio.create_task(consume(i, p)) for i, p in enumerate(prompts)]
        while min(len(v) for v in streamed.values()) < 5:
            await asyncio.sleep(0.002)
        returned = await w.interrupt()
        return returned, await asyncio.gather(*tasks), streamed

    returned, results, streamed = asyncio.run(run())
    assert sorted(r.traj_id for r in returned) == ["t0", "t1", "t2"]
    ref = _reference(prompts, sampling)
    for r in results:
        assert r.finish_reason == "interrupted" and r.interrupted and r.record.interrupted
        assert 5 <= len(r.token_ids) < sampling.max_new_tokens
        assert list(r.token_ids) == streamed[r.traj_id]
        assert len(r.logprobs) == len(r.token_ids)
    # Resume each turn elsewhere with one full prefill of context + prefix.
    other = _worker("colocated", "w2")

    async def resume():
        outs = []
        for i, r in enumerate(results):
            left = SamplingParams(
                temperature=0.0, max_new_tokens=sampling.max_new_tokens - len(r.token_ids)
            )
            req = TurnRequest(r.traj_id, 0, prompts[i] + r.token_ids, left, resumed=True)
            outs.append(await other.generate(req))
        return outs

    for i, (r, rest) in enumerate(zip(results, asyncio.run(resume()), strict=True)):
        assert r.token_ids + rest.token_ids == ref[i]
        assert rest.record.resumed


def test_bad_requests_get_error_replies_and_the_worker_keeps_serving() -> None:
    """Context-limit, wrong role, draining and released workers answer with an error."""
    w = _worker("colocated")
    too_long = TurnRequest("x", 0, (1,) * 3000, GREEDY)

    async def run():
        errors = [await w.generate(too_long)]
        errors.append((await w.prefill(too_long)).as_turn_result())
        await w.drain()
        errors.append(await w.generate(TurnRequest("y", 0, _prompt(0), GREEDY)))
        w.activate()
        await w.release()
        errors.append(await w.generate(TurnRequest("y", 0, _prompt(0), GREEDY)))
        await w.restore()
        ok = await w.generate(TurnRequest("y", 0, _prompt(0), GREEDY))
        return errors, ok

    errors, ok = asyncio.run(run())
    assert "context_limit" in errors[0].error and "context_limit" in errors[1].error
    assert "draining" in errors[2].error and "released" in errors[3].error
    assert all(e.finish_reason == "error" and e.record is None for e in errors)
    assert ok.ok and ok.token_ids == _reference([_prompt(0)], GREEDY)[0]
    decode = _worker("decode")
    refused = asyncio.run(decode.generate(TurnRequest("z", 0, _prompt(0), GREEDY)))
    assert "needs a prefill result" in refused.error


# -- on a Ray cluster ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from pearl.runtime.topology import LocalCluster

    c = LocalCluster(head_cpus=1, head_gpu_ids=("d0", "d1"))
    c.add_node("pre", Zone.PREEMPTIBLE, ["p0", "p1"])
    c.connect()
    yield c
    c.shutdown()


def _start(worker_id: str, role: str, gpu: str):
    from pearl.runtime.worker import start_worker

    return start_worker(worker_id, role, (gpu,), SPEC)


@pytest.fixture(scope="module")
def actors(cluster):
    """Workers for the module, started together (actor starts dominate the time): a
    (prefill, head), b (decode, preemptible node), c (colocated, head), n (colocated,
    preemptible node, kept idle as the "new worker")."""
    import ray

    handles = {"a": _start("a", "prefill", "d0"), "b": _start("b", "decode", "p0")}
    handles["c"] = _start("c", "colocated", "d1")
    handles["n"] = _start("n", "colocated", "p1")  # new: not admitted until it syncs
    from pearl.runtime.snapshots import get_registry

    handles["registry"] = get_registry()
    ray.get([h.ready.remote() for k, h in handles.items() if k != "registry"])
    ray.get(handles["registry"].versions.remote())
    return handles


@pytest.mark.ray
def test_ray_prefill_and_decode_workers_serve_multi_turn_batch(cluster, actors) -> None:
    """KV moves through the object store between actors on two nodes; tokens match."""
    import ray

    pre, dec = actors["a"], actors["b"]
    statuses = ray.get([pre.status.remote(), dec.status.remote()])
    assert statuses[0].node_id != statuses[1].node_id == cluster.node_id("pre")

    async def prefill_call(w, req):
        return await w.prefill.remote(req)

    async def decode_call(w, req, p):
        return await collect_turn(w.serve.remote(req, p), req, "b")

    got = asyncio.run(_multi_turn_disaggregated(pre, dec, prefill_call, decode_call, 4, 2))
    assert [ctx for ctx, _ in got] == _colocated_contexts(4, 2)
    turns, steps = ray.get(dec.telemetry.remote())
    assert len(turns) == 8 and all(t.kv_s is not None for t in turns)


@pytest.mark.ray
def test_ray_role_change_in_flight_and_weight_snapshot(actors) -> None:
    """An actor changes role while serving (none lost), then pulls a new weight version."""
    import ray

    from pearl.runtime.snapshots import fetch_weights, publish_weights

    w = actors["c"]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=150)
    prompts = [_prompt(i) for i in range(4)]
    reqs = [TurnRequest(f"t{i}", 0, p, sampling) for i, p in enumerate(prompts)]
    refs = [w.generate.remote(r) for r in reqs]
    while ray.get(w.status.remote()).num_engine_steps < 3:
        time.sleep(0.01)
    ray.get(w.set_role.remote("decode"))
    status = ray.get(w.status.remote())
    results = ray.get(refs)
    assert status.role == "decode" and status.num_running >= 1
    assert [r.token_ids for r in results] == _reference(prompts, sampling)
    # Weight snapshot: publish v1 (another seed's weights), the worker pulls it.
    ray.get(w.set_role.remote("colocated"))
    registry = actors["registry"]
    new_weights = EngineSpec(seed=11).build().state_dict()
    snap = publish_weights(registry, new_weights, 1, metadata={"step": 1}, shard_bytes=64 * 1024)
    assert len(snap.shards) > 1 and ray.get(registry.versions.remote()) == [1]
    assert ray.get(w.sync_weights.remote(1)) == 1
    assert ray.get(w.status.remote()).weight_version == 1
    after = ray.get(w.generate.remote(TurnRequest("v1", 0, prompts[0], sampling)))
    reference = SPEC.build()
    reference.load_weights(fetch_weights(snap), 1)
    (want,) = reference.generate([list(prompts[0])], sampling)
    assert after.weight_version == 1 and after.token_ids == tuple(want.output_token_ids)
    assert after.token_ids != results[0].token_ids
    # A new worker pulls the latest version before it is admitted.
    assert ray.get(actors["n"].status.remote()).weight_version == 0
    assert ray.get(actors["n"].sync_latest.remote()) == 1


@pytest.mark.ray
def test_ray_node_removed_mid_decode_keeps_every_prefix(cluster, actors) -> None:
    """A preemptible node dies mid-decode: every turn comes back with its streamed prefix,
    and resuming it on a dedicated worker completes the same turn. The watcher reports the
    drain as a reclaim notice and the departure as GPUs gone."""
    import ray

    from pearl.control.events import GpusGone, GpusOffered, ReclaimNotice
    from pearl.runtime.topology import ClusterWatcher, reclaim_notices

    watcher = ClusterWatcher()
    (offer,) = watcher.poll(0.0)
    assert isinstance(offer, GpusOffered) and [g.gpu_id for g in offer.gpus] == ["p0", "p1"]

    victim, survivor = actors["b"], actors["a"]
    ray.get([victim.set_role.remote("colocated"), survivor.set_role.remote("colocated")])
    sampling = SamplingParams(temperature=0.0, max_new_tokens=1500)
    prompts = [_prompt(i) for i in range(3)]
    reqs = [TurnRequest(f"t{i}", 0, p, sampling) for i, p in enumerate(prompts)]
    counts = {r.traj_id: 0 for r in reqs}

    def seen(chunk) -> None:
        counts[chunk.traj_id] += len(chunk.token_ids)

    async def run():
        tasks = [
            asyncio.create_task(collect_turn(victim.serve.remote(r), r, "b", seen)) for r in reqs
        ]
        while min(counts.values()) < 8:
            await asyncio.sleep(0.01)
        assert cluster.drain_node("pre", 30.0)
        notices = reclaim_notices()
        (notice,) = watcher.poll(1.0)  # the deadline is on the caller's clock (now + ~30 s)
        assert isinstance(notice, ReclaimNotice) and notice.gpu_ids == ("p0", "p1")
        assert notice.time_s == 1.0 and 1.0 + 15.0 < notice.deadline_s <= 31.5
        await asyncio.to_thread(cluster.remove_node, "pre")
        return notices, await asyncio.gather(*tasks)

    notices, results = asyncio.run(run())
    assert [(n.node_name, n.zone, n.gpu_ids) for n in notices] == [
        ("pre", Zone.PREEMPTIBLE, ("p0", "p1"))
    ]
    assert notices[0].deadline_unix_s > time.time()
    longest = max(len(r.token_ids) for r in results)
    ref = _reference(prompts, SamplingParams(temperature=0.0, max_new_tokens=longest + 60))
    resumed = []
    for i, r in enumerate(results):
        assert r.finish_reason == "worker_lost" and r.interrupted
        assert 8 <= len(r.token_ids) < sampling.max_new_tokens
        assert r.token_ids == ref[i][: len(r.token_ids)]
        left = SamplingParams(temperature=0.0, max_new_tokens=60)
        req = TurnRequest(r.traj_id, 0, prompts[i] + r.token_ids, left, resumed=True)
        resumed.append(survivor.generate.remote(req))
    for i, (r, rest) in enumerate(zip(results, ray.get(resumed), strict=True)):
        n = len(r.token_ids)
        assert r.token_ids + rest.token_ids == ref[i][: n + 60]
    deadline, events = time.time() + 30, []
    while not events and time.time() < deadline:
        events = watcher.poll(2.0)
        time.sleep(0.1)
    assert events == [GpusGone(2.0, ("p0", "p1"))]


def test_collect_turn_keeps_streamed_tokens_when_the_worker_dies() -> None:
    """A stream cut by a dead actor gives `worker_lost` with the tokens seen so far (or the
    prefill's tokens when a decode worker died before its first chunk)."""
    ray = pytest.importorskip("ray")
    from pearl.runtime.worker_api import PrefillResult, TokenChunk

    req = TurnRequest("t", 1, (1, 2, 3), GREEDY)
    pre = PrefillResult("t", 1, None, (9,), (-0.1,), "prefill", "p", 0)

    def stream(chunks):
        async def gen():
            for c in chunks:
                fut = asyncio.get_running_loop().create_future()
                fut.set_result(c)
                yield fut
            raise ray.exceptions.ActorDiedError()

        return gen()

    chunks = [TokenChunk("t", 1, (9, 4), (-0.1, -0.2)), TokenChunk("t", 1, (5,), (-0.3,))]
    seen = []
    lost = asyncio.run(collect_turn(stream(chunks), req, "d", seen.append, prefill=pre))
    assert (lost.finish_reason, lost.token_ids, lost.logprobs) == (
        "worker_lost",
        (9, 4, 5),
        (-0.1, -0.2, -0.3),
    )
    assert seen == chunks and lost.interrupted and lost.worker_id == "d"
    early = asyncio.run(collect_turn(stream([]), req, "d", prefill=pre))
    assert (early.token_ids, early.logprobs) == ((9,), (-0.1,))
    assert asyncio.run(collect_turn(stream([]), req, "d")).token_ids == ()
