"""Calibration of the simulated world against the paper's workload facts (docs/simulator-model.md).

Two checks, both computed by the same physics the simulator runs (`InferenceWorker` on
`WorkerHardware`, trajectories from `TrajectorySampler`), never by a separate formula:

1. `critical_path`: a batch's makespan with an unlimited rollout pool, i.e. every trajectory
   alone on its own colocated worker: container start + sum over turns of (prefill of the
   new tokens + decode + env step). The batch takes as long as its longest trajectory.
   Target for Qwen3-8B on H100, batch 64: ~216 s.
2. `colocated_mix` / `batch_mix`: a small closed loop (no controller, no elasticity): B trajectories on N
   colocated workers with a router, measuring the share of processed tokens that are
   prefill, the share of busy time due to prefill, the prefix-cache hit rate and the
   makespan. Target for Qwen3-30B-A3B: prefill ~97% of tokens in ~26% of busy time. It
   needs most of each turn's context to be prefilled again, which comes from what the
   agent re-sends (`WorkloadSpec.prefix_reuse`), routing (`router="least_loaded"` ignores
   where a prefix lives; "sticky" binds a trajectory to one worker, as ROLL does) and KV
   pressure (eviction).
"""

from __future__ import annotations

import heapq
import statistics
from dataclasses import dataclass

from pearl.control.state import Role
from pearl.sim.physics.inference import InferenceWorker
from pearl.sim.physics.inference_types import CompletionKind, Request, WorkerConfig
from pearl.sim.physics.iteration import HardwareParams, WorkerHardware
from pearl.sim.trajectories import SampledTrajectory, TrajectorySampler
from pearl.specs import get_gpu, get_model
from pearl.specs.workload import WorkloadSpec


@dataclass(frozen=True, slots=True)
class CriticalPath:
    """Unlimited-pool batch makespan and the longest trajectory's time split."""

    makespan_s: float
    mean_trajectory_s: float
    env_s: float  # of the longest trajectory (container start included)
    prefill_s: float
    decode_s: float
    num_turns: int
    mean_tokens_per_trajectory: float
    mean_turns: float


def trajectory_alone_s(
    traj: SampledTrajectory, hw: WorkerHardware, config: WorkerConfig | None = None
) -> tuple[float, float, float]:
    """(env, prefill, decode) seconds of one trajectory alone on one colocated worker, under
    the scheduler `config` (default: the world's, `rollout_engine_defaults`)."""
    w = InferenceWorker("solo", hw, Role.COLOCATED, config)
    t = traj.container_start_s
    env = traj.container_start_s
    prefill = decode = 0.0
    for i, turn in enumerate(traj.turns):
        req = Request(
            traj.traj_id,
            i,
            turn.context_tokens,
            turn.decode_tokens,
            reusable_prefix_tokens=turn.reusable_prefix_tokens,
        )
        w.submit(req, t)
        done = w.advance(w.next_change_time_s())
        while not done:
            done = w.advance(w.next_change_time_s())
        c = done[0]
        assert c.t_prefill_end_s is not None and c.t_decode_end_s is not None
        prefill += c.t_prefill_end_s - t
        decode += c.t_decode_end_s - c.t_prefill_end_s
        t = c.t_decode_end_s + turn.env_s
        env += turn.env_s
    return env, prefill, decode


def critical_path(trajectories: list[SampledTrajectory], hw: WorkerHardware) -> CriticalPath:
    parts = [trajectory_alone_s(tr, hw) for tr in trajectories]
    totals = [sum(p) for p in parts]
    i = max(range(len(totals)), key=totals.__getitem__)
    return CriticalPath(
        makespan_s=totals[i],
        mean_trajectory_s=statistics.fmean(totals),
        env_s=parts[i][0],
        prefill_s=parts[i][1],
        decode_s=parts[i][2],
        num_turns=trajectories[i].num_turns,
        mean_tokens_per_trajectory=statistics.fmean(t.total_tokens for t in trajectories),
        mean_turns=statistics.fmean(t.num_turns for t in trajectories),
    )


@dataclass(frozen=True, slots=True)
class BatchMix:
    """Outcome of one closed-loop batch (see module docstring)."""

    makespan_s: float
    prefill_token_share: float
    prefill_time_share: float
    hit_rate_tokens: float  # cached prompt tokens / prompt tokens of all admissions
    num_preemptions: int
    num_evictions: int
    mean_decode_batch: float
    num_turns: int
    num_segments: int  # worker segments simulated (simulation cost)
    num_iterations: int  # model iterations they stand for
    decode_step_tokens: int  # tokens produced by decode iterations (first tokens excluded)
    num_transfers: int  # KV transfers prefill -> decode (disaggregated only)
    num_moved_turns: int  # turns sent to another (prefill or colocated) worker than the last
    homes: tuple[int, ...]  # router "sticky": trajectories bound to each front worker


def colocated_mix(**kwargs: object) -> BatchMix:
    """`batch_mix` on colocated workers only (see there)."""
    return batch_mix(num_prefill=0, **kwargs)  # type: ignore[arg-type]


def batch_mix(
    *,
    model: str = "qwen3-30b-a3b",
    gpu: str = "h100-sxm",
    num_workers: int = 8,
    tp: int = 1,
    batch: int = 64,
    seed: int = 0,
    router: str = "least_loaded",
    spec: WorkloadSpec | None = None,
    config: WorkerConfig | None = None,
    num_prefill: int = 0,
    same_node: bool = False,
    params: HardwareParams | None = None,
) -> BatchMix:
    """Run one batch of `batch` trajectories on `num_workers` workers: all colocated if
    `num_prefill` is 0, else `num_prefill` prefill-only and the rest decode-only workers,
    with the KV moved between them (`kv_transfer_time_s`, across nodes unless `same_node`).

    router "sticky" routes as ROLL's environment-affine router and the controller's
    (`pearl.control.router`) do for `roll` and the `fixed:*` policies: a trajectory's first
    turn goes to the (prefill or colocated) worker with the fewest live trajectories bound
    to it (then the fewest requests in flight, then the lowest index), and every later turn
    goes back to that worker, whether or not its prefix is still cached there (an evicted
    prefix is prefilled again in place). "least_loaded": every turn goes to the worker with
    the fewest requests in flight (ties to the lowest index), wherever the prefix lives.
    Decode workers are always chosen least loaded. `params`: the hardware knobs (default
    `HardwareParams()`, vLLM's 0.90 memory share).
    """
    if router not in ("sticky", "least_loaded"):
        raise ValueError(f"unknown router {router!r}")
    if not 0 <= num_prefill < num_workers:
        raise ValueError("need 0 <= num_prefill < num_workers")
    hw = WorkerHardware(get_model(model), get_gpu(gpu), tp, params or HardwareParams())

    def role(i: int) -> Role:
        if num_prefill == 0:
            return Role.COLOCATED
        return Role.PREFILL if i < num_prefill else Role.DECODE

    workers = [InferenceWorker(f"w{i}", hw, role(i), config) for i in range(num_workers)]
    front = list(range(num_prefill if num_prefill else num_workers))
    back = list(range(num_prefill, num_workers))
    arriving: dict[int, int] = {}  # traj -> tokens generated by its prefill
    num_transfers = 0
    trajs = TrajectorySampler(spec or WorkloadSpec(), seed).batch(batch)
    heap: list[tuple[float, int, int, int]] = []  # (time, kind, seq, id)
    # kinds: 0 trajectory ready for its next turn, 1 worker wake-up, 2 KV arrived
    seq = 0
    for tr in trajs:
        heap.append((tr.container_start_s, 0, seq, tr.traj_id))
        seq += 1
    heapq.heapify(heap)
    next_turn = [0] * batch
    home = [-1] * batch  # sticky: the front worker a trajectory is bound to
    residents = [0] * num_workers  # sticky: live trajectories bound to each worker
    last = [-1] * batch  # the front worker of each trajectory's previous turn
    num_moved = 0
    wake = [float("inf")] * num_workers
    end_s = 0.0

    def arm(i: int) -> None:
        nonlocal seq
        t = workers[i].next_change_time_s()
        if t < wake[i]:
            wake[i] = t
            heapq.heappush(heap, (t, 1, seq, i))
            seq += 1

    while heap:
        t, kind, _, ident = heapq.heappop(heap)
        if kind == 1:
            if t != wake[ident]:
                continue  # stale wake-up
            wake[ident] = float("inf")
            for c in workers[ident].advance(t):
                if c.kind == CompletionKind.PREFILL and not c.finished:
                    arriving[c.traj_id] = c.generated_tokens
                    num_transfers += 1
                    xfer = hw.kv_transfer_time_s(c.prompt_tokens, same_node=same_node)
                    heapq.heappush(heap, (c.t_end_s + xfer, 2, seq, c.traj_id))
                    seq += 1
                    continue
                tr = trajs[c.traj_id]
                turn = tr.turns[c.turn]
                end_s = max(end_s, c.t_end_s)
                if c.turn + 1 < tr.num_turns:
                    next_turn[c.traj_id] = c.turn + 1
                    heapq.heappush(heap, (c.t_end_s + turn.env_s, 0, seq, c.traj_id))
                    seq += 1
                else:
                    end_s = max(end_s, c.t_end_s + turn.env_s)
                    if home[c.traj_id] >= 0:
                        residents[home[c.traj_id]] -= 1
            arm(ident)
            continue
        tr = trajs[ident]
        k = next_turn[ident]
        turn = tr.turns[k]
        if kind == 2:  # KV landed: decode on the least loaded decode worker
            i = min(back, key=lambda j: workers[j].num_in_flight)
            gen = arriving.pop(ident)
            req = Request(
                ident,
                k,
                turn.context_tokens,
                turn.decode_tokens,
                generated_tokens=gen,
                reusable_prefix_tokens=turn.reusable_prefix_tokens,
            )
        else:
            if router == "sticky":
                if home[ident] < 0:
                    home[ident] = min(front, key=lambda j: (residents[j], workers[j].num_in_flight))
                    residents[home[ident]] += 1
                i = home[ident]
            else:
                i = min(front, key=lambda j: workers[j].num_in_flight)
            num_moved += last[ident] >= 0 and last[ident] != i
            last[ident] = i
            req = Request(
                ident,
                k,
                turn.context_tokens,
                turn.decode_tokens,
                reusable_prefix_tokens=turn.reusable_prefix_tokens,
            )
        workers[i].advance(t)
        workers[i].submit(req, t)
        arm(i)
    prefill_tok = sum(w.stats.prefill_tokens for w in workers)
    decode_tok = sum(w.stats.decode_tokens for w in workers)
    busy = sum(w.stats.busy_s for w in workers)
    prefill_busy = sum(w.stats.prefill_busy_s for w in workers)
    lookups = sum(w.cache.hit_tokens for w in workers)
    prompt = lookups + prefill_tok
    dec_iters = sum(w.stats.decode_iterations for w in workers)
    return BatchMix(
        makespan_s=end_s,
        prefill_token_share=prefill_tok / (prefill_tok + decode_tok),
        prefill_time_share=prefill_busy / busy,
        hit_rate_tokens=lookups / prompt if prompt else 0.0,
        num_preemptions=sum(w.stats.num_preemptions for w in workers),
        num_evictions=sum(w.cache.num_evictions for w in workers),
        mean_decode_batch=sum(w.stats.decode_seq_steps for w in workers) / max(dec_iters, 1),
        num_turns=sum(t.num_turns for t in trajs),
        num_segments=sum(w.stats.num_segments for w in workers),
        num_iterations=sum(w.stats.num_iterations for w in workers),
        decode_step_tokens=decode_tok,
        num_transfers=num_transfers,
        num_moved_turns=num_moved,
        homes=tuple(sum(h == j for h in home) for j in front) if router == "sticky" else (),
    )


ColocatedMix = BatchMix  # the name of the first version
