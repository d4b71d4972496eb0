"""Rollout workers in-process: serving, roles, interruption, error replies.

These drive `RolloutWorker` objects directly on one asyncio loop (no Ray): fast checks of
the serving logic. Every expected token sequence comes from a separately built reference
engine with the same seed (greedy decoding), never from a stored constant. The same workers
as Ray actors on a local cluster are tested in test_worker_ray.py.
"""

from __future__ import annotations

import asyncio

from pearl.control.telemetry import TurnRecord
from pearl.runtime.engine import SamplingParams
from pearl.runtime.transport.kv_transfer import InProcessTransport
from pearl.runtime.worker.api import TurnRequest
from pearl.runtime.worker.rollout_worker import RolloutWorker

from ._worker_helpers import (
    GREEDY,
    SPEC,
    _colocated_contexts,
    _multi_turn_disaggregated,
    _prompt,
    _reference,
)


def _worker(
    role: str, wid: str = "w", transport: InProcessTransport | None = None
) -> RolloutWorker:
    w = RolloutWorker(wid, role, SPEC, transport="in_process")
    if transport is not None:
        w.transport = transport
    return w


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


def test_a_turn_that_ends_on_its_prefill_worker_has_its_record() -> None:
    """A turn whose first token is its last never reaches a decode worker: the prefill
    worker's answer carries the turn's record (before, the run's telemetry skipped it)."""
    import dataclasses

    w = _worker("prefill", "p")
    one = dataclasses.replace(GREEDY, max_new_tokens=1)
    res = asyncio.run(w.prefill(TurnRequest("t0", 0, _prompt(0), one)))
    assert not res.needs_decode and res.finish_reason == "length"
    rec = res.as_turn_result().record
    assert isinstance(rec, TurnRecord) and rec.roles == ("prefill",)
    assert (rec.decode_tokens, rec.context_tokens, rec.prefill_worker) == (1, 20, "p")
    assert rec.decode_worker is None and not rec.interrupted
