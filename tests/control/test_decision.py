"""The PD decision engine: enumeration, hysteresis, forced switches, and model invariants."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.control.decision import DecisionConfig, DecisionEngine, at_budget
from pearl.control.makespan import predict
from pearl.control.plan import PDConfig
from pearl.control.profile import HardwarePrior, WorkloadProfile

H100_8B = HardwarePrior(
    weight_bytes=16.38e9,
    kv_bytes_per_token=147456.0,
    flops_per_token=2 * 8.19e9,
    attn_flops_per_token_ctx=4.0 * 36 * 32 * 128,
    gpu_flops_per_s=989e12,
    gpu_hbm_bytes_per_s=3.35e12,
    gpu_hbm_bytes=80e9,
)


def swe_profile(**kw) -> WorkloadProfile:
    return WorkloadProfile.prior(H100_8B, **kw)


profiles = st.builds(
    swe_profile,
    turns_per_traj_mean=st.floats(3, 40),
    turns_per_traj_max=st.floats(40, 60),
    new_prefill_tokens_per_turn=st.floats(100, 15000),
    decode_tokens_per_turn=st.floats(20, 2000),
    context_tokens_mean=st.floats(15000, 20000),
    context_tokens_p90=st.floats(20000, 30000),
    env_s_per_turn_mean=st.floats(0, 30),
    env_wait_fraction=st.floats(0, 0.9),
    tail_turns=st.floats(10, 60),
    tail_decode_tokens=st.floats(1000, 40000),
    tail_env_s=st.floats(0, 1000),
)
configs = st.one_of(
    st.integers(1, 24).map(PDConfig.colocated),
    st.tuples(st.integers(1, 12), st.integers(1, 12)).map(lambda t: PDConfig.disaggregated(*t)),
)


def test_enumerates_colocation_and_every_split():
    """N workers give colocated:N and disaggregated:p:(N-p) for p = 1..N-1."""
    d = DecisionEngine().decide(swe_profile(), 8, 64)
    names = [str(c.config) for c in d.candidates]
    assert names == ["colocated:8"] + [f"disaggregated:{p}:{8 - p}" for p in range(1, 8)]
    assert (
        d.chosen
        == min(
            (c for c in d.candidates if c.prediction.feasible),
            key=lambda c: c.prediction.makespan_s,
        ).config
    )
    assert d.switch and not d.forced and d.current is None


def test_candidates_match_scalar_predictions():
    """Every lazily built candidate (direct or bulk path) equals a scalar predict()."""
    prof = swe_profile()
    d = DecisionEngine().decide(prof, 40, 64)
    first = d.candidates[7]  # built before the bulk conversion kicks in
    everything = list(d.candidates)
    assert everything[7] == first and len(everything) == 40
    for i in (0, 1, 7, 20, 39):
        c = everything[i]
        ref = predict(c.config, prof, 64)
        assert c.prediction.makespan_s == pytest.approx(ref.makespan_s, rel=1e-12)
        assert c.prediction.feasible == ref.feasible and c.prediction.reason == ref.reason
        assert c.prediction.breakdown == pytest.approx(ref.breakdown, rel=1e-12)
    assert d.candidates[-1].config == PDConfig.disaggregated(39, 1)


def test_one_worker_is_colocated_only():
    d = DecisionEngine().decide(swe_profile(), 1, 64)
    assert [str(c.config) for c in d.candidates] == ["colocated:1"]


def test_budget_zero_rejected():
    with pytest.raises(ValueError, match="budget"):
        DecisionEngine().decide(swe_profile(), 0, 64)


def test_modes_restrict_candidates():
    d = DecisionEngine().decide(swe_profile(), 6, 64, modes=("disaggregated",))
    assert all(not c.config.is_colocated for c in d.candidates)
    with pytest.raises(ValueError):
        DecisionEngine().decide(swe_profile(), 6, 64, modes=("pipelined",))


def test_splits_only_on_one_worker_run_colocated_until_the_budget_grows():
    """modes=("disaggregated",) with one worker has no candidate of its own: the engine
    chooses colocation and says why (it raised IndexError and stopped the controller),
    and leaves it for the best split once two workers are there."""
    eng = DecisionEngine()
    d = eng.decide(swe_profile(), 1, 64, PDConfig.disaggregated(1, 1), modes=("disaggregated",))
    assert d.chosen == PDConfig.colocated(1) and d.switch and d.forced
    assert "split needs 2 workers" in d.reason and d.feasible
    assert [str(c.config) for c in d.candidates] == ["colocated:1"]
    grown = eng.decide(swe_profile(), 4, 64, d.chosen, modes=("disaggregated",))
    assert not grown.chosen.is_colocated


def test_hysteresis_mode_change_needs_more_than_ratio_change():
    """With a saving between the two thresholds, a ratio change happens but a mode change not."""
    prof = swe_profile(new_prefill_tokens_per_turn=12000, env_s_per_turn_mean=2.0)
    eng = DecisionEngine(DecisionConfig(mode_switch_threshold=0.0, ratio_switch_threshold=0.0))
    free = eng.decide(prof, 16, 64)
    splits = [c for c in free.candidates if not c.config.is_colocated and c.prediction.feasible]
    cands = {str(c.config): c.prediction.makespan_s for c in splits}
    worst_split = max(splits, key=lambda c: c.prediction.makespan_s).config
    m_cur = cands[str(worst_split)]
    best_split_m = min(cands.values())
    ratio_gain = (m_cur - best_split_m) / m_cur
    assert ratio_gain > 0.01
    strict_modes = DecisionEngine(DecisionConfig(0.99, ratio_gain / 2))
    d = strict_modes.decide(prof, 16, 64, current=worst_split)
    assert not d.chosen.is_colocated and d.chosen != worst_split and d.switch
    assert "ratio change" in d.reason
    lazy = DecisionEngine(DecisionConfig(0.99, min(0.98, ratio_gain * 2)))
    d = lazy.decide(prof, 16, 64, current=worst_split)
    assert d.chosen == worst_split and not d.switch and "keep" in d.reason


def test_infeasible_current_forces_switch():
    """disaggregated:7:1 cannot hold the batch's KV on one decode worker: forced switch."""
    prof = swe_profile(context_tokens_mean=20000)
    d = DecisionEngine(DecisionConfig(0.99, 0.99)).decide(prof, 8, 64, PDConfig.disaggregated(7, 1))
    assert d.forced and d.switch and d.feasible
    assert d.chosen != PDConfig.disaggregated(7, 1)
    assert d.candidate(d.chosen).prediction.feasible
    assert "infeasible" in d.reason and "B*(1-f)*K_seq" in d.reason


def test_no_feasible_config_is_reported():
    hw = HardwarePrior(200e9, 1.0, 1.0, 1.0, 1.0, 1.0, 80e9)
    d = DecisionEngine().decide(WorkloadProfile.prior(hw), 4, 8, PDConfig.colocated(4))
    assert not d.feasible and "no feasible" in d.reason and "weights" in d.reason


def test_fixed_config_is_rescaled_and_kept():
    d = DecisionEngine().decide(swe_profile(), 16, 64, fixed=PDConfig.disaggregated(1, 3))
    assert d.chosen == PDConfig.disaggregated(4, 12) and len(d.candidates) == 1


def test_at_budget():
    assert at_budget(PDConfig.disaggregated(3, 5), 16) == PDConfig.disaggregated(6, 10)
    assert at_budget(PDConfig.disaggregated(1, 7), 2) == PDConfig.disaggregated(1, 1)
    assert at_budget(PDConfig.disaggregated(1, 1), 1) is None
    assert at_budget(PDConfig.colocated(3), 5) == PDConfig.colocated(5)


def test_decision_json_lists_every_candidate():
    doc = DecisionEngine().decide(swe_profile(), 4, 64, PDConfig.colocated(4)).to_json()
    assert [c["config"] for c in doc["candidates"]][0] == "colocated:4"
    assert len(doc["candidates"]) == 4 and "breakdown" in doc["candidates"][1]


# -- invariants --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(prof=profiles, budget=st.integers(1, 40), batch=st.integers(1, 128))
def test_best_makespan_never_grows_with_budget(prof, budget, batch):
    """More workers never make the best feasible prediction worse."""
    eng = DecisionEngine()
    small = eng.decide(prof, budget, batch)
    large = eng.decide(prof, budget + 1, batch)
    if small.feasible:
        assert large.feasible
        assert large.predicted_makespan_s <= small.predicted_makespan_s * (1 + 1e-9)


@settings(max_examples=80, deadline=None)
@given(prof=profiles, p=st.integers(1, 16), d=st.integers(1, 32), batch=st.integers(1, 128))
def test_more_decode_workers_never_lengthen_decode_path(prof, p, d, batch):
    """The decode path never grows with a decode worker. The makespan may, a little: the
    other trajectories' turns come back to the prefill queue sooner and the tail waits
    longer there (a closed system); a tail that decodes much less than the mean turn loses
    more in the queue than it gains in decode (a few percent at most)."""
    a = predict(PDConfig.disaggregated(p, d), prof, batch)
    b = predict(PDConfig.disaggregated(p, d + 1), prof, batch)
    assert b.breakdown["decode_path_s"] <= a.breakdown["decode_path_s"] * (1 + 1e-9)
    assert b.makespan_s <= a.makespan_s * 1.10
    assert b.feasible or not a.feasible


@settings(max_examples=60, deadline=None)
@given(prof=profiles, budget=st.integers(1, 24), current=configs, batch=st.integers(8, 128))
def test_constant_profile_never_flip_flops(prof, budget, current, batch):
    """Feeding each choice back as the current config settles after at most one switch."""
    eng = DecisionEngine()
    cur, switches = current, 0
    for _ in range(4):
        d = eng.decide(prof, budget, batch, cur)
        switches += d.switch and d.chosen != at_budget(cur, budget)
        cur = d.chosen
    assert switches <= 1
    again = eng.decide(prof, budget, batch, cur)
    assert not again.switch and again.chosen == cur


@settings(max_examples=60, deadline=None)
@given(prof=profiles, budget=st.integers(2, 24), current=configs, batch=st.integers(8, 128))
def test_infeasible_current_always_forces_a_switch(prof, budget, current, batch):
    eng = DecisionEngine(DecisionConfig(0.5, 0.4))
    d = eng.decide(prof, budget, batch, current)
    stay = at_budget(current, budget)
    stay_c = d.candidate(stay) if stay is not None else None
    if d.feasible and stay_c is not None and not stay_c.prediction.feasible:
        assert d.forced and d.switch and d.chosen != stay
        assert d.candidate(d.chosen).prediction.feasible
    if d.feasible:
        assert d.candidate(d.chosen).prediction.feasible


@settings(max_examples=80, deadline=None)
@given(
    prof=profiles,
    budget=st.integers(1, 24),
    current=st.one_of(st.none(), configs),
    modes=st.sampled_from([("colocated",), ("disaggregated",), ("colocated", "disaggregated")]),
    batch=st.integers(1, 128),
)
def test_every_budget_and_mode_set_gets_a_config_of_that_budget(
    prof, budget, current, modes, batch
):
    """Whatever the allowed modes, the current config and the budget, the engine answers
    (it raised on splits only at one worker) with a config of exactly the budget, in an
    allowed mode wherever that mode fits the budget."""
    d = DecisionEngine().decide(prof, budget, batch, current, modes=modes)
    assert d.chosen.num_workers == budget
    if budget >= 2 or "colocated" in modes:
        assert d.chosen.mode in modes
