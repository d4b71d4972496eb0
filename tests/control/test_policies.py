"""Policies: the registry, and that each baseline and ablation turns exactly its knobs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.controller import Controller
from pearl.control.decision import DecisionConfig
from pearl.control.plan import PDConfig
from pearl.control.policies import get_policy, policy_names, scale_config
from pearl.control.policies.base import Policy
from pearl.control.policies.engine_advisor import EngineAdvisor
from pearl.control.profile import HardwarePrior
from pearl.control.state import ClusterState, Gpu, Role, Status, Zone
from pearl.specs import get_gpu, get_model

TRAINING = tuple(Gpu(f"t{i}", Zone.OVERLAP, "tn") for i in range(2))


def of(cmds: list[C.Command], kind: type) -> list:
    return [c for c in cmds if isinstance(c, kind)]


def bring_up(ctl: Controller, cmds: list[C.Command], t: float) -> list[C.Command]:
    out: list[C.Command] = []
    for c in of(cmds, C.InitWorker):
        out += ctl.handle(E.WorkerReady(t, c.worker_id))
    for c in of(out, C.SyncWeights):
        out += ctl.handle(E.WeightsSynced(t, c.worker_id, c.version))
    return out


def booted(name: str, n: int = 2, **kw) -> Controller:
    state = ClusterState(gpus=tuple(Gpu(f"d{i}", Zone.DEDICATED) for i in range(n)))
    ctl = Controller(name, state=state, batch_size=4, group_size=2, training_gpus=TRAINING, **kw)
    bring_up(ctl, ctl.handle(E.Started(0.0)), 1.0)
    return ctl


def offer(*ids: str, window: float | None = None) -> E.GpusOffered:
    return E.GpusOffered(2.0, tuple(Gpu(g, Zone.PREEMPTIBLE) for g in ids), window)


def test_registry_knows_every_name():
    """Every documented name resolves; `pearl-disagg:P:D` parses; unknown names list all."""
    for name in (
        "pearl",
        "roll",
        "roll-large",
        "rlboost+",
        "pearl-colocated",
        "pearl-no-borrow",
        "pearl-ungated",
    ):
        assert get_policy(name).name == name
    p = get_policy("pearl-disagg:3:5")
    assert p.fixed_ratio == (3, 5) and p.name == "pearl-disagg:3:5"
    assert "pearl-disagg:P:D" in policy_names()
    with pytest.raises(ValueError, match="known: pearl"):
        get_policy("pearl-fast")
    with pytest.raises(ValueError):
        get_policy("pearl-disagg:0:4")


def test_static_policies_are_in_the_one_registry():
    """`fixed:*` resolve through the same registry `pearl run` and `pearl simulate` use: no
    elasticity, the named PD shape."""
    col = get_policy("fixed:colocated")
    assert col.modes == ("colocated",) and not col.use_preemptible and col.borrow == "never"
    for name in ("fixed:disagg:5:3", "fixed:disaggregated:5:3"):
        p = get_policy(name)
        assert p.name == name and p.fixed_ratio == (5, 3) and p.modes == ("disaggregated",)
        assert not p.use_preemptible and p.borrow == "never" and not p.adapt_pd
    assert "fixed:disagg:P:D" in policy_names() and "fixed:colocated" in policy_names()
    with pytest.raises(ValueError, match="P and D"):
        get_policy("fixed:disagg:0:2")
    with pytest.raises(ValueError, match="known"):
        get_policy("fixed:nonsense")


@given(
    n=st.integers(1, 64),
    p=st.integers(1, 9),
    d=st.integers(1, 9),
    mode=st.sampled_from([None, "colocated", "disaggregated"]),
)
def test_scale_config_keeps_budget_and_shape(n, p, d, mode):
    """A rescaled config uses exactly n workers, keeps at least one of each split role."""
    cfg = scale_config(PDConfig.disaggregated(p, d), n, mode=mode)
    assert cfg.num_workers == n
    if mode == "colocated" or n == 1:
        assert cfg.is_colocated
    else:
        assert cfg.num_prefill >= 1 and cfg.num_decode >= 1
        assert abs(cfg.num_prefill / n - p / (p + d)) <= 0.5 / n + 1 / n


def test_roll_is_a_fixed_colocated_pool():
    """`roll` takes no preemptible GPUs and borrows nothing, and stays colocated."""
    ctl = booted("roll")
    assert ctl.handle(offer("p0", "p1")) == []
    assert ctl.handle(E.TrainingIdle(3.0, ("t0",), 1e4)) == []
    assert len(ctl.ignored) == 2
    assert ctl.state.role_counts()[Role.COLOCATED] == 2 and len(ctl.state.workers) == 2


def test_rlboost_admits_each_instance_as_soon_as_it_is_ready():
    """`rlboost+`: every preemptible instance is its own group, admitted without its peers."""
    ctl = booted("rlboost+")
    inits = of(ctl.handle(offer("p0", "p1", "p2", window=1.0)), C.InitWorker)
    assert len({c.group_id for c in inits}) == 3  # no gate even for a 1-second window
    first = inits[0].worker_id
    ctl.handle(E.WorkerReady(3.0, first))
    out = ctl.handle(E.WeightsSynced(4.0, first, 0))
    assert of(out, C.AdmitGroup) == [C.AdmitGroup(inits[0].group_id, (first,))]
    assert ctl.state.worker(first).status == Status.ACTIVE
    assert ctl.state.worker(inits[1].worker_id).status == Status.INITIALIZING
    # A failure cancels only that instance.
    out = ctl.handle(E.WorkerInitFailed(5.0, inits[1].worker_id, "boom"))
    assert not of(out, C.StopWorker) and ctl.state.has_worker(inits[2].worker_id)


def test_rlboost_budget_returns_training_gpus_early_and_retunes():
    """`rlboost+` borrows whenever idle; once its turn budget is spent the borrowed workers
    drain and the GPUs go back early; the unused bubble then grows the budget."""
    ctl = booted("rlboost+", 1)
    ctl.toggle.budget.turns = 1
    bring_up(ctl, ctl.handle(E.TrainingIdle(2.0, ("t0",), 500.0)), 3.0)
    borrowed = ctl.state.owner_of("t0")
    assert borrowed is not None
    out = []
    for t in ctl.book.step_trajs(0):
        out += ctl.handle(E.TrajectoryReady(4.0, t.traj_id))
    to_borrowed = [r for r in of(out, C.Route) if r.prefill_worker_id == borrowed]
    assert len(to_borrowed) == 1 and C.Drain(borrowed) in out
    for t in ctl.book.step_trajs(0):
        ctl.handle(E.TurnFinished(10.0, t.traj_id, t.decode_worker or ""))
    out = ctl.handle(E.WorkerDrained(11.0, borrowed))
    assert C.ReleaseGpus(("t0",), "training") in out and C.RestoreTraining(("t0",)) in out
    for t in ctl.book.step_trajs(0):
        ctl.handle(E.TrajectoryDone(12.0, t.traj_id))
    ctl.handle(E.RolloutStepFinished(100.0, 0))
    assert ctl.toggle.budget.turns > 1
    # A forced return (training waited for its GPUs) shrinks the budget again.
    ctl.toggle.budget.turns = 8
    bring_up(ctl, ctl.handle(E.TrainingIdle(101.0, ("t0",), 500.0)), 102.0)
    ctl.handle(E.TrainingWants(103.0, ("t0",), 110.0))
    assert ctl.toggle.budget.turns == 6


def test_no_borrow_and_ungated_ablations():
    """`pearl-no-borrow` never borrows; `pearl-ungated` borrows a window `pearl` declines."""
    assert booted("pearl-no-borrow").handle(E.TrainingIdle(2.0, ("t0",), 1e4)) == []
    short = E.TrainingIdle(2.0, ("t0", "t1"), 4.0)
    assert not of(booted("pearl").handle(short), C.OffloadTraining)
    assert of(booted("pearl-ungated").handle(short), C.OffloadTraining)


def test_colocated_and_fixed_split_ablations_keep_their_shape():
    """`pearl-colocated` stays colocated when it grows; `pearl-disagg:1:3` keeps 1:3."""
    ctl = booted("pearl-colocated", 2)
    bring_up(ctl, ctl.handle(offer("p0", "p1")), 3.0)
    assert ctl.state.role_counts() == {Role.COLOCATED: 4, Role.PREFILL: 0, Role.DECODE: 0}
    ctl = booted("pearl-disagg:1:3", 4)
    assert ctl.state.role_counts() == {Role.COLOCATED: 0, Role.PREFILL: 1, Role.DECODE: 3}
    bring_up(ctl, ctl.handle(offer("p0", "p1", "p2", "p3")), 3.0)
    assert ctl.state.role_counts() == {Role.COLOCATED: 0, Role.PREFILL: 2, Role.DECODE: 6}


def test_engine_advisor_drives_pearl_with_a_hardware_prior():
    """With a hardware prior the decision engine chooses and the gates weigh the costs."""
    hw = HardwarePrior.from_specs(get_model("qwen3-8b"), get_gpu("h100-sxm"))
    ctl = booted("pearl", 4, hardware=hw)
    assert isinstance(ctl.advisor, EngineAdvisor)
    out = ctl.handle(offer("p0", "p1", "p2", "p3", window=5.0))
    assert not of(out, C.InitWorker)  # a 5-second window never pays 60+ s of set-up
    assert "decline expansion" in ctl.decisions[-1]
    fixed = booted("pearl-disagg:1:1", 4, hardware=hw)
    assert fixed.state.role_counts()[Role.PREFILL] == 2


def test_first_decision_keeps_colocation_unless_a_split_clears_the_mode_threshold():
    """With no configuration yet, colocation is the incumbent: the engine's first choice is
    a split only when it saves more than the mode-switch threshold, as a later switch must.
    (The prior's workload with short turns, 100 tokens a turn: a split is predicted a
    little faster.)"""
    hw = HardwarePrior.from_specs(get_model("qwen3-8b"), get_gpu("h100-sxm"))
    prior = EngineAdvisor(get_policy("pearl"), hardware=hw, batch_size=64).profile
    short = dataclasses.replace(prior, decode_tokens_per_turn=100.0)

    def advisor_with(policy: Policy, engine_config: DecisionConfig | None = None) -> EngineAdvisor:
        return EngineAdvisor(
            policy,
            hardware=hw,
            batch_size=64,
            engine_config=engine_config,
            initial_profile=short,
        )

    advisor = advisor_with(get_policy("pearl"))
    free = advisor.engine.decide(advisor.profile, 8, 64, None)  # no incumbent: best predicted
    colocated = free.candidate(PDConfig.colocated(8))
    assert colocated is not None and not free.chosen.is_colocated
    saving = 1.0 - free.predicted_makespan_s / colocated.prediction.makespan_s
    assert 0.0 < saving < advisor.engine.cfg.mode_switch_threshold
    assert advisor.choose(8, None) == PDConfig.colocated(8)
    # the same prior with a 0.1% mode threshold: the split clears it and is chosen at once
    low = DecisionConfig(mode_switch_threshold=0.001, ratio_switch_threshold=0.001)
    eager = advisor_with(get_policy("pearl"), low)
    assert eager.choose(8, None) == free.chosen
    # a policy restricted to splits is not held to colocation
    split_only = advisor_with(dataclasses.replace(get_policy("pearl"), modes=("disaggregated",)))
    assert not split_only.choose(8, None).is_colocated


def test_borrow_plan_may_refill_a_free_dedicated_gpu():
    """After an initial worker failed, a borrow plan also refills its dedicated GPU; only
    the training GPUs are offloaded and counted as borrowed."""
    state = ClusterState(gpus=tuple(Gpu(f"d{i}", Zone.DEDICATED) for i in range(2)))
    ctl = Controller("rlboost+", state=state, batch_size=4, group_size=2, training_gpus=TRAINING)
    ctl.handle(E.Started(0.0))
    ctl.handle(E.WorkerInitFailed(1.0, "w1", "boom"))
    out = ctl.handle(E.TrainingIdle(2.0, ("t0",), 100.0))
    assert of(out, C.OffloadTraining) == [C.OffloadTraining(("t0",))]
    assert {c.gpu_ids[0] for c in of(out, C.InitWorker)} == {"t0", "d1"}


@pytest.mark.parametrize("with_engine", [False, True], ids=["heuristic", "engine"])
def test_training_restored_measures_the_return(with_engine):
    """The time from a RestoreTraining to its TrainingRestored is a measured deactivation
    cost: the engine advisor's gate book learns it, and the heuristic advisor adds it to
    the borrow cost it gates on. A restore nobody asked for, or a duplicate, is ignored."""
    kw = {"hardware": HardwarePrior.from_specs(get_model("qwen3-8b"), get_gpu("h100-sxm"))}
    ctl = booted("pearl-ungated", 1, **(kw if with_engine else {}))
    bring_up(ctl, ctl.handle(E.TrainingIdle(2.0, ("t0",), 500.0)), 3.0)
    assert ctl.state.owner_of("t0") is not None
    out = ctl.handle(E.TrainingWants(20.0, ("t0",), 30.0))
    assert C.RestoreTraining(("t0",)) in out
    assert not of(ctl.handle(E.TrainingRestored(22.5, ("t0",))), C.RestoreTraining)
    if with_engine:
        assert isinstance(ctl.advisor, EngineAdvisor)
        costs = ctl.advisor.costs
        assert costs.num_observed("deactivation", borrowing=True) == 1
        assert costs.cost("deactivation", borrowing=True) == pytest.approx(2.5)
    else:
        assert ctl.advisor.return_cost_s == pytest.approx(0.7 * 3.8 + 0.3 * 2.5)
    ctl.handle(E.TrainingRestored(23.0, ("t0",)))
    assert "not being returned" in ctl.ignored[-1]
    ctl.handle(E.TrainingRestored(24.0, ("t1",)))
    assert "not being returned" in ctl.ignored[-1]
    if with_engine:
        assert ctl.advisor.costs.num_observed("deactivation", borrowing=True) == 1


def test_heuristic_borrow_cost_includes_the_return():
    """A measured activation alone would understate a borrow: the heuristic advisor's
    borrow EMA samples activation + its current return estimate."""
    from pearl.control.policies.advisor import HeuristicAdvisor

    adv = HeuristicAdvisor(get_policy("roll"), default_borrow_cost_s=10.0)
    adv.record_switch("return", 2.0, 0.0, borrowed=True)
    assert adv.return_cost_s == pytest.approx(0.7 * 3.8 + 0.3 * 2.0)
    adv.record_switch("borrow", 4.0, 1.0, borrowed=True)
    assert adv.cost_s["borrow"] == pytest.approx(0.7 * 10.0 + 0.3 * (5.0 + adv.return_cost_s))
    assert adv.cost_s["expand"] == 75.0
    before = adv.cost_s["expand"]
    adv.record_switch("expand", 30.0, 0.0, borrowed=False, censored=True)  # below: no news
    assert adv.cost_s["expand"] == before
    adv.record_switch("expand", 200.0, 0.0, borrowed=False, censored=True)
    assert adv.cost_s["expand"] == pytest.approx(0.7 * before + 0.3 * 200.0)


def test_a_borrow_cut_short_is_a_lower_bound_on_activation():
    """Training wants its GPUs back while the borrowed worker still starts: the borrow took
    at least that long, which the gate book learns when it exceeds the estimate (a cut
    shorter than the estimate says nothing and is not recorded)."""
    hw = HardwarePrior.from_specs(get_model("qwen3-8b"), get_gpu("h100-sxm"))
    ctl = booted("pearl-ungated", 1, hardware=hw)
    costs = ctl.advisor.costs
    assert of(ctl.handle(E.TrainingIdle(2.0, ("t0",), 500.0)), C.InitWorker)
    ctl.handle(E.TrainingWants(22.0, ("t0",), 30.0))  # never ready: cancelled after 20 s
    assert costs.num_observed("activation", borrowing=True) == 1
    assert costs.cost("activation", borrowing=True) == pytest.approx(20.0)
    ctl.handle(E.TrainingRestored(23.0, ("t0",)))
    assert of(ctl.handle(E.TrainingIdle(24.0, ("t0",), 500.0)), C.InitWorker)
    ctl.handle(E.TrainingWants(25.0, ("t0",), 30.0))  # 1 s < 20 s: no news
    assert costs.num_observed("activation", borrowing=True) == 1
