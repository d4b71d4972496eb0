"""The runtime tracker: hand-computed workload statistics, EMAs, and fits that recover known
coefficients from many samples and lean on the prior with few."""

import math
from pathlib import Path

import numpy as np
import pytest

from pearl.control.fit import fit_with_prior
from pearl.control.profile import (
    TRAJECTORY_SAMPLE_SIZE,
    HardwarePrior,
    ProfileError,
    WorkloadProfile,
)
from pearl.control.telemetry import TurnRecord, WorkerStepRecord
from pearl.control.telemetry_jsonl import read_jsonl
from pearl.control.tracker import RuntimeTracker
from pearl.control.workload_stats import trajectory_totals, workload_stats

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "telemetry.jsonl"
HW = HardwarePrior(
    weight_bytes=16.38e9,
    kv_bytes_per_token=147456.0,
    flops_per_token=2 * 8.19e9,
    attn_flops_per_token_ctx=4.0 * 36 * 32 * 128,
    gpu_flops_per_s=989e12,
    gpu_hbm_bytes_per_s=3.35e12,
    gpu_hbm_bytes=80e9,
)
# The "true" iteration cost the synthetic telemetry follows: a, b_p, b_d, c_ctx.
TRUE = np.array([0.012, 3.5e-5, 8e-5, 9e-8])


def iterations(n: int, seed: int = 0, step: int = 0) -> list[WorkerStepRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prefill = int(rng.choice([0, 0, rng.integers(100, 8192)]))
        dec = int(rng.integers(1, 64))
        ctx = int(dec * rng.integers(1000, 30000))
        t = TRUE @ np.array([1.0, prefill, dec, ctx]) * rng.lognormal(0, 0.03)
        out.append(WorkerStepRecord("w0", "colocated", step, float(i), dec + (prefill > 0),
                                    prefill, dec, ctx, float(t)))  # fmt: skip
    return out


def mk_turn(traj, turn, t0, *, env=1.0, new=100, cached=900, dec=50, kv=None, step=0):
    kv_pair = (t0 + 0.2, t0 + 0.2 + kv) if kv is not None else (None, None)
    d0 = kv_pair[1] if kv is not None else t0 + 0.2
    env_pair = (d0 + 1.0, d0 + 1.0 + env) if env is not None else (None, None)
    return TurnRecord(traj, turn, step, 0, "w0", "w1", ("prefill", "decode"), new, cached, dec,
                      new + cached, t0, t0 + 0.1, t0 + 0.2, *kv_pair, d0, d0 + 1.0,
                      *env_pair)  # fmt: skip


def test_workload_stats_hand_computed():
    """Two trajectories (3 and 2 turns): means, tail, final context and env-wait share."""
    a = [
        mk_turn("a", 0, 0.0, env=2.0),
        mk_turn("a", 1, 3.2, env=2.0),
        mk_turn("a", 2, 6.4, env=None),
    ]
    b = [mk_turn("b", 0, 0.0, env=4.0, new=500), mk_turn("b", 1, 5.2, env=None, new=500)]
    s = workload_stats(a + b)
    assert s["batch_size"] == 2
    assert s["turns_per_traj_mean"] == 2.5 and s["turns_per_traj_max"] == 3
    # own (new-to-the-trajectory) tokens: the first turns' recorded 100 and 500; the later
    # turns' contexts do not grow past the previous turn's context + decode, so 0
    assert s["new_prefill_tokens_per_turn"] == pytest.approx((100 + 500) / 5)
    assert s["cached_prefix_tokens_per_turn"] == pytest.approx((900 + 1000 + 1000 + 900 + 1400) / 5)
    assert s["context_tokens_mean"] == pytest.approx((3 * 1000 + 2 * 1400) / 5)
    assert s["traj_context_tokens_mean"] == pytest.approx(((1000 + 50) + (1400 + 50)) / 2)
    assert s["env_s_per_turn_mean"] == pytest.approx(8.0 / 3)
    # a lives 0 -> 7.6 s (waits 4 s), b lives 0 -> 6.4 s (waits 4 s)
    assert s["env_wait_fraction"] == pytest.approx(8.0 / 14.0)
    # the tail is a (ends at 7.6 s, b at 6.4 s): 3 turns, 300 new, 150 decoded, 4 s of env
    assert (s["tail_turns"], s["tail_new_prefill_tokens"]) == (3, 100)
    assert (s["tail_decode_tokens"], s["tail_env_s"]) == (150, pytest.approx(4.0))


def test_fit_recovers_true_coefficients_with_many_samples():
    tracker = RuntimeTracker(HW)
    prof = tracker.observe_step([], iterations(3000))
    got = [prof.perf.step_overhead_s, prof.perf.prefill_s_per_token,
           prof.perf.decode_s_per_seq, prof.perf.decode_s_per_ctx_token]  # fmt: skip
    assert got == pytest.approx(list(TRUE), rel=0.08)
    assert prof.step_fit.num_samples == 3000 and prof.step_fit.confidence > 0.9
    assert prof.step_fit.rel_rms_residual < 0.06


def test_few_samples_stay_near_the_prior_and_say_so():
    prior = HW.perf_prior()
    prof = RuntimeTracker(HW).observe_step([], iterations(3))
    assert prof.step_fit.num_samples == 3 and prof.step_fit.confidence < 0.2
    # each coefficient stays within a factor of 2 of its prior
    for name in ("step_overhead_s", "prefill_s_per_token", "decode_s_per_ctx_token"):
        assert 0.5 < getattr(prof.perf, name) / getattr(prior, name) < 2.0
    empty = RuntimeTracker(HW).observe_step([], [])
    assert empty.perf == prior and empty.step_fit.confidence == 0.0


def test_kv_fit_recovers_bandwidth():
    turns = [mk_turn(f"t{i}", 0, float(i), env=None, new=n, cached=0,
                     kv=0.003 + n * HW.kv_bytes_per_token / 20e9)
             for i, n in enumerate(range(500, 20000, 500))]  # fmt: skip
    prof = RuntimeTracker(HW).observe_step(turns, [])
    assert 1 / prof.perf.kv_s_per_byte == pytest.approx(20e9, rel=0.05)
    assert prof.kv_fit.num_samples == len(turns)


def test_ema_blends_later_steps():
    """The first step replaces the prior's statistics; the second is blended with alpha."""
    tracker = RuntimeTracker(HW, alpha=0.25)
    one = [mk_turn("a", 0, 0.0, env=None, dec=100)]
    two = [mk_turn("b", 0, 0.0, env=None, dec=300, step=1)]
    assert tracker.observe_step(one, []).decode_tokens_per_turn == 100
    prof = tracker.observe_step(two, [])
    assert prof.decode_tokens_per_turn == pytest.approx(0.25 * 300 + 0.75 * 100)
    assert prof.num_steps == 2 and prof.num_turns == 2


def test_first_turns_replace_the_prior_even_after_a_turnless_step():
    tracker = RuntimeTracker(HW, alpha=0.25)
    tracker.observe_step([], iterations(50))
    prof = tracker.observe_step([mk_turn("a", 0, 0.0, env=None, dec=123)], [])
    assert prof.decode_tokens_per_turn == 123 and prof.num_steps == 2


def test_step_without_samples_keeps_fitted_perf():
    tracker = RuntimeTracker(HW)
    fitted = tracker.observe_step([], iterations(500)).perf
    assert tracker.observe_step([mk_turn("a", 0, 0.0, env=None)], []).perf == fitted


def test_fit_with_prior_keeps_coefficients_non_negative():
    t = np.arange(1.0, 10.0)
    x = np.stack([np.ones_like(t), t], axis=1)
    y = 10.0 - t  # decreasing: an unconstrained slope would be negative
    theta, q = fit_with_prior(x, y, np.array([1.0, 1.0]), prior_rel_sd=100.0)
    assert np.all(theta >= 0) and theta[1] == 0.0 and q.num_samples == 9


def test_example_telemetry_profile_round_trips():
    tel = read_jsonl(EXAMPLE)
    tracker = RuntimeTracker(HW)
    for _, turns, steps in tel.by_step():
        tracker.observe_step(turns, steps)
    prof = tracker.profile
    assert prof.num_steps == 2 and prof.step_fit.confidence > 0.5 and prof.kv_fit.num_samples > 0
    assert 10 <= prof.turns_per_traj_mean <= 30 and 0 < prof.prefix_hit_rate < 1
    assert WorkloadProfile.from_json(prof.to_json()) == prof


def growing_traj(traj, num_turns, *, worker="w0", step=0, own=1000, dec=100, cached_share=1.0,
                 roles=("colocated",)):  # fmt: skip
    """Turns whose context grows by `own` + the previous turn's decode; the cache served
    `cached_share` of the reusable prefix."""
    out, ctx, t0 = [], 0, 0.0
    for k in range(num_turns):
        ctx = ctx + own + (dec if k else 0)
        reusable = ctx - own
        cached = int(round(reusable * cached_share))
        dw = None if roles == ("colocated",) else "wd"
        last = k == num_turns - 1
        out.append(TurnRecord(traj, k, step, 0, worker, dw, roles, ctx - cached, cached, dec,
                              ctx, t0, t0, t0 + 0.1, None, None, t0 + 0.1, t0 + 1.0,
                              None if last else t0 + 1.0, None if last else t0 + 2.0))  # fmt: skip
        t0 += 2.0
    return out


def test_own_tokens_and_reusable_prefix_do_not_depend_on_cache_hits():
    """The same trajectories with a cache that served everything or nothing: the turns'
    own tokens (context growth) and the reusable prefix are the same statistics."""
    hit = growing_traj("a", 4, cached_share=1.0)
    miss = growing_traj("a", 4, cached_share=0.0)
    s_hit, s_miss = workload_stats(hit), workload_stats(miss)
    # turn 0 prefills 1000 own tokens; turns 1..3 grow by 1000 (own) + 100 (last decode)
    assert s_hit["new_prefill_tokens_per_turn"] == s_miss["new_prefill_tokens_per_turn"] == 1000
    # contexts 1000, 2100, 3200, 4300: reusable 0, 1100, 2200, 3300
    assert s_miss["cached_prefix_tokens_per_turn"] == pytest.approx(6600 / 4)
    assert s_hit["tail_new_prefill_tokens"] == s_miss["tail_new_prefill_tokens"] == 4000


@pytest.mark.parametrize("share", [0.25, 0.5, 0.75])
def test_cache_hit_coefficient_inverts_the_hit_curve(share):
    """c = -ln(1 - h/depth) / r^2 with r = W*H_max / (B*K_seq): plugged back into the
    makespan model's curve, it reproduces the observed hit share at the observed room.
    Here a share of the trajectories hits fully (depth 1) and the rest misses."""
    hits = round(8 * share)
    turns = [t for i in range(8) for t in
             growing_traj(f"t{i}", 4, worker=f"w{i % 2}", own=30000,
                          cached_share=1.0 if i < hits else 0.0)]  # fmt: skip
    s = workload_stats(turns, HW)
    c = s["cache_hit_coeff_colocated"]
    assert s["prefix_hit_depth"] == pytest.approx(1.0)
    assert "cache_hit_coeff_disaggregated" not in s
    r = 2 * HW.kv_capacity_tokens() / (8 * (s["context_tokens_mean"] + 100))
    served = sum(t.cached_prefix_tokens for t in turns)
    reusable = sum(t.context_tokens - 30000 for t in turns)
    assert 0.5 < r < 2.0  # the room is in the informative range
    assert 1 - math.exp(-c * r * r) == pytest.approx(served / reusable, rel=1e-6)
    dis = [t for i in range(8) for t in growing_traj(
        f"t{i}", 4, worker="wp", own=30000, cached_share=1.0 if i < hits else 0.0,
        roles=("prefill", "decode"))
    ]  # fmt: skip
    assert "cache_hit_coeff_disaggregated" in workload_stats(dis, HW)


@pytest.mark.parametrize("share", [0.2, 0.5])
def test_prefix_hit_depth_is_the_share_a_hit_serves(share):
    """Every turn hits but serves only `share` of its reusable prefix (a re-rendered
    history): the depth is that share, and the hits carry no room information."""
    turns = [t for i in range(8) for t in
             growing_traj(f"t{i}", 4, worker=f"w{i % 2}", own=30000, cached_share=share)]  # fmt: skip
    s = workload_stats(turns, HW)
    assert s["prefix_hit_depth"] == pytest.approx(share, rel=1e-3)
    assert "cache_hit_coeff_colocated" not in s


def test_full_hits_carry_no_cache_information():
    turns = growing_traj("a", 4, cached_share=1.0)
    assert "cache_hit_coeff_colocated" not in workload_stats(turns, HW)


def test_decode_only_iterations_fix_the_decode_terms():
    """Disaggregated telemetry: decode-only iterations follow a + b_d*n + c*ctx, prefill-only
    ones a + b_p*tokens; the staged fit recovers the decode terms from the former."""
    rng = np.random.default_rng(1)
    a, b_p, b_d, c = 0.004, 2e-5, 1e-3, 4e-8
    rows = []
    for i in range(400):
        n = int(rng.integers(1, 16))
        ctx = n * int(rng.integers(2000, 20000))
        rows.append(WorkerStepRecord("wd", "decode", 0, float(i), n, 0, n, ctx,
                                     a + b_d * n + c * ctx))  # fmt: skip
        tok = int(rng.integers(1000, 16000))
        rows.append(WorkerStepRecord("wp", "prefill", 0, float(i), 1, tok, 0, 0, a + b_p * tok))
    perf, q = RuntimeTracker(HW)._fit_iterations(rows)
    got = [perf.step_overhead_s, perf.decode_s_per_seq, perf.decode_s_per_ctx_token]
    assert got == pytest.approx([a, b_d, c], rel=0.05)
    assert perf.prefill_s_per_token == pytest.approx(b_p, rel=0.05)
    assert q.num_samples == 800 and q.rel_rms_residual < 0.02


def test_fitted_prefill_cost_is_split_not_added_to_attention():
    """Iteration records see a prefill token's whole cost at the turns' context: the model's
    `b_p + c_attn*K` at that context equals the fitted per-token cost."""
    rows = [WorkerStepRecord("wp", "prefill", 0, float(i), 1, tok, 0, 0, 0.01 + 5e-5 * tok)
            for i, tok in enumerate(range(1000, 60000, 500))]  # fmt: skip
    perf, _ = RuntimeTracker(HW)._fit_iterations(rows, context_tokens=12000.0)
    per_token = perf.prefill_s_per_token + perf.prefill_s_per_token_ctx * 12000.0
    theta, _ = fit_with_prior(
        np.array([(1.0, r.prefill_tokens) for r in rows]),
        np.array([r.step_time_s for r in rows]),
        np.array([HW.perf_prior().step_overhead_s, HW.perf_prior().prefill_s_per_token]),
    )
    assert per_token == pytest.approx(theta[1], rel=0.05)
    ratio = perf.prefill_s_per_token_ctx / perf.prefill_s_per_token
    prior = HW.perf_prior()
    assert ratio == pytest.approx(prior.prefill_s_per_token_ctx / prior.prefill_s_per_token)


def test_a_prior_several_times_too_fast_is_corrected_by_level():
    """Iterations 8x slower than the prior (a CPU slot's Python overhead): the fit follows
    the data, not a ridge around a prior that is wrong by one common factor."""
    prior = HW.perf_prior()
    rng = np.random.default_rng(3)
    steps = []
    for i in range(400):
        pf, dec = int(rng.integers(0, 4000)), int(rng.integers(1, 64))
        ctx = dec * 2000
        t = 8.0 * (
            prior.step_overhead_s
            + pf * prior.prefill_s_per_token
            + dec * prior.decode_s_per_seq
            + ctx * prior.decode_s_per_ctx_token
        )
        t *= float(rng.uniform(0.9, 1.1))
        steps.append(WorkerStepRecord("w0", "colocated", 0, float(i), dec + (pf > 0),
                                      pf, dec, ctx, t))  # fmt: skip
    prof = RuntimeTracker(HW).observe_step([], steps)
    assert prof.perf.step_overhead_s / prior.step_overhead_s == pytest.approx(8.0, rel=0.3)
    assert prof.perf.decode_s_per_seq / prior.decode_s_per_seq == pytest.approx(8.0, rel=0.3)


def test_engine_reported_kv_capacity_becomes_h_max():
    """A worker that reports its KV pool (as vLLM logs it) sets the profile's H_max; other
    worker sizes are rescaled through the memory per GPU the report implies."""
    from pearl.control.makespan import predict
    from pearl.control.plan import PDConfig
    from pearl.control.tracker import RuntimeTracker

    tracker = RuntimeTracker(HW)
    rows = [
        WorkerStepRecord("w0", "colocated", 0, float(i), 4, 100, 4, 40_000, 0.02,
                         kv_capacity_tokens=50_000)
        for i in range(5)
    ]  # fmt: skip
    prof = tracker.observe_step([mk_turn("a", 0, 0.0, env=None)], rows)
    assert prof.kv_capacity_tokens == 50_000
    assert prof.kv_capacity(HW.gpus_per_worker) == 50_000
    two = prof.kv_capacity(2 * HW.gpus_per_worker)
    per_gpu = (50_000 * HW.kv_bytes_per_token + HW.weight_bytes) / HW.gpus_per_worker
    expected = (2 * HW.gpus_per_worker * per_gpu - HW.weight_bytes) / HW.kv_bytes_per_token
    assert two == pytest.approx(expected)
    # a later step without reports keeps the reported value; the prior is only a fallback
    later = tracker.observe_step([mk_turn("b", 0, 0.0, env=None, step=1)], [])
    assert later.kv_capacity_tokens == 50_000
    assert prof.to_json()["kv_capacity_tokens"] == 50_000
    pred = predict(PDConfig.colocated(1), prof, 8)
    assert pred.feasible or "KV" in pred.reason


def test_trajectory_totals_of_finished_trajectories():
    """One sample per finished trajectory: turns, new tokens (context growth), the
    reusable rest of its contexts, decode tokens and environment seconds; a trajectory
    still running at the step's end is left out."""
    a = [mk_turn("a", 0, 0.0, env=2.0), mk_turn("a", 1, 3.2, env=2.0),
         mk_turn("a", 2, 6.4, env=None)]  # fmt: skip
    b = [mk_turn("b", 0, 0.0, env=4.0, new=500), mk_turn("b", 1, 5.2, env=None, new=500)]
    running = [mk_turn("c", 0, 0.0, env=1.0)]
    got = trajectory_totals(a + b + running)
    assert got == ((3.0, 100.0, 2900.0, 150.0, 4.0), (2.0, 500.0, 2300.0, 100.0, 4.0))


def test_trajectory_totals_where_every_turn_has_an_environment_step():
    """The runtime's environments also run after the last turn (they score it): with no
    trajectory marked finished, every trajectory of the step is one, its last environment
    step counted, as `workload_stats` counts its turns."""
    a = [mk_turn("a", 0, 0.0, env=2.0), mk_turn("a", 1, 3.2, env=3.0)]
    b = [mk_turn("b", 0, 0.0, env=4.0, new=500)]
    got = trajectory_totals(a + b)
    assert got == ((2.0, 100.0, 1900.0, 100.0, 5.0), (1.0, 500.0, 900.0, 50.0, 4.0))
    assert workload_stats(a + b)["turns_per_traj_mean"] == 1.5


def test_profile_keeps_the_newest_trajectories():
    """The sample is a window: the newest finished trajectories, at most
    TRAJECTORY_SAMPLE_SIZE, survive a JSON round trip."""
    tracker = RuntimeTracker(HW)
    per_step = 200
    for step in range(4):
        turns = [t for i in range(per_step) for t in growing_traj(f"s{step}-{i}", 3, step=step)]
        tracker.observe_step(turns, [])
    prof = tracker.profile
    assert len(prof.trajectory_sample) == TRAJECTORY_SAMPLE_SIZE < 4 * per_step
    assert WorkloadProfile.from_json(prof.to_json()) == prof
    assert prof.prefill_tokens_cv2 >= 0


@pytest.mark.parametrize(
    ("sample", "field", "says"),
    [
        ([[1, 2, 3, 4]], "trajectory_sample[0]", "expected [turns"),
        ([[0, 1, 1, 1, 1]], "trajectory_sample[0]", "turns must be >= 1"),
        ([[3, 1, 1, 1, -1]], "trajectory_sample[0]", ">= 0"),
        ("x", "trajectory_sample", "expected a list"),
    ],
)
def test_bad_trajectory_sample_names_the_field(sample, field, says):
    doc = WorkloadProfile.prior(HW).to_json()
    doc["trajectory_sample"] = sample
    with pytest.raises(ProfileError) as e:
        WorkloadProfile.from_json(doc, "p.json")
    assert field in str(e.value) and says in str(e.value) and "p.json" in str(e.value)


def test_profiles_without_a_sample_still_load():
    """Profiles written before the sample existed load with none (the engine then follows
    the observed tail) and M/M/1 prefill queues (cv^2 = 1)."""
    doc = WorkloadProfile.prior(HW).to_json()
    del doc["trajectory_sample"], doc["prefill_tokens_cv2"]
    prof = WorkloadProfile.from_json(doc)
    assert prof.trajectory_sample == () and prof.prefill_tokens_cv2 == 1.0
