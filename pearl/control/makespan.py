"""Bubble-aware makespan models of one rollout batch (paper §4.3.1).

A batch of B trajectories; each runs turns of (prefill, decode, environment). From a
`WorkloadProfile` (means per turn: `n_p` new prefill tokens, `n_d` decode tokens, context
`K`; `T` turns per trajectory; share `f` of a trajectory's life spent waiting on its
environment; and the *tail trajectory*, the one that finished last: `T_tail` turns and its
totals of new prefill tokens, decode tokens `D_tail` and environment seconds `E_tail`) and
the fitted per-worker costs (`PerfParams`), as `pearl.control.batch_workload` reduces them
to numbers for one batch (the tail scaled to the batch size, the trajectories running in
each of the tail's rounds, a worker's KV seats).

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
  the hardware prior's estimate).

The makespan is the larger of a **throughput bound** (a worker's total work over its
capacity) and the **critical path** of the tail trajectory, including the bubbles other
work puts in its way (both are lower bounds of a real schedule).

Colocated (N workers): prefill and decode share iterations on the same GPUs (chunked
prefill). Decode concurrency per worker `b = clip(B/N * (1-f) * T/T_tail, 1, S)`:
trajectories waiting on the environment do not decode, and trajectories that finished
early (they run T of the tail's T_tail turns) no longer do. Throughput bound
`max(P_w + D_w, ((B/N - 1)*T + T_tail) * s / S)`: per-worker prefill and decode busy time
(`D_w = B*T*n_d/N / b * t_step`), and the seat time of the tail's worker (trajectories
stay on the worker that holds their prefix); a decode token costs a mean iteration, the
decode step stretched by the prefill riding in it: `t_tok = t_step * (1 + P_w/max(D_w, M))`
with `M` the makespan itself (a fixed point: prefill chunks arrive whether or not the
worker decodes, so only the share `D_w/M` of them lands in decoding iterations), and a
turn holds its seat for `s = t_pf + n_d*t_tok`. Critical path: the tail's own prefills,
`D_tail*t_tok` and `E_tail`, or, where KV seats are the bottleneck, the seat path
`T_tail * n * s / S` with `n = B/N * T/T_tail` live trajectories per worker (a turn's
cycle is at least `n*s/S`, the response-time law of a closed system).

Disaggregated (p prefill, d decode): the two stages run concurrently, and the tail is
followed round by round over its turns, because how many trajectories still run sets what
its turns wait for. In round k, `n_k = max(1, B*S(k))` trajectories run (`S`: our coarse
normal survival of turns per trajectory from the profile's mean and p90). A mean turn's
own work is `o = t_pf + t_kv + n_d*t_step(b) + e` (e: its environment and overhead); it
queues at its prefill worker (sticky routing: one queue per worker) with service
`s = max(t_pf, t_kv)` at utilisation `u = L/x`, `L = n_k*s/p`, so its cycle `x` solves the
M/M/1 `x = o + s*u/(1-u)` (closed form: the larger root of `(x-o)(x-L) = s*L`), and is at
least the decode seats' response time `n_k*n_d*t_step/(d*S)`. The decoding share of the
live trajectories sets the batch, `b = clip(n_k/d * n_d*t_step(b)/x, 1, S)` (a fixed
point: the batch sets the decode step, the step the share). The tail's round is its own
prefill, KV transfer, decode and environment per turn plus the round's wait `x - o`; the
critical path sums its rounds. Throughput bounds: prefill path `max(prefill work, KV link
time) / p`, decode path `sum_k n_k*n_d*t_step/b / d` (at least the tail's own decode).
(The same rounds for colocation, the seats' response time per round in place of the
averaged seat path, were tried: `pearl validate` 30B improved, 88% against 81% within 1%,
but PEARL's throughput on the 8B segments fell 1-4%, docs/decision-engine.md.)

Feasibility (paper §4.2): a worker's weights fit its GPUs; one trajectory's context fits a
worker's KV memory (prefill workers stage whole contexts); disaggregation needs decode KV
memory for the trajectories that decode at once, `B * (1-f) * K_seq <= N_D * H_max` with
`K_seq = K + n_d`. The paper writes `B * K_seq`; we leave out the share `f` waiting on the
environment because a decode worker frees a turn's KV when the turn ends (the next turn's
KV arrives from a prefill worker), and KV pressure short of the bound is in the seats' response
time.

Everything is our own coarse model, deliberately independent of the simulator's world.
The core works on numpy arrays so the decision engine can score thousands of splits at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pearl.control.batch_workload import BatchWorkload, batch_workload
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-turn prefill time, the tail's total prefill time and the prefix-cache hit share
    when `cache_workers` workers keep the prefix caches (see module docstring)."""
    room = cache_workers * w.h_max
    if w.working_set > 0:
        r = room / w.working_set
        hit = w.hit_depth * (1.0 - np.exp(-hit_coeff * r * r))
    else:
        hit = np.full_like(room, w.hit_depth)
    per_token = w.prefill_b + w.prefill_c * w.ctx
    t_pf = w.step_a + per_token * (w.n_new + w.n_cached * (1.0 - hit))
    tail = w.tail_turns * w.step_a + per_token * (
        w.tail_new_tokens + w.tail_cached_tokens * (1.0 - hit)
    )
    return t_pf, tail, hit


def _seat_path(w: BatchWorkload, workers: np.ndarray, seat_s: np.ndarray) -> np.ndarray:
    """The tail's critical path when KV seats are the bottleneck: each of the worker's live
    trajectories cycles through a seat it holds `seat_s` per turn, so a turn's cycle is at
    least `n * seat_s / seats` (the response-time law of a closed system), for the tail's
    `T_tail` turns."""
    alive = w.batch / np.asarray(workers, dtype=float) * w.live
    return w.tail_turns * alive * seat_s / w.seats


def _step_s(w: BatchWorkload, b: np.ndarray) -> np.ndarray:
    return w.step_a + w.step_b * np.minimum(b, w.decode_saturation_seqs) + w.step_c * b * w.ctx_dec


def _decode(w: BatchWorkload, workers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Colocated per-worker decode concurrency, iteration time and busy time."""
    full = w.batch / np.asarray(workers, dtype=float) * (1.0 - w.wait) * w.live
    b = np.clip(full, 1.0, w.seats)
    t_step = _step_s(w, b)
    busy = w.batch * w.turns * w.n_d / workers / b * t_step
    return b, t_step, busy


def colocated_arrays(w: BatchWorkload, n: np.ndarray) -> dict[str, np.ndarray]:
    """Colocated makespan for worker counts `n` (paper §4.3.1: PD serialised per GPU)."""
    n = np.asarray(n, dtype=float)
    t_pf, own_prefill, hit = _prefill(w, n, w.hit_coeff_colocated)
    prefill = w.batch * w.turns * t_pf / n
    b, t_step, decode = _decode(w, n)
    busy = prefill + decode
    env = w.tail_env_s
    # Trajectories stay on their worker (prefix affinity): the tail's worker serves the
    # tail's turns and its other trajectories' through its KV seats.
    others = np.maximum(w.batch / n - 1.0, 0.0) * w.turns

    def paths(t_token: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        own_decode = w.tail_decode_tokens * t_token
        seat_s = t_pf + w.n_d * t_token  # a turn holds its KV from admission to its last token
        crit = np.maximum(own_prefill + own_decode + env, _seat_path(w, n, seat_s))
        tput = np.maximum(busy, (others + w.tail_turns) * seat_s / w.seats)
        return np.maximum(tput, crit), tput, crit, own_decode

    # Chunked prefill rides in the decodes' iterations: a decode token costs a mean
    # iteration, the decode step stretched by the prefill time that lands in decoding
    # iterations. A worker decodes for `decode` of the batch's `makespan` seconds; prefill
    # chunks come whether or not it decodes, so that share of the worker's `prefill` time
    # rides in its `decode / t_step` iterations: the stretch is prefill per elapsed second,
    # `t_step * (1 + prefill / max(decode, makespan))` (a fixed point: the stretch sets the
    # makespan), and prefill per decode second where the decodes fill the batch's time.
    t_token = t_step * (1.0 + prefill / np.maximum(decode, 1e-9))
    makespan, tput, crit, own_decode = paths(t_token)
    for _ in range(_MAX_ITERATIONS):
        t_token = t_step * (1.0 + prefill / np.maximum(np.maximum(decode, makespan), 1e-9))
        previous = makespan
        makespan, tput, crit, own_decode = paths(t_token)
        if np.max(np.abs(makespan - previous) / previous) < _TOLERANCE:
            break
    return {
        "makespan_s": makespan,
        "throughput_bound_s": tput,
        "critical_path_s": crit,
        "prefill_s": prefill,
        "decode_s": decode,
        "interference_s": w.tail_decode_tokens * (t_token - t_step),
        "kv_wait_s": crit - own_prefill - own_decode - env,
        "env_s": np.full_like(n, env),
        "tail_turns": np.full_like(n, w.tail_turns),
        "prefix_hit_share": hit,
        "decode_batch": b,
        "decode_step_s": t_step,
    }


_MAX_ITERATIONS = 100  # the rounds' fixed points converge in a few dozen at most
_TOLERANCE = 1e-10  # relative change of the decode batch that ends a fixed-point iteration


def disaggregated_arrays(w: BatchWorkload, p: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
    """Disaggregated makespan for prefill counts `p` and decode counts `d` (same shape),
    round by round over the tail's turns (see module docstring)."""
    p = np.asarray(p, dtype=float)
    d = np.asarray(d, dtype=float)
    t_pf, own_prefill, hit = _prefill(w, p, w.hit_coeff_disaggregated)
    prefill = w.batch * w.turns * t_pf / p
    kv_link = w.batch * w.turns * w.t_kv / p
    prefill_path = np.maximum(prefill, kv_link)
    # candidates x rounds
    n = w.alive[None, :]
    serve = np.maximum(t_pf, w.t_kv)[:, None]  # a turn's service at its prefill worker
    load = n * serve / p[:, None]  # prefill-stage work per worker per round
    dd = d[:, None]
    b = np.clip(n / dd, 1.0, w.seats)  # from above: decreases to the largest fixed point
    for _ in range(_MAX_ITERATIONS):
        step, cycle, _ = _disaggregated_round(w, b, n, dd, t_pf[:, None], serve, load)
        b_next = np.clip(n / dd * (w.n_d * step) / cycle, 1.0, w.seats)
        done = np.max(np.abs(b_next - b) / b) < _TOLERANCE
        b = b_next
        if done:
            break
    step, cycle, own = _disaggregated_round(w, b, n, dd, t_pf[:, None], serve, load)
    wait = cycle - own
    own_prefill_per_turn = (own_prefill / w.tail_turns)[:, None]
    tail_own = own_prefill_per_turn + w.t_kv + w.tail_decode_per_turn * step + w.tail_env_per_turn_s
    rw = w.round_weight[None, :]
    crit = ((tail_own + wait) * rw).sum(axis=1)
    own_decode = (w.tail_decode_per_turn * step * rw).sum(axis=1)
    decode = (n * w.n_d * step / b).sum(axis=1) / d
    tput = np.maximum(prefill_path, decode)
    rounds = rw.sum()
    return {
        "makespan_s": np.maximum(tput, crit),
        "throughput_bound_s": tput,
        "critical_path_s": crit,
        "prefill_path_s": prefill_path,
        "decode_path_s": np.maximum(decode, own_decode),
        "kv_transfer_s": np.full_like(p, w.tail_turns * w.t_kv),
        "queueing_s": (wait * rw).sum(axis=1),
        "env_s": np.full_like(p, w.tail_env_s),
        "tail_turns": np.full_like(p, w.tail_turns),
        "prefix_hit_share": hit,
        "decode_batch": (b * rw).sum(axis=1) / rounds,
        "decode_step_s": (step * rw).sum(axis=1) / rounds,
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
    """A disaggregated round at decode batch `b`: the decode step, a mean trajectory's turn
    cycle (its own work, plus the prefill queue's wait at utilisation `load / cycle`, or
    the decode seats' response-time law `n * s / (d * S)` if longer) and its own work."""
    step = _step_s(w, b)
    dec = w.n_d * step
    own = t_pf + w.t_kv + dec + w.env_turn_s
    cycle = np.maximum(_queued_cycle(own, load, serve), n * dec / (d * w.seats))
    return step, cycle, own


def _queued_cycle(own: np.ndarray, load: np.ndarray, serve: np.ndarray) -> np.ndarray:
    """A turn's cycle `x` when its own work `own` waits in a queue of service time `serve`
    at utilisation `load / x` (M/M/1: `x = own + serve * u / (1 - u)`): the larger root of
    `(x - own)(x - load) = serve * load`, which exceeds both `own` and `load`."""
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
