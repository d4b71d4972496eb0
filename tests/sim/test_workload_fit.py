"""The world's workload fitted from turn records (`pearl.sim.workload_fit`, `law_fit`):
trajectories drawn from a known spec, written as turn records, fitted, and drawn again
from the fit must look alike where the simulation feels it (turns, tokens, environment)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.control.telemetry import TurnRecord, turn_record
from pearl.sim.law_fit import (
    TurnEnding,
    censored_quantiles,
    lognormal_mixture,
    normal_cdf,
    truncated_quantiles,
    turn_count_law,
)
from pearl.sim.trajectories import SampledTrajectory, TrajectorySampler
from pearl.sim.workload_fit import WorkloadFitError, fit_workload
from pearl.specs.workload import WorkloadSpec


def _record(
    tid: str, turn: int, context: int, decode: int, env: float | None, *, cached: int = 0
) -> TurnRecord:
    t = float(turn) * 100.0
    return turn_record(
        traj_id=tid, turn=turn, step=0, weight_version=0, prefill_worker="w0",
        decode_worker="w0", roles=("colocated",), context_tokens=context,
        cached_prefix_tokens=min(cached, context), decode_tokens=decode, t_queued_s=t,
        t_prefill_start_s=t, t_prefill_end_s=t, t_kv_start_s=None, t_kv_end_s=None,
        t_decode_start_s=t, t_decode_end_s=t + 1.0,
        t_env_start_s=None if env is None else t + 1.0,
        t_env_end_s=None if env is None else t + 1.0 + env,
    )  # fmt: skip


def _records(trajs: list[SampledTrajectory], *, mark_last: bool = True) -> list[TurnRecord]:
    """The records a world writes of these trajectories: the last turn without its
    environment step (the simulator's mark), or with it (pearl run's environments)."""
    out = []
    for tr in trajs:
        for i, turn in enumerate(tr.turns):
            last = i == tr.num_turns - 1
            env = None if last and mark_last else max(turn.env_s, 1e-3)
            reusable = turn.reusable_prefix_tokens  # what the cache serves when it holds it
            cached = 0 if i == 0 else turn.context_tokens if reusable is None else reusable
            out.append(
                _record(
                    f"t{tr.traj_id}", i, turn.context_tokens, turn.decode_tokens, env, cached=cached
                )
            )
    return out


def _outcomes(spec: WorkloadSpec, n: int = 2000, seed: int = 11) -> dict[str, float]:
    trajs = TrajectorySampler(spec, seed).batch(n)
    return {
        "turns": float(np.mean([t.num_turns for t in trajs])),
        "cut": float(np.mean([t.truncated for t in trajs])),
        "final_tokens": float(np.mean([t.total_tokens for t in trajs])),
        "generated": float(np.mean([t.decode_tokens for t in trajs])),
        "prefilled": float(np.mean([sum(x.context_tokens for x in t.turns) for t in trajs])),
        "env_s": float(np.mean([t.env_s - t.container_start_s for t in trajs])),
    }


def _refit(spec: WorkloadSpec, n: int = 1000, **kw: object) -> tuple[WorkloadSpec, object]:
    fit = fit_workload(_records(TrajectorySampler(spec, 0).batch(n)), **kw)  # type: ignore[arg-type]
    fitted = WorkloadSpec.model_validate(
        {**fit.workload, "context_cap_tokens": fit.max_context_tokens}
    )
    return fitted, fit


@pytest.mark.parametrize(
    "spec",
    [
        WorkloadSpec(),  # the paper's setting: half the trajectories cut by the 32K limit
        WorkloadSpec(context_cap_tokens=65536, prefix_reuse="turn"),
        WorkloadSpec(
            num_turns_median=8, num_turns_p90=14, max_turns=30, run_to_cap_fraction=0.1,
            context_cap_tokens=16384,
        ),
    ],
    ids=["default", "64k-turn", "short"],
)  # fmt: skip
def test_refit_draws_trajectories_like_the_original(spec):
    fitted, fit = _refit(spec, max_context_tokens=spec.context_cap_tokens, max_turns=spec.max_turns)
    want, got = _outcomes(spec), _outcomes(fitted)
    for key in ("turns", "final_tokens", "generated", "prefilled", "env_s"):
        assert got[key] == pytest.approx(want[key], rel=0.08), key
    assert got["cut"] == pytest.approx(want["cut"], abs=0.08)
    assert fitted.prefix_reuse == spec.prefix_reuse
    assert fitted.prompt_tokens_min >= spec.prompt_tokens_min
    assert fitted.prompt_tokens_max <= spec.prompt_tokens_max
    assert fit.samples["trajectories"] == 1000


def test_turn_law_sees_through_the_length_limit():
    """Half the default trajectories are cut by the limit: the quantiles of the counts
    seen (18 and 26 turns) understate the law (20 and 40); the likelihood recovers it."""
    fitted, _ = _refit(WorkloadSpec(), n=2000, max_context_tokens=32768, max_turns=50)
    assert fitted.num_turns_median == pytest.approx(20, rel=0.1)
    assert fitted.num_turns_p90 == pytest.approx(40, rel=0.15)
    assert fitted.run_to_cap_fraction == pytest.approx(0.25, abs=0.08)


def test_observation_law_sees_through_the_length_limit():
    """On a 16K limit most default trajectories end near it, and an observation that left no
    room ended its trajectory unrecorded: the growths seen have a p90 of ~2,100 tokens
    where the law's is 2,524 (2,500 and the template's 24). Taken as truncated at the room
    each turn left, they give the law back, and trajectories drawn from the fit are cut as
    often as the original's (0.81 against 0.86 from the growths' own quantiles)."""
    spec = WorkloadSpec(context_cap_tokens=16384)
    fitted, _ = _refit(spec, max_context_tokens=16384, max_turns=50)
    obs = fitted.observation_tokens
    assert obs.median_tokens == pytest.approx(424, rel=0.06)
    assert obs.p90_tokens == pytest.approx(2524, rel=0.06)
    want, got = _outcomes(spec), _outcomes(fitted)
    assert got["cut"] == pytest.approx(want["cut"], abs=0.03)
    for key in ("turns", "final_tokens", "prefilled"):
        assert got[key] == pytest.approx(want[key], rel=0.05), key


def test_generation_law_counts_the_cut_generations_as_lower_bounds():
    """A thinking agent (median 1,000 tokens a turn, p90 3,000) on a 16K limit: one turn in
    eleven is cut mid-generation, most of them long ones. Left out, they take the p90 to
    ~2,700; as lower bounds of what the policy would have generated, the law comes back."""
    spec = WorkloadSpec(
        context_cap_tokens=16384,
        decode_tokens={"median_tokens": 1000, "p90_tokens": 3000, "min_tokens": 8,
                       "max_tokens": 8192},
    )  # fmt: skip
    fitted, fit = _refit(spec, max_context_tokens=16384, max_turns=50)
    assert fit.samples["cut_mid_turn"] > 0.05 * fit.samples["generated"]
    assert fitted.decode_tokens.median_tokens == pytest.approx(1000, rel=0.05)
    assert fitted.decode_tokens.p90_tokens == pytest.approx(3000, rel=0.05)


def test_a_cut_generation_bounds_the_law_from_below_only():
    """A generation cut 5 tokens short of the limit says the policy would have generated at
    least 5: it raises the largest, never lowers the least."""
    recs = [
        _record("a", 0, 100, 50, 1.0), _record("a", 1, 200, 60, None),
        _record("b", 0, 100, 40, 1.0), _record("b", 1, 2043, 5, None),  # cut by 2,048
        _record("c", 0, 100, 45, 1.0), _record("c", 1, 180, 1868, None),  # cut too
    ]  # fmt: skip
    fit = fit_workload(recs, max_context_tokens=2048, max_turns=5)
    decode = fit.workload["decode_tokens"]
    assert (decode["min_tokens"], decode["max_tokens"]) == (40, 1868)
    assert fit.samples["cut_mid_turn"] == 2


@pytest.mark.parametrize("cap, noted", [(32768, False), (16384, True)])
def test_the_share_the_limit_ended_is_estimated_and_a_large_one_noted(cap, noted):
    """Under the fitted law, the trajectories the length limit ended (cut mid-generation,
    or after a last turn that left no room) are as many as the world's sampler cut (0.52
    on 32K, 0.86 on 16K); past 0.8, the fit says its turn law past the limit is a guess."""
    spec = WorkloadSpec(context_cap_tokens=cap)
    trajs = TrajectorySampler(spec, 0).batch(1000)
    fit = fit_workload(_records(trajs), max_context_tokens=cap, max_turns=50)
    share = [n for n in fit.notes if n.startswith("the length limit ended about")]
    assert bool(share) == noted
    cut = float(np.mean([t.truncated for t in trajs]))
    assert fit.limit_ended == pytest.approx(cut, abs=0.03)


def test_limits_default_to_the_largest_seen_and_say_so():
    fitted, fit = _refit(WorkloadSpec(), n=300)
    assert any("length limit not given" in n for n in fit.notes)
    assert any("turn cap not given" in n for n in fit.notes)
    assert fit.max_context_tokens > 32000


def test_runtime_records_without_a_last_turn_mark_are_all_taken():
    trajs = TrajectorySampler(WorkloadSpec(), 3).batch(200)
    fit = fit_workload(_records(trajs, mark_last=False), max_context_tokens=32768, max_turns=50)
    assert fit.samples["trajectories"] == 200
    assert any("no turn is marked" in n for n in fit.notes)


def test_unfinished_and_headless_trajectories_are_left_out():
    recs = [
        _record("a", 0, 2000, 100, 1.0), _record("a", 1, 2500, 100, None),  # finished
        _record("b", 0, 2000, 100, 1.0),  # still running
        _record("c", 1, 2500, 100, None),  # its first turn's record is missing
        _record("d", 0, 3000, 50, 2.0), _record("d", 2, 3600, 70, None),  # turn 1 unrecorded
    ]  # fmt: skip
    fit = fit_workload(recs, max_context_tokens=8192, max_turns=10)
    assert fit.samples["trajectories"] == 2  # a and d
    assert any("not finished" in n for n in fit.notes)
    assert any("no record of their first turn" in n for n in fit.notes)
    assert fit.workload["observation_tokens"]["median_tokens"] == 400  # a's only; d has a gap
    assert fit.workload["max_turns"] == 10


@pytest.mark.parametrize(
    ("cached", "mode"),
    [(2000, "prompt"), (2500, "turn"), (2600, "context")],
)
def test_prefix_reuse_is_the_least_that_explains_the_hits(cached, mode):
    recs = [
        _record("a", 0, 2000, 100, 1.0),
        _record("a", 1, 2500, 100, 1.0, cached=2000),
        _record("a", 2, 3000, 100, None, cached=cached),
    ]
    assert fit_workload(recs, max_context_tokens=8192).workload["prefix_reuse"] == mode


def test_no_complete_trajectory_and_a_too_small_limit_are_clear_errors():
    with pytest.raises(WorkloadFitError, match="no complete trajectory"):
        fit_workload([])
    recs = [_record("a", 0, 100, 3, 1.0), _record("a", 1, 200, 3, None)]
    with pytest.raises(WorkloadFitError, match="length limit, 768 tokens.*--max-len"):
        fit_workload(recs, max_context_tokens=768)
    with pytest.raises(
        WorkloadFitError, match="not below the length limit, 4096 tokens.*--max-len"
    ):
        fit_workload([_record("a", 0, 5000, 3, None)], max_context_tokens=4096)


def test_shrinking_contexts_are_counted_as_zero_and_noted():
    recs = [
        _record("a", 0, 2000, 100, 1.0), _record("a", 1, 1500, 100, 1.0),
        _record("a", 2, 2100, 100, None),
    ]  # fmt: skip
    fit = fit_workload(recs, max_context_tokens=8192)
    assert fit.workload["observation_tokens"]["min_tokens"] == 0
    assert any("shrank the context" in n for n in fit.notes)


def test_fit_writes_a_config_the_simulator_reads():
    from pearl.sim.config import config_from_dict

    _, fit = _refit(WorkloadSpec(), n=200, max_context_tokens=32768, max_turns=50)
    cfg = config_from_dict(fit.config(), "<fit>")
    assert cfg.rollout.max_context_tokens == 32768
    assert cfg.rollout.workload["template_tokens"] == 0


# -- the estimators ----------------------------------------------------------------------------
@given(st.floats(-6, 6))
def test_normal_cdf_matches_erf(x):
    assert float(normal_cdf(np.array(x))) == pytest.approx(
        0.5 * (1 + math.erf(x / math.sqrt(2))), abs=2e-7
    )


@settings(max_examples=40)
@given(
    st.lists(st.integers(1, 60), min_size=1, max_size=40),
    st.floats(0.05, 0.95),
)
def test_truncated_quantiles_without_truncation_are_the_samples(values, q):
    """Limits above every value truncate nothing: the sample's own quantile."""
    (got,) = truncated_quantiles(values, [1000] * len(values), [q])
    assert got == float(np.quantile(values, q, method="inverted_cdf"))


def test_truncated_quantiles_recover_a_law_seen_below_random_limits():
    """Draws of a lognormal (median 400, p90 2,500), 60% of them kept only below a limit
    uniform on [100, 3000] (turns near the length limit), the rest always: the kept ones'
    quantiles are far low (320 and 1,550), the estimator's are the law's. (Above the
    largest limit nothing is seen truncated, so nothing there could be told apart.)"""
    rng = np.random.default_rng(3)
    x = np.exp(rng.normal(math.log(400), math.log(2500 / 400) / 1.2815515655446004, 40_000))
    limit = np.where(rng.random(len(x)) < 0.6, rng.uniform(100, 3000, len(x)), 1e6)
    seen = x < limit
    median, p90 = truncated_quantiles(x[seen].tolist(), limit[seen].tolist(), (0.5, 0.9))
    assert np.quantile(x[seen], 0.9) < 0.7 * 2500  # what quantiles of the kept ones say
    assert median == pytest.approx(400, rel=0.05)
    assert p90 == pytest.approx(2500, rel=0.05)


@settings(max_examples=40)
@given(
    st.lists(st.integers(1, 60), min_size=1, max_size=40),
    st.floats(0.05, 0.95),
)
def test_censored_quantiles_without_censoring_are_the_samples(values, q):
    (got,) = censored_quantiles(values, [False] * len(values), [q])
    assert got == float(np.quantile(values, q, method="inverted_cdf"))


def test_censored_quantiles_recover_a_law_cut_at_random_points():
    """Draws of a lognormal (median 1,000, p90 3,000) cut at a point uniform on
    [500, 10000] (the room a turn had; a tenth are cut): the uncut ones' quantiles are low
    (911 and 2,496), the estimator's are the law's."""
    rng = np.random.default_rng(4)
    x = np.round(np.exp(rng.normal(math.log(1000), math.log(3) / 1.2815515655446004, 40_000)))
    room = np.round(rng.uniform(500, 10_000, len(x)))
    cut = x >= room
    shown = np.where(cut, room, x)
    median, p90 = censored_quantiles(shown.tolist(), cut.tolist(), (0.5, 0.9))
    assert np.quantile(x[~cut], 0.9) < 0.9 * 3000  # what the uncut ones alone say
    assert median == pytest.approx(1000, rel=0.05)
    assert p90 == pytest.approx(3000, rel=0.05)


def test_mixture_recovers_two_kinds_of_step():
    rng = np.random.default_rng(0)
    quick = np.exp(rng.normal(math.log(0.5), 0.4, 7000))
    slow = np.exp(rng.normal(math.log(20.0), 0.5, 3000))
    comps = lognormal_mixture(np.concatenate([quick, slow]).tolist())
    assert len(comps) == 2
    (w1, mu1, s1), (w2, mu2, s2) = comps
    assert (w1, w2) == (pytest.approx(0.7, abs=0.02), pytest.approx(0.3, abs=0.02))
    assert math.exp(mu1) == pytest.approx(0.5, rel=0.05)
    assert math.exp(mu2) == pytest.approx(20.0, rel=0.05)
    assert (s1, s2) == (pytest.approx(0.4, rel=0.1), pytest.approx(0.5, rel=0.1))


def test_mixture_of_one_kind_is_one_component():
    rng = np.random.default_rng(1)
    comps = lognormal_mixture(np.exp(rng.normal(1.0, 0.6, 5000)).tolist())
    assert len(comps) == 1
    assert comps[0][1] == pytest.approx(1.0, abs=0.05)


@settings(max_examples=15, deadline=None)
@given(
    median=st.floats(4, 30),
    ratio=st.floats(1.2, 2.5),
    f=st.floats(0.0, 0.4),
    seed=st.integers(0, 1000),
)
def test_turn_law_recovers_uncensored_draws(median, ratio, f, seed):
    """Without the length limit the likelihood is the sampler's own law: it recovers it."""
    spec = WorkloadSpec(
        num_turns_median=median, num_turns_p90=median * ratio, min_turns=1, max_turns=60,
        run_to_cap_fraction=f,
    )  # fmt: skip
    rng_draws = TrajectorySampler(spec, seed)
    counts = [rng_draws._num_turns() for _ in range(3000)]
    law = turn_count_law([TurnEnding(n) for n in counts], 1, 60)
    assert law.median == pytest.approx(median, rel=0.1)
    assert law.p90 == pytest.approx(median * ratio, rel=0.15)
    assert law.run_to_cap_fraction == pytest.approx(f, abs=0.04)


_turn = st.tuples(
    st.integers(0, 40_000),  # context
    st.integers(0, 5_000),  # generated
    st.one_of(st.none(), st.floats(0, 500)),  # environment step
    st.integers(0, 40_000),  # cached
)


@settings(max_examples=60, deadline=None)
@given(
    trajs=st.lists(st.lists(_turn, min_size=1, max_size=6), min_size=1, max_size=8),
    cap=st.one_of(st.none(), st.integers(1, 50_000)),
    max_turns=st.one_of(st.none(), st.integers(1, 10)),
)
def test_any_records_give_a_valid_workload_or_a_clear_error(trajs, cap, max_turns):
    """Whatever a telemetry file holds, the fit is a workload the world runs, or a
    `WorkloadFitError` saying why (never another exception)."""
    recs = [
        _record(f"t{i}", j, ctx, dec, env, cached=cached)
        for i, turns in enumerate(trajs)
        for j, (ctx, dec, env, cached) in enumerate(turns)
    ]
    try:
        fit = fit_workload(recs, max_context_tokens=cap, max_turns=max_turns)
    except WorkloadFitError as err:
        assert str(err)
        return
    spec = WorkloadSpec.model_validate(
        {**fit.workload, "context_cap_tokens": fit.max_context_tokens}
    )
    assert spec.max_turns >= spec.min_turns >= 1
    assert 0.0 <= spec.run_to_cap_fraction <= 1.0
