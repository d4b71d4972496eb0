"""A rollout worker actor on the vLLM backend (`engine.backend: vllm`), for real on CPU.

One local Ray cluster for the module. The worker builds vLLM over the same random weights
PEARL's engine starts from (the spec's seed, written once as an HF directory), so a greedy
turn it serves is token-for-token the turn a PEARL engine from that spec generates; it
streams the turn with logprobs and telemetry; it installs a newer published weight version
in place and serves that version's tokens; an interrupt returns the turn's prefix; and two
vLLM workers hand a turn over (prefill -> KV through PEARL's transports -> decode) and
swap roles without a restart.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from pearl.control.state import Zone
from pearl.runtime.engine import ModelConfig, SamplingParams
from pearl.runtime.worker.api import EngineSpec, TurnRequest, collect_turn

pytestmark = pytest.mark.skipif(
    os.environ.get("PEARL_SKIP_VLLM") == "1", reason="PEARL_SKIP_VLLM=1"
)

MODEL = ModelConfig.tiny(head_dim=32)  # a head size vLLM's kernels support
VLLM = EngineSpec(model_config=MODEL, seed=5, max_model_len=512, backend="vllm")
PEARL = EngineSpec(model_config=MODEL, seed=5, max_model_len=512)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


def _prompt(i: int, n: int = 40) -> tuple[int, ...]:
    return tuple((5 * i + 7 * k) % 250 + 1 for k in range(n))


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from pearl.runtime.local_cluster import LocalCluster

    c = LocalCluster(head_cpus=1)
    c.add_node("dedicated", Zone.DEDICATED, ["d0", "d1"])
    c.connect()
    yield c
    c.shutdown()


@pytest.mark.ray
def test_a_vllm_worker_serves_streams_syncs_and_interrupts(cluster) -> None:
    import ray

    from pearl.runtime.snapshots import fetch_weights, get_registry, publish_weights
    from pearl.runtime.worker.rollout_worker import start_worker

    registry = get_registry()
    w = start_worker("v0", "colocated", ("d0",), VLLM)
    status = ray.get(w.ready.remote(), timeout=300)
    assert status.pid > 0 and status.backend == "vllm"

    res = ray.get(w.generate.remote(TurnRequest("a", 0, _prompt(0), GREEDY)))
    (want,) = PEARL.build().generate([list(_prompt(0))], GREEDY)
    assert res.ok and res.weight_version == 0, res.error
    assert res.token_ids == tuple(want.output_token_ids)
    assert len(res.logprobs) == len(res.token_ids)
    assert all(abs(a - b) < 2e-3 for a, b in zip(res.logprobs, want.output_logprobs, strict=True))

    # A newer version published by the trainer is installed in place and served.
    weights = EngineSpec(model_config=MODEL, seed=17).build().state_dict()
    snap = publish_weights(registry, weights, 1, metadata={"step": 1})
    assert ray.get(w.sync_weights.remote(1)) == 1
    res = ray.get(w.generate.remote(TurnRequest("b", 0, _prompt(2), GREEDY)))
    reference = PEARL.build()
    reference.load_weights(fetch_weights(snap), 1)
    (want,) = reference.generate([list(_prompt(2))], GREEDY)
    assert res.ok and res.weight_version == 1 and res.token_ids == tuple(want.output_token_ids)

    # A long turn interrupted mid-stream comes back with what it generated.
    long = SamplingParams(temperature=0.0, max_new_tokens=400)
    req = TurnRequest("c", 0, _prompt(3), long)
    seen: list[int] = []

    async def interrupt_mid_turn():
        task = asyncio.create_task(
            collect_turn(w.serve.remote(req), req, "v0", lambda ch: seen.extend(ch.token_ids))
        )
        deadline = time.monotonic() + 60
        while len(seen) < 3 and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await w.interrupt.remote()
        return await task

    cut = asyncio.run(interrupt_mid_turn())
    assert cut.finish_reason == "interrupted" and 3 <= len(cut.token_ids) < 400
    assert list(cut.token_ids[: len(seen)]) == seen
    turns, steps = ray.get(w.telemetry.remote())
    assert turns and steps and sum(s.decode_tokens for s in steps) > 0
    ray.kill(w)


@pytest.mark.ray
@pytest.mark.parametrize("transport", ["object_store", "shared_memory"])
def test_two_vllm_workers_hand_a_turn_over_through_our_transports(cluster, transport) -> None:
    """A prefill worker and a decode worker, both vLLM: the turn's KV leaves the prefill
    worker's paged cache through PEARL's KV connector and travels through PEARL's transport;
    the decode worker finishes the turn token-for-token as PEARL's engine does colocated.
    Then the two swap roles (no restart) and hand over the next turn the other way."""
    import ray

    from pearl.runtime.worker.rollout_worker import start_worker

    pre = start_worker("vp", "prefill", ("d0",), VLLM, transport=transport)
    dec = start_worker("vd", "decode", ("d1",), VLLM, transport=transport)
    ray.get([pre.ready.remote(), dec.ready.remote()], timeout=300)
    reference = PEARL.build()

    async def handoff(p_w, d_w, d_id, req):
        first = await p_w.prefill.remote(req)
        assert first.needs_decode and first.handle is not None, first.error
        return await collect_turn(d_w.serve.remote(req, first), req, d_id, prefill=first)

    try:
        for i, (p_w, d_w, d_id) in enumerate([(pre, dec, "vd"), (dec, pre, "vp")]):
            if i:
                ray.get([pre.set_role.remote("decode"), dec.set_role.remote("prefill")])
            req = TurnRequest(f"pd{i}", 0, _prompt(10 + i, 200), GREEDY)
            res = asyncio.run(handoff(p_w, d_w, d_id, req))
            (want,) = reference.generate([list(req.prompt_token_ids)], GREEDY)
            assert res.ok, res.error
            assert res.token_ids == tuple(want.output_token_ids)
            assert res.record is not None and res.record.t_kv_start_s is not None
    finally:
        ray.kill(pre)
        ray.kill(dec)


def test_a_vllm_run_config_may_disaggregate(tmp_path) -> None:
    from pearl.runtime.run_config import load_run_config

    cfg = tmp_path / "run.yaml"
    cfg.write_text("engine:\n  backend: vllm\ncontroller:\n  modes: [disaggregated]\n")
    assert load_run_config(cfg).controller.modes == ["disaggregated"]
