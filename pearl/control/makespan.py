"""Bubble-aware makespan models of one rollout batch (paper §4.3.1).

A batch of B trajectories; each runs turns of (prefill, decode, environment). From a
`WorkloadProfile` (means per turn: `n_p` new prefill tokens, `n_d` decode tokens, context
`K`; `T` turns per trajectory; share `f` of a trajectory's life spent waiting on its
environment; and the *tail trajectory*, the one that finished last: `T_tail` turns and its
totals of new prefill tokens, decode tokens `D_tail` and environment seconds `E_tail`) and
the fitted per-worker costs (`PerfParams`). The tail was observed in batches of the
profile's size B_obs; for a batch of B its excess over the mean trajectory is scaled by
`sqrt(ln B / ln B_obs)` (the longest of B draws grows like `sqrt(2 ln B)`).

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
decode step stretched by the prefill riding in it: `t_tok = t_step * (1 + P_w/D_w)`, and
a turn holds its seat for `s = t_pf + n_d*t_tok`. Critical path: the tail's own prefills,
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

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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


@dataclass(frozen=True, slots=True)
class _Workload:
    """Scalars shared by every candidate of one prediction call."""

    batch: float
    turns: float
    tail_turns: float
    tail_new_tokens: float
    tail_cached_tokens: float
    tail_decode_tokens: float
    tail_env_s: float
    live: float
    n_new: float
    n_cached: float
    ctx: float
    working_set: float
    t_kv: float
    n_d: float
    ctx_dec: float
    k_seq: float
    env_s: float
    wait: float
    h_max: float
    seats: float  # `_seats`: sequences a worker's KV holds at once
    weights_fit: bool
    weight_gb: float
    mem_gb: float
    ctx_tail: float
    step_a: float
    step_b: float
    step_c: float
    prefill_b: float
    prefill_c: float
    hit_coeff_colocated: float
    decode_saturation_seqs: float
    hit_coeff_disaggregated: float
    hit_depth: float
    alive: np.ndarray  # `_alive_by_round`: trajectories still running in each tail round
    round_weight: np.ndarray  # 1 per round, the tail's fractional last round less
    env_turn_s: float  # a mean trajectory's time off the model per turn
    tail_turn_s: tuple[
        float, float, float
    ]  # the tail's (new tokens, decode tokens, env s) per turn


def _workload(profile: WorkloadProfile, batch: int, num_gpus_per_worker: int) -> _Workload:
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if num_gpus_per_worker < 1:
        raise ValueError(f"num_gpus_per_worker must be >= 1, got {num_gpus_per_worker}")
    hw = profile.hardware
    perf = profile.perf.scaled(num_gpus_per_worker)
    ctx = profile.context_tokens_mean
    n_d = profile.decode_tokens_per_turn
    turns = profile.turns_per_traj_mean
    # The tail was observed in batches of `profile.batch_size`; the longest of `batch` draws
    # sits further out for larger batches (the max of B draws grows like sqrt(2 ln B)).
    k = _max_scale(batch) / _max_scale(profile.batch_size)

    def tail(observed: float, mean: float) -> float:
        return observed if observed < mean else mean + (observed - mean) * k

    tail_turns = max(tail(profile.tail_turns, turns), 1.0)
    h_max = profile.kv_capacity(num_gpus_per_worker)
    alive, round_weight = _alive_by_round(profile, batch, tail_turns)
    tail_new = tail(profile.tail_new_prefill_tokens, turns * profile.new_prefill_tokens_per_turn)
    tail_decode = tail(profile.tail_decode_tokens, turns * n_d)
    tail_env = (
        tail(profile.tail_env_s, turns * profile.env_s_per_turn_mean)
        + tail_turns * profile.turn_overhead_s
    )
    return _Workload(
        batch=float(batch),
        turns=turns,
        tail_turns=tail_turns,
        tail_new_tokens=tail_new,
        tail_cached_tokens=tail_turns * profile.cached_prefix_tokens_per_turn,
        tail_decode_tokens=tail_decode,
        # time off the model: environment steps plus the world's per-turn dispatch overhead
        tail_env_s=tail_env,
        live=min(1.0, max(0.05, turns / tail_turns)),
        n_new=profile.new_prefill_tokens_per_turn,
        n_cached=profile.cached_prefix_tokens_per_turn,
        ctx=ctx,
        working_set=batch * (ctx + n_d),
        t_kv=perf.kv_transfer_s(ctx * hw.kv_bytes_per_token),
        n_d=n_d,
        ctx_dec=ctx + n_d / 2.0,
        k_seq=ctx + n_d,
        env_s=profile.env_s_per_turn_mean,
        wait=min(max(profile.env_wait_fraction, 0.0), 0.99),
        h_max=h_max,
        seats=_seats(h_max, ctx + n_d, ctx + n_d / 2.0),
        weights_fit=hw.weights_fit(num_gpus_per_worker),
        weight_gb=hw.weight_bytes / 1e9,
        mem_gb=hw.worker_memory_bytes(num_gpus_per_worker) / 1e9,
        ctx_tail=max(profile.context_tokens_p90, ctx) + n_d,
        step_a=perf.step_overhead_s,
        step_b=perf.decode_s_per_seq,
        step_c=perf.decode_s_per_ctx_token,
        prefill_b=perf.prefill_s_per_token,
        prefill_c=perf.prefill_s_per_token_ctx,
        hit_coeff_colocated=profile.cache_hit_coeff_colocated,
        decode_saturation_seqs=hw.decode_saturation_seqs,
        hit_coeff_disaggregated=profile.cache_hit_coeff_disaggregated,
        hit_depth=min(max(profile.prefix_hit_depth, 0.0), 1.0),
        alive=alive,
        round_weight=round_weight,
        # the last turn of a trajectory has no environment step after it
        env_turn_s=profile.env_s_per_turn_mean * max(turns - 1.0, 0.0) / turns
        + profile.turn_overhead_s,
        tail_turn_s=(tail_new / tail_turns, tail_decode / tail_turns, tail_env / tail_turns),
    )


def _alive_by_round(
    profile: WorkloadProfile, batch: int, tail_turns: float
) -> tuple[np.ndarray, np.ndarray]:
    """Trajectories still running while the tail runs its k-th turn, k = 1..ceil(T_tail),
    and each round's weight (the tail's last round may be fractional).

    Trajectories progress in rounds (each waits for its own turn's prefill, decode and
    environment), so while the tail is in round k the others running are those with at
    least k turns: `B * S(k)`, at least the tail itself. `S` is our coarse normal survival
    of turns per trajectory with the profile's mean and p90 (sd = (p90 - mean) / 1.2816)."""
    k_max = max(1, math.ceil(tail_turns - 1e-9))
    mu = profile.turns_per_traj_mean
    sd = (profile.turns_per_traj_p90 - mu) / 1.2816
    ks = np.arange(1, k_max + 1, dtype=float)
    if sd > 1e-6:
        z = (ks - 0.5 - mu) / (sd * math.sqrt(2.0))
        surv = np.array([0.5 * math.erfc(x) for x in z])
    else:
        surv = (ks <= mu + 0.5).astype(float)
    weight = np.ones(k_max)
    weight[-1] = tail_turns - (k_max - 1)
    return np.maximum(batch * surv, 1.0), weight


def _max_scale(batch: float) -> float:
    return math.sqrt(2.0 * math.log(max(batch, 2.0)))


def _prefill(
    w: _Workload, cache_workers: np.ndarray, hit_coeff: float
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


def _seats(h_max: float, k_seq: float, ctx_dec: float) -> float:
    """Sequences a worker's KV holds at once: admission is FIFO and allocates a whole
    context, so about one sequence's worth (`K_seq`) stays free at the head of the line."""
    if h_max <= 0:
        return 1.0
    return max(1.0, (h_max - k_seq) / ctx_dec)


_MAX_ITERATIONS = 100  # the rounds' fixed points converge in a few dozen at most
_TOLERANCE = 1e-10  # relative change of the decode batch that ends a fixed-point iteration


def _seat_path(w: _Workload, workers: np.ndarray, seat_s: np.ndarray) -> np.ndarray:
    """The tail's critical path when KV seats are the bottleneck: each of the worker's live
    trajectories cycles through a seat it holds `seat_s` per turn, so a turn's cycle is at
    least `n * seat_s / seats` (the response-time law of a closed system), for the tail's
    `T_tail` turns."""
    alive = w.batch / np.asarray(workers, dtype=float) * w.live
    return w.tail_turns * alive * seat_s / w.seats


def _step_s(w: _Workload, b: np.ndarray) -> np.ndarray:
    return w.step_a + w.step_b * np.minimum(b, w.decode_saturation_seqs) + w.step_c * b * w.ctx_dec


def _decode(w: _Workload, workers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Colocated per-worker decode concurrency, iteration time and busy time."""
    full = w.batch / np.asarray(workers, dtype=float) * (1.0 - w.wait) * w.live
    b = np.clip(full, 1.0, w.seats)
    t_step = _step_s(w, b)
    busy = w.batch * w.turns * w.n_d / workers / b * t_step
    return b, t_step, busy


def colocated_arrays(w: _Workload, n: np.ndarray) -> dict[str, np.ndarray]:
    """Colocated makespan for worker counts `n` (paper §4.3.1: PD serialised per GPU)."""
    n = np.asarray(n, dtype=float)
    t_pf, own_prefill, hit = _prefill(w, n, w.hit_coeff_colocated)
    prefill = w.batch * w.turns * t_pf / n
    b, t_step, decode = _decode(w, n)
    tput = prefill + decode
    # Chunked prefill rides in the decodes' iterations: a decode token costs a mean
    # iteration, the decode step stretched by the worker's prefill time per decode time.
    t_token = t_step * (1.0 + prefill / np.maximum(decode, 1e-9))
    own_decode = w.tail_decode_tokens * t_token
    env = w.tail_env_s
    seat_s = t_pf + w.n_d * t_token  # a turn holds its KV from admission to its last token
    crit = np.maximum(own_prefill + own_decode + env, _seat_path(w, n, seat_s))
    # Trajectories stay on their worker (prefix affinity): the tail's worker serves the
    # tail's turns and its other trajectories' through its KV seats.
    others = np.maximum(w.batch / n - 1.0, 0.0) * w.turns
    tput = np.maximum(tput, (others + w.tail_turns) * seat_s / w.seats)
    return {
        "makespan_s": np.maximum(tput, crit),
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


def disaggregated_arrays(w: _Workload, p: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
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
    tail_own = (own_prefill / w.tail_turns)[:, None] + w.t_kv + w.tail_turn_s[1] * step
    tail_own = tail_own + w.tail_turn_s[2]
    rw = w.round_weight[None, :]
    crit = ((tail_own + wait) * rw).sum(axis=1)
    own_decode = (w.tail_turn_s[1] * step * rw).sum(axis=1)
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
    w: _Workload,
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
    w: _Workload, mode: str, num_decode: np.ndarray | None = None
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
    w = _workload(profile, batch, num_gpus_per_worker)
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


def workload(profile: WorkloadProfile, batch: int, num_gpus_per_worker: int = 1) -> _Workload:
    """The scalars of one prediction call (for vectorised scoring in the decision engine)."""
    return _workload(profile, batch, num_gpus_per_worker)
