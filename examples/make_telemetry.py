"""Write examples/telemetry.jsonl: seeded synthetic telemetry of SWE-style agentic rollout.

Qwen3-8B on H100-SXM workers (1 GPU each), 16 trajectories per rollout step; step 0 runs
colocated on 4 workers, step 1 disaggregated with 1 prefill and 3 decode workers. A small
event loop of its own (not PEARL's simulator, not the decision engine's model) produces
the records: continuous batching with 8K-token prefill chunks, a roofline iteration time
`max(compute, memory) + launch` with lognormal noise, KV transfer over a ~22 GB/s link,
and SWE-like workload draws of its own (turns: lognormal median 18, cap 50; generated
tokens median 250; observations median 400; environment: 70% quick commands, 25% test
runs, 5% timeouts; the simulator's draws are in docs/simulator-model.md). A trajectory that
waited long on its environment usually lost its prefix cache and prefills its whole
context again (in the paper's setting most of a turn's context is prefilled again).

Run: `python examples/make_telemetry.py [OUT] [--seed N]` (default examples/telemetry.jsonl).
Only worker iterations whose index is a multiple of `SAMPLE_EVERY` are written.
"""

from __future__ import annotations

import argparse
import heapq
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pearl.control.telemetry import TelemetryMeta, TurnRecord, WorkerStepRecord, write_jsonl

# Qwen3-8B on one H100-SXM (datasheet numbers; efficiencies are this script's own guesses).
PARAMS = 8.19e9
LAYERS, Q_HEADS, HEAD_DIM = 36, 32, 128
WEIGHT_BYTES = 16.38e9
KV_BYTES_PER_TOKEN = 147456
FLOPS = 989e12 * 0.62
HBM_BW = 3.35e12 * 0.75
LINK_BW = 22e9
CHUNK_TOKENS = 8192
CONTEXT_CAP = 32768
SAMPLE_EVERY = 128


@dataclass
class Traj:
    traj_id: str
    num_turns: int
    context: int
    turn: int = 0
    pending: dict = field(default_factory=dict)  # the current turn's record fields
    prefill_left: int = 0
    decode_left: int = 0
    last_env_s: float = 0.0


@dataclass
class Worker:
    worker_id: str
    role: str
    queue: list = field(default_factory=list)  # trajectories waiting for / in prefill
    decoding: list = field(default_factory=list)
    busy: bool = False
    num_iters: int = 0


def iteration_s(rng: np.random.Generator, prefill: list[tuple[int, int]], ctxs: list[int]) -> float:
    """prefill: (chunk tokens, context after chunk) pairs; ctxs: decoding sequences' contexts."""
    tokens = sum(c for c, _ in prefill) + len(ctxs)
    attn = sum(4 * LAYERS * Q_HEADS * HEAD_DIM * c * (k - c / 2) for c, k in prefill)
    attn += sum(4 * LAYERS * Q_HEADS * HEAD_DIM * k for k in ctxs)
    compute = (2 * PARAMS * tokens + attn) / FLOPS
    memory = (WEIGHT_BYTES + KV_BYTES_PER_TOKEN * (sum(ctxs) + sum(k for _, k in prefill))) / HBM_BW
    return (max(compute, memory) + 0.003) * float(rng.lognormal(0.0, 0.06))


def env_s(rng: np.random.Generator) -> float:
    u = rng.random()
    if u < 0.70:
        return float(rng.lognormal(np.log(1.0), 0.6))
    if u < 0.95:
        return float(min(90.0, rng.lognormal(np.log(15.0), 0.8)))
    return float(rng.uniform(60.0, 90.0))


def run_step(rng, step: int, t0: float, batch: int, mode: str, num_p: int, num_d: int):
    if mode == "colocated":
        workers = [Worker(f"w{i}", "colocated") for i in range(num_p)]
        prefillers, decoders = workers, workers
    else:
        prefillers = [Worker(f"w{i}", "prefill") for i in range(num_p)]
        decoders = [Worker(f"w{num_p + i}", "decode") for i in range(num_d)]
        workers = prefillers + decoders
    trajs = []
    for i in range(batch):
        turns = int(np.clip(rng.lognormal(np.log(18), 0.55), 3, 50))
        trajs.append(Traj(f"s{step}-t{i}", turns, int(rng.uniform(1500, 4000))))
    turns_out: list[TurnRecord] = []
    steps_out: list[WorkerStepRecord] = []
    heap: list = []
    seq = 0

    def push(t: float, kind: str, obj) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, seq, kind, obj))
        seq += 1

    def start_turn(tr: Traj, t: float, home: int) -> None:
        if tr.turn == 0:
            new, cached = tr.context, 0
        else:
            obs = int(min(4096, rng.lognormal(np.log(400), 1.0))) + 24
            evicted = tr.last_env_s > 5.0 or rng.random() < 0.25
            cached = 0 if evicted else tr.context
            new = tr.context + obs - cached
            tr.context += obs
        tr.prefill_left = new
        gen = int(min(4096, rng.lognormal(np.log(250), 0.9)))
        tr.decode_left = max(1, min(gen, CONTEXT_CAP - tr.context))
        tr.pending = dict(new=new, cached=cached, ctx=tr.context, gen=tr.decode_left, t_q=t)
        w = (
            prefillers[home % len(prefillers)]
            if mode == "colocated"
            else min(prefillers, key=lambda p: sum(x.prefill_left for x in p.queue))
        )
        tr.pending["pw"] = w.worker_id
        w.queue.append(tr)
        kick(w, t)

    def kick(w: Worker, t: float) -> None:
        if w.busy or not (w.queue or w.decoding):
            return
        budget, chunks = CHUNK_TOKENS, []
        for tr in w.queue:
            if budget <= 0:
                break
            c = min(budget, tr.prefill_left)
            done_ctx = tr.pending["ctx"] - tr.prefill_left + c
            chunks.append((tr, c, done_ctx))
            tr.pending.setdefault("t_ps", t)
            budget -= c
        dec = list(w.decoding)
        dt = iteration_s(rng, [(c, k) for _, c, k in chunks], [x.context for x in dec])
        if w.num_iters % SAMPLE_EVERY == 0:
            steps_out.append(
                WorkerStepRecord(
                    w.worker_id,
                    w.role,
                    step,
                    round(t, 6),
                    len(chunks) + len(dec),
                    sum(c for _, c, _ in chunks),
                    len(dec),
                    sum(x.context for x in dec),
                    round(dt, 6),
                )  # fmt: skip
            )
        w.num_iters += 1
        w.busy = True
        push(t + dt, "iter", (w, chunks, dec))

    def finish_iter(t: float, w: Worker, chunks, dec) -> None:
        w.busy = False
        for tr, c, _ in chunks:
            tr.prefill_left -= c
            if tr.prefill_left == 0:
                w.queue.remove(tr)
                tr.pending["t_pe"] = t
                if mode == "colocated":
                    tr.pending.update(dw=w.worker_id, t_ds=t)
                    w.decoding.append(tr)
                else:
                    kv_s = 0.001 + tr.context * KV_BYTES_PER_TOKEN / LINK_BW * rng.lognormal(0, 0.1)
                    tr.pending["t_ks"] = t
                    push(t + kv_s, "kv", tr)
        for tr in dec:
            tr.decode_left -= 1
            tr.context += 1
            if tr.decode_left == 0:
                w.decoding.remove(tr)
                end_turn(tr, t)
        kick(w, t)

    def end_turn(tr: Traj, t: float) -> None:
        p = tr.pending
        last = tr.turn + 1 >= tr.num_turns or tr.context >= CONTEXT_CAP - 64
        e = None if last else env_s(rng)
        role = ("colocated",) if mode == "colocated" else ("prefill", "decode")
        turns_out.append(
            TurnRecord(
                tr.traj_id,
                tr.turn,
                step,
                step,
                p["pw"],
                p["dw"],
                role,
                p["new"],
                p["cached"],
                p["gen"],
                p["ctx"],
                round(p["t_q"], 6),
                round(p["t_ps"], 6),
                round(p["t_pe"], 6),
                None if "t_ks" not in p else round(p["t_ks"], 6),
                None if "t_ke" not in p else round(p["t_ke"], 6),
                round(p["t_ds"], 6),
                round(t, 6),
                None if e is None else round(t, 6),
                None if e is None else round(t + e, 6),
            )  # fmt: skip
        )
        if e is not None:
            tr.last_env_s = e
            tr.turn += 1
            push(t + e, "env", tr)

    for i, tr in enumerate(trajs):
        start_turn(tr, t0, i)
    t_end = t0
    while heap:
        t, _, kind, obj = heapq.heappop(heap)
        t_end = t
        if kind == "iter":
            finish_iter(t, *obj)
        elif kind == "env":
            start_turn(obj, t, trajs.index(obj))
        else:  # KV landed: decode on the least loaded decode worker
            w = min(decoders, key=lambda d: len(d.decoding))
            obj.pending.update(t_ke=t, dw=w.worker_id, t_ds=t)
            w.decoding.append(obj)
            kick(w, t)
    return turns_out, steps_out, t_end


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=str(Path(__file__).with_name("telemetry.jsonl")))
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    records: list = []
    t = 0.0
    for step, (mode, p, d) in enumerate([("colocated", 4, 0), ("disaggregated", 1, 3)]):
        turns, steps, t = run_step(rng, step, t, 16, mode, p, d)
        records += turns + steps
    with open(args.out, "w") as fh:
        n = write_jsonl(fh, records, TelemetryMeta("qwen3-8b", "h100-sxm", 1))
    print(f"wrote {n} records to {args.out}")


if __name__ == "__main__":
    main()
