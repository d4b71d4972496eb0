"""Shared by the rollout worker tests: the engine spec, prompts, and reference outputs
built from a separate engine with the same seed (greedy decoding)."""

from __future__ import annotations

import asyncio

from pearl.runtime.engine import SamplingParams
from pearl.runtime.worker.api import EngineSpec, TurnRequest, TurnResult

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
