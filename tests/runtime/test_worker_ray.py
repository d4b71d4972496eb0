"""Rollout workers on a Ray cluster: serving, roles, weights, and a node lost mid-decode.

The tests marked `ray` run the workers as actors on a local multi-node Ray cluster with
zone-labelled nodes (one cluster per module), and take a preemptible node away mid-decode.
Every expected token sequence comes from a separately built reference engine with the same
seed (greedy decoding), never from a stored constant. The serving logic itself is checked
in-process (no Ray) in test_worker_inprocess.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time

import pytest

from pearl.control.state import Zone
from pearl.runtime.engine import SamplingParams
from pearl.runtime.worker.api import EngineSpec, TurnRequest, collect_turn

from ._worker_helpers import (
    GREEDY,
    SPEC,
    _colocated_contexts,
    _multi_turn_disaggregated,
    _prompt,
    _reference,
)


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from pearl.runtime.local_cluster import LocalCluster

    c = LocalCluster(head_cpus=1, head_gpu_ids=("d0", "d1"))
    c.add_node("pre", Zone.PREEMPTIBLE, ["p0", "p1"])
    c.connect()
    yield c
    c.shutdown()


def _start(worker_id: str, role: str, gpu: str):
    from pearl.runtime.worker.rollout_worker import start_worker

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
    from pearl.runtime.worker.api import NO_VERSION, PrefillResult, TokenChunk

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

    # the prefill ran on v3; the decode worker synced to v4 between its two chunks
    pre = dataclasses.replace(pre, weight_version=3)
    chunks = [TokenChunk("t", 1, (9, 4), (-0.1, -0.2), 3), TokenChunk("t", 1, (5,), (-0.3,), 4)]
    seen = []
    lost = asyncio.run(collect_turn(stream(chunks), req, "d", seen.append, prefill=pre))
    assert (lost.finish_reason, lost.token_ids, lost.logprobs) == (
        "worker_lost",
        (9, 4, 5),
        (-0.1, -0.2, -0.3),
    )
    assert seen == chunks and lost.interrupted and lost.worker_id == "d"
    # the kept prefix names the oldest weights that generated any of it, never a default
    assert lost.weight_version == 3
    late = asyncio.run(collect_turn(stream(chunks[1:]), req, "d"))
    assert (late.token_ids, late.weight_version) == ((5,), 4)
    early = asyncio.run(collect_turn(stream([]), req, "d", prefill=pre))
    assert (early.token_ids, early.logprobs, early.weight_version) == ((9,), (-0.1,), 3)
    none = asyncio.run(collect_turn(stream([]), req, "d"))
    assert (none.token_ids, none.weight_version) == ((), NO_VERSION)
