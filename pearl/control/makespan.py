"""Bubble-aware makespan models of one rollout batch (paper §4.3.1).

A batch of B trajectories; each runs turns of (prefill, decode, environment). From a
`WorkloadProfile` (means per turn: `n_p` new prefill tokens, `n_d` decode tokens, context
`K`; `T` turns per trajectory; share `f` of a trajectory's life spent waiting on its
environment; a sample of finished trajectories' totals, or without one the observed tail
trajectory) and the fitted per-worker costs (`PerfParams`), as
`pearl.control.batch_workload` reduces them to numbers for one batch (the trajectories
whose longest is the critical path, the trajectories still running in each round, a
worker's KV seats).

* prefill of a turn `t_pf = a + (b_p + c_attn*K) * (n_p + n_c*(1-h))`, where `n_p` tokens
  per turn are new to the trajectory and `n_c` is the reusable prefix (the rest of the
  context), and `h = depth * (1 - exp(-c_mode * r^2))` is the share of it the prefix
  caches serve (`depth`: how much of the reusable prefix a hit serves, learned),
  with `r = W*H_max / (B*K_seq)` the room of the caches of the W workers that prefill (all
  N colocated, the p prefill workers) over the batch's working set: a cache too small for
  the batch's contexts evicts them (LRU over a larger working set mostly misses), and
  evicted prefixes are prefilled again (paper §6.1). `c_mode` (colocated and
  disaggregated apart) is fitted by the tracker from observed hit shares; KV of a turn
  `t_kv = lat + K*kv_bytes*s`;
* decode iteration `t_step = a + b_d*min(b, b_sat) + c_ctx*b*K_dec` at decode batch `b`,
  with `K_dec = K + n_d/2` (`b_sat`: MoE, the batch at which every expert is read,
  `HardwarePrior`; dense: none); KV memory holds `S = (H_max - K_seq)/K_dec` *seats*
  (admission is FIFO and allocates whole contexts, so about one sequence's KV stays free
  at the head of the line; `H_max` is the KV pool the engines report in telemetry, else
  the hardware prior's estimate). A worker whose `m` live trajectories each decode a
  share `q` of their time runs `m*q` sequences on average (its busy time), but a decoding
  trajectory finds itself in a batch of `1 + (m-1)*q` (`_seen_batch`: it always counts
  itself), and that batch sets its own tokens' step.

The makespan is the larger of a **throughput bound** (a worker's total work over its
capacity) and the **critical path**: the longest of the batch's B trajectories, each
through its own turns with the waits the others put in its way (`longest_path`: the expected
longest of B draws from the sampled trajectories, `pearl.control.longest`).

Both modes are followed **round by round**: in round k, `n_k = max(1, B*S(k))`
trajectories run (`S`: the sample's survival of turns; without a sample, our coarse
normal survival from the profile's mean and p90), which sets what a turn waits for and how
large the decode batches are. A trajectory runs its k-th turn against round `k*r`, `r` its
pace against the mean one (a slow trajectory meets fewer others), and sums over its own
turns its prefill, its decode tokens at the rounds' cost per token, its environment and
the rounds' waits.

Colocated (N workers): prefill and decode share iterations on the same GPUs (chunked
prefill). A round's `m = n_k/N` live trajectories per worker each spend a share `q` of
the round in the worker's running batch, so the worker decodes `clip(m*q, 1, S)` at once
and a member sees `1 + (m-1)*q`; a turn's own cycle is `t_pf + n_d*t_tok + e`, and a
token of a decoding trajectory costs `t_tok = t_step / (1 - rho)` with `rho =
(m-1)*t_pf/x` the *other* trajectories' prefill per second of the round (its own prefill
comes before its decode and never interrupts it). A round lasts `x`, the longest of a
turn's own cycle, the worker's work for its `m` trajectories `m*(t_pf + n_d*t_step/b)`
and the seats' response-time law `m*s/S` (`s = t_pf + n_d*t_tok`, how long a turn holds
its KV), so an overloaded worker makes every turn wait. The share is a fixed point, as
in the disaggregated rounds: `q = (y - t_pf - e) / x` with `y` the longer of the turn's
own cycle and the worker's work, since a busy worker's turns wait inside its batch and
turns waiting for a KV seat wait outside it. (The profile's `f`, the share of a
trajectory's life spent on its environment, was measured at the pace of the pool it ran
on: `1 - f` stood for `q` until 2026-12-08 and put too many in a faster pool's batches;
Qwen3-30B-A3B's colocated makespans came out 5-8% high where its splits' were 1-3%.)
Throughput bound `max(P_w + D_w, ((B/N - 1)*T + T_tail) * s / S)`: per-worker prefill
and decode busy time (`D_w = sum_k n_k*n_d*t_step(b_k)/b_k / N` over the rounds), and the
seat time of the worker that keeps the longest trajectory.

Disaggregated (p prefill, d decode): the two stages run concurrently. A mean turn's own
work is `o = t_pf + t_kv + n_d*t_step + e` (e: its environment and overhead); it queues at
its prefill worker (sticky routing: one queue per worker) with service `s = max(t_pf,
t_kv)` at utilisation `u = L/x`, `L = n_k*s/p`; the mean wait of an M/G/1 queue
(Pollaczek-Khinchine) is `s*(1+cv^2)/2 * u/(1-u)`, `cv^2` the spread of the tokens turns
prefill (`WorkloadProfile.prefill_tokens_cv2`; 1 is M/M/1), so the cycle `x` solves
`x = o + s'*u/(1-u)` with `s' = s*(1+cv^2)/2` (closed form: the larger root of
`(x-o)(x-L) = s'*L`), and is at least the decode seats' response time
`n_k*n_d*t_step/(d*S)`. The decoding share `q = n_d*t_step/x` of the live trajectories
sets the batch a decoding trajectory sees, `1 + (n_k/d - 1)*q` (a fixed point: the batch
sets the step, the step the share). Throughput bounds: prefill path `max(prefill work,
KV link time) / p`, decode path `sum_k n_k*n_d*t_step(b)/b / d` at the mean batch
`b = n_k/d * q` (at least the longest trajectory's own decode).

Feasibility (paper §4.2): a worker's weights fit its GPUs; one trajectory's context fits a
worker's KV memory (prefill workers stage whole contexts); disaggregation needs decode KV
memory for the trajectories that decode at once, `B * (1-f) * K_seq <= N_D * H_max` with
`K_seq = K + n_d`. The paper writes `B * K_seq`; we leave out the share `f` waiting on the
environment because a decode worker frees a turn's KV when the turn ends (the next turn's
KV arrives from a prefill worker), and KV pressure short of the bound is in the seats' response
time.

Everything is our own coarse model, deliberately independent of the simulator's world.
The core works on numpy arrays so the decision engine can score many splits at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pearl.control.batch_workload import BatchWorkload, batch_workload
from pearl.control.longest import longest_path
from pearl.control.plan import PDConfig
from pearl.control.profile import WorkloadProfile


@dataclass(frozen=True, slots=True)
class Prediction:
    """A predicted batch makespan; `reason` says why when `feasible` is False."""

    makespan_s: float
    feasible: bool
    reason: str
    breakdown: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "makespan_s": self.makespan_s,
            "feasible": self.feasible,
            "reason": self.reason,
            "breakdown": dict(self.breakdown),
        }


def _prefill(
    w: BatchWorkload, cache_workers: np.ndarray, hit_coeff: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per-turn prefill time and the prefix-cache hit share when `cache_workers` workers
    keep the prefix caches (see module docstring)."""
    room = cache_workers * w.h_max
    if w.working_set > 0:
        r = room / w.working_set
        hit = w.hit_depth * (1.0 - np.exp(-hit_coeff * r * r))
    else:
        hit = np.full_like(room, w.hit_depth)
    per_token = w.prefill_b + w.prefill_c * w.ctx
    t_pf = w.step_a + per_token * (w.n_new + w.n_cached * (1.0 - hit))
    return t_pf, hit


def _own_prefill(w: BatchWorkload, hit: np.ndarray) -> np.ndarray:
    """Each trajectory's own prefill time (candidates x trajectories) at the candidates'
    prefix-cache hit shares `hit`: its new tokens always, its reusable prefix where the
    caches miss, at the per-turn cost of `_prefill`."""
    tr = w.paths
    per_token = w.prefill_b + w.prefill_c * w.ctx
    missed = tr.reusable_tokens[None, :] * (1.0 - np.asarray(hit, dtype=float)[:, None])
    return (tr.turns * w.step_a)[None, :] + per_token * (tr.new_tokens[None, :] + missed)


def _step_s(w: BatchWorkload, b: np.ndarray) -> np.ndarray:
    return w.step_a + w.step_b * np.minimum(b, w.decode_saturation_seqs) + w.step_c * b * w.ctx_dec


def _seen_batch(live: np.ndarray, share: np.ndarray | float, seats: float) -> np.ndarray:
    """The decode batch a decoding trajectory finds itself in: itself plus the others of
    its `live` that decode at that moment (each for `share` of its time). The batch a
    worker runs on average, `live * share`, counts the moments nobody decodes; a member
    of the batch always sees at least itself (the inspection paradox of a closed
    population)."""
    return np.clip(1.0 + np.maximum(live - 1.0, 0.0) * share, 1.0, seats)


def colocated_arrays(w: BatchWorkload, n: np.ndarray) -> dict[str, np.ndarray]:
    """Colocated makespan for worker counts `n`, round by round over the trajectories'
    turns (paper §4.3.1: PD serialised per GPU; see module docstring)."""
    n = np.asarray(n, dtype=float)
    t_pf, hit = _prefill(w, n, w.hit_coeff_colocated)
    prefill = w.batch * w.turns * t_pf / n
    # candidates x rounds: the live trajectories per worker, the share of its time a live
    # trajectory decodes (a fixed point, as in the disaggregated rounds: the batch sets the
    # step, the step the cycle, the cycle the share; it starts from the profile's share
    # not spent on the environment, which was measured at another pool's pace), the batch
    # a worker runs and the batch a decoding member sees
    live = w.alive[None, :] / n[:, None]
    pf = t_pf[:, None]
    share = np.full_like(live, 1.0 - w.wait)
    b, step, seen_step = _colocated_batches(w, live, share)
    cycle = pf + w.n_d * seen_step + w.env_turn_s
    for _ in range(_MAX_ITERATIONS):
        token, own, seat_s = _colocated_round(w, live, seen_step, pf, cycle)
        work = live * (pf + w.n_d * step / b)  # the worker's busy time per round
        running = np.maximum(own, work)  # a busy worker's turns wait in its batch
        nxt = np.maximum(running, live * seat_s / w.seats)  # full seats: outside it
        nxt_share = np.clip((running - pf - w.env_turn_s) / nxt, 0.0, 1.0)
        done = (
            np.max(np.abs(nxt - cycle) / cycle) < _TOLERANCE
            and np.max(np.abs(nxt_share - share)) < _TOLERANCE
        )
        cycle, share = nxt, nxt_share
        b, step, seen_step = _colocated_batches(w, live, share)
        if done:
            break
    token, own, seat_s = _colocated_round(w, live, seen_step, pf, cycle)
    crit, parts = longest_path(
        w.paths,
        _own_prefill(w, hit),
        0.0,
        cycle,
        {"decode": token, "wait": cycle - own, "interference": token - seen_step},
    )
    # a worker's decode busy time over the rounds, at the batches it runs
    alive = w.alive[None, :]
    decode = (alive * w.n_d * step / b).sum(axis=1) / n
    busy = prefill + decode
    # Trajectories stay on their worker (prefix affinity): its KV seats serve the longest
    # trajectory's turns and its other trajectories'.
    others = np.maximum(w.batch / n - 1.0, 0.0) * w.turns
    mean_seat = (seat_s * live).sum(axis=1) / live.sum(axis=1)
    tput = np.maximum(busy, (others + parts["turns"]) * mean_seat / w.seats)
    return {
        "makespan_s": np.maximum(tput, crit),
        "throughput_bound_s": tput,
        "critical_path_s": crit,
        "prefill_s": prefill,
        "decode_s": decode,
        "interference_s": parts["interference"],
        "kv_wait_s": parts["wait"],
        "env_s": parts["env"],
        "tail_turns": parts["turns"],
        "prefix_hit_share": hit,
        "decode_batch": (b * alive).sum(axis=1) / alive.sum(axis=1),
        "decode_step_s": (step * live).sum(axis=1) / live.sum(axis=1),
    }


def _colocated_batches(
    w: BatchWorkload, live: np.ndarray, share: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch a colocated worker runs when its `live` trajectories each decode `share`
    of the round, its step, and the step of the batch a decoding member sees."""
    b = np.clip(live * share, 1.0, w.seats)
    return b, _step_s(w, b), _step_s(w, _seen_batch(live, share, w.seats))


def _colocated_round(
    w: BatchWorkload,
    live: np.ndarray,
    step: np.ndarray,
    pf: np.ndarray,
    cycle: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A colocated round whose turns cycle in `cycle` seconds and decode in iterations of
    `step` seconds (`_seen_batch`): the seconds per decode token of a trajectory, a mean
    turn's own work and how long it holds its KV seat.

    Chunked prefill rides in the decodes' iterations, but a trajectory's own prefill
    never interrupts its own decode (it comes before it): while it decodes, the other
    `live - 1` trajectories of its worker prefill `rho = (live - 1) * t_pf / cycle`
    seconds per second, and each of its iterations is stretched by them: a token costs
    `step / (1 - rho)` (time spent on their prefill during its decode is `rho` of that
    time)."""
    rho = np.maximum(live - 1.0, 0.0) * pf / cycle
    token = step / np.maximum(1.0 - rho, _MIN_SHARE)
    seat_s = pf + w.n_d * token  # a turn holds its KV from admission to its last token
    return token, seat_s + w.env_turn_s, seat_s


_MIN_SHARE = 0.05  # a worker saturated by others' prefill still decodes a little per second
_MAX_ITERATIONS = 100  # the rounds' fixed points converge in a few dozen at most
_TOLERANCE = 1e-10  # relative change that ends a fixed-point iteration


def disaggregated_arrays(w: BatchWorkload, p: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """Disaggregated makespan for prefill counts `p` and decode counts `d` (same shape),
    round by round over the trajectories' turns (see module docstring)."""
    p = np.asarray(p, dtype=float)
    d = np.asarray(d, dtype=float)
    t_pf, hit = _prefill(w, p, w.hit_coeff_disaggregated)
    prefill = w.batch * w.turns * t_pf / p
    kv_link = w.batch * w.turns * w.t_kv / p
    prefill_path = np.maximum(prefill, kv_link)
    # candidates x rounds
    n = w.alive[None, :]
    serve = np.maximum(t_pf, w.t_kv)[:, None]  # a turn's service at its prefill worker
    load = n * serve / p[:, None]  # prefill-stage work per worker per round
    dd = d[:, None]
    live = n / dd  # trajectories per decode worker
    seen = np.clip(live, 1.0, w.seats)  # from above: decreases to the largest fixed point
    for _ in range(_MAX_ITERATIONS):
        step, cycle, _ = _disaggregated_round(w, seen, n, dd, t_pf[:, None], serve, load)
        nxt = _seen_batch(live, w.n_d * step / cycle, w.seats)
        done = np.max(np.abs(nxt - seen) / seen) < _TOLERANCE
        seen = nxt
        if done:
            break
    step, cycle, own = _disaggregated_round(w, seen, n, dd, t_pf[:, None], serve, load)
    # the worker's mean batch (its busy time), as against the batch its members see
    b = np.clip(live * w.n_d * step / cycle, 1.0, w.seats)
    crit, parts = longest_path(
        w.paths, _own_prefill(w, hit), w.t_kv, cycle, {"decode": step, "wait": cycle - own}
    )
    decode = (n * w.n_d * _step_s(w, b) / b).sum(axis=1) / d
    tput = np.maximum(prefill_path, decode)
    rounds = n.sum(axis=1)
    return {
        "makespan_s": np.maximum(tput, crit),
        "throughput_bound_s": tput,
        "critical_path_s": crit,
        "prefill_path_s": prefill_path,
        "decode_path_s": np.maximum(decode, parts["decode"]),
        "kv_transfer_s": parts["turns"] * w.t_kv,
        "queueing_s": parts["wait"],
        "env_s": parts["env"],
        "tail_turns": parts["turns"],
        "prefix_hit_share": hit,
        "decode_batch": (b * n).sum(axis=1) / rounds,
        "decode_step_s": (step * n).sum(axis=1) / rounds,
    }


def _disaggregated_round(
    w: BatchWorkload,
    b: np.ndarray,
    n: np.ndarray,
    d: np.ndarray,
    t_pf: np.ndarray,
    serve: np.ndarray,
    load: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A disaggregated round whose members decode in batches of `b` (`_seen_batch`): the
    decode step, a mean trajectory's turn
    cycle (its own work, plus the prefill queue's wait at utilisation `load / cycle`, the
    service as irregular as the tokens turns prefill, or the decode seats' response-time
    law `n * s / (d * S)` if longer) and its own work."""
    step = _step_s(w, b)
    dec = w.n_d * step
    own = t_pf + w.t_kv + dec + w.env_turn_s
    cycle = np.maximum(
        _queued_cycle(own, load, serve * (1.0 + w.serve_cv2) / 2.0), n * dec / (d * w.seats)
    )
    return step, cycle, own


def _queued_cycle(own: np.ndarray, load: np.ndarray, serve: np.ndarray) -> np.ndarray:
    """A turn's cycle `x` when its own work `own` waits in a queue at utilisation
    `load / x` whose mean wait is `serve * u / (1 - u)` (`serve`: the mean residual work
    a turn finds ahead of it; M/G/1, Pollaczek-Khinchine: the mean service time times
    `(1 + cv^2) / 2`): the larger root of `(x - own)(x - load) = serve * load`, which
    exceeds both `own` and `load`."""
    gap = own - load
    return (own + load + np.sqrt(gap * gap + 4.0 * serve * load)) / 2.0


def feasibility(
    w: BatchWorkload, mode: str, num_decode: np.ndarray | None = None
) -> tuple[np.ndarray, Callable[[int], str]]:
    """(feasible mask, reason of element i) for colocated (`num_decode` None) or
    disaggregated candidates. Reasons are built on demand: thousands of splits stay cheap."""
    shape = (1,) if num_decode is None else np.shape(num_decode)
    msg = ""
    if not w.weights_fit:
        msg = f"weights ({w.weight_gb:.1f} GB) do not fit a worker's usable {w.mem_gb:.1f} GB"
    elif w.ctx_tail > w.h_max:
        msg = (
            f"one trajectory's KV ({w.ctx_tail:.0f} tokens) exceeds a worker's KV capacity "
            f"H_max = {w.h_max:.0f} tokens"
        )
    if msg:
        return np.zeros(shape, dtype=bool), lambda i: msg
    if num_decode is None or mode == "colocated":
        return np.ones(shape, dtype=bool), lambda i: ""
    need = w.batch * (1.0 - w.wait) * w.k_seq
    have = np.asarray(num_decode, dtype=float).reshape(shape) * w.h_max
    ok = need <= have

    def reason(i: int) -> str:
        if ok[i]:
            return ""
        return (
            f"decode KV memory: B*(1-f)*K_seq = {need:.0f} tokens > N_D*H_max = "
            f"{have[i]:.0f} tokens"
        )

    return ok, reason


def predict(
    config: PDConfig, profile: WorkloadProfile, batch: int, *, num_gpus_per_worker: int = 1
) -> Prediction:
    """Predicted makespan of one rollout batch of `batch` trajectories under `config`."""
    w = batch_workload(profile, batch, num_gpus_per_worker)
    if config.is_colocated:
        arrays = colocated_arrays(w, np.array([config.num_colocated], dtype=float))
        ok, reasons = feasibility(w, "colocated")
    else:
        arrays = disaggregated_arrays(
            w,
            np.array([config.num_prefill], dtype=float),
            np.array([config.num_decode], dtype=float),
        )
        ok, reasons = feasibility(w, "disaggregated", np.array([config.num_decode]))
    breakdown = {k: float(v[0]) for k, v in arrays.items() if k != "makespan_s"}
    return Prediction(float(arrays["makespan_s"][0]), bool(ok[0]), reasons(0), breakdown)
