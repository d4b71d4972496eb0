"""Cost gates: expansion and borrowing admitted only when the gain beats the switch cost."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.control.gates import SwitchCosts, SwitchCostTracker, borrow_gate, expansion_gate


def test_defaults_are_the_papers_measured_costs():
    costs = SwitchCostTracker()
    assert 56 + 11 <= costs.expansion_cost_s() <= 67 + 18
    assert costs.borrow_cost_s() == pytest.approx(6.0 + 3.8)


def test_ema_per_book_with_fallback():
    costs = SwitchCostTracker(alpha=0.5)
    costs.observe("activation", 10.0, borrowing=True)
    costs.observe("activation", 4.0, borrowing=True)
    assert costs.cost("activation", borrowing=True) == pytest.approx(7.0)  # 0.5*4 + 0.5*10
    # the other book has no measurement yet: it falls back to this one, not the default
    assert costs.cost("activation", borrowing=False) == pytest.approx(7.0)
    costs.observe("activation", 1.0, borrowing=False)
    assert costs.cost("activation", borrowing=False) == 1.0
    assert costs.cost("activation", borrowing=True) == pytest.approx(7.0)
    assert costs.num_observed("activation", borrowing=True) == 2
    assert costs.cost("deactivation", borrowing=True) == SwitchCosts().deactivation_s


def test_summary_shows_estimates_and_how_many_were_measured():
    costs = SwitchCostTracker(alpha=0.5)
    costs.observe("deactivation", 2.0, borrowing=True)
    costs.observe("expansion_prep", 30.0, borrowing=False)
    s = costs.summary()
    assert s["switch_costs_s"]["deactivation"] == 2.0
    assert s["switch_costs_s"]["activation"] == SwitchCosts().activation_s  # the prior
    assert s["switch_costs_measured"] == {
        "expansion_prep": 1,
        "expansion_finalize": 0,
        "activation": 0,
        "deactivation": 1,
    }


def test_bad_observations_rejected():
    costs = SwitchCostTracker()
    with pytest.raises(ValueError):
        costs.observe("teleport", 1.0, borrowing=False)
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            costs.observe("activation", bad, borrowing=False)


def test_expansion_gate_hand_computed():
    """Init + sync (76 s) runs in the background, so it only shortens the serving time:
    10% saving x (1,000 - 76) s = 92.4 s > 0; a 60 s window ends before the GPUs serve;
    a hand-off cost larger than the gain declines; no saving declines."""
    costs = SwitchCostTracker()
    yes = expansion_gate(200.0, 180.0, 1000.0, costs)
    assert yes.admit and yes.gain_s == pytest.approx(92.4) and yes.cost_s == 0.0
    short = expansion_gate(200.0, 180.0, 60.0, costs)
    assert not short.admit and short.gain_s == 0.0
    costly = expansion_gate(200.0, 180.0, 1000.0, costs, handoff_s=100.0)
    assert not costly.admit and costly.cost_s == 100.0
    assert not expansion_gate(200.0, 200.0, 1000.0, costs).admit
    default = expansion_gate(200.0, 180.0, None, costs, default_window_s=1000.0)
    assert default.admit and "1000 s window" in default.reason


def test_expansion_gate_uses_the_borrowing_book():
    """The initialisation estimate comes from the book of the current regime."""
    costs = SwitchCostTracker(alpha=1.0)
    costs.observe("expansion_prep", 300.0, borrowing=True)
    costs.observe("expansion_prep", 20.0, borrowing=False)
    assert expansion_gate(200.0, 180.0, 310.0, costs, borrowing=False).admit
    assert not expansion_gate(200.0, 180.0, 310.0, costs, borrowing=True).admit


def test_expansion_gate_with_nothing_running_now():
    assert expansion_gate(math.inf, 300.0, 10.0, SwitchCostTracker()).admit
    neither = expansion_gate(math.inf, math.inf, 10.0, SwitchCostTracker())
    assert not neither.admit
    assert neither.reason == "no feasible config with them either"


def test_borrow_gate_hand_computed():
    costs = SwitchCostTracker()
    yes = borrow_gate(216.0, 190.0, costs)
    assert yes.admit and yes.gain_s == pytest.approx(26.0) and yes.cost_s == pytest.approx(9.8)
    assert not borrow_gate(216.0, 210.0, costs).admit
    # GPUs idle for 54 s of a 216 s step: a quarter of the 26 s saving = 6.5 s < 9.8 s
    short = borrow_gate(216.0, 190.0, costs, idle_window_s=54.0)
    assert not short.admit and short.gain_s == pytest.approx(6.5)
    assert not borrow_gate(216.0, 230.0, costs).admit  # a slower config gains nothing


def test_borrow_gate_counts_every_batch_in_flight():
    """The predicted saving is one batch's; borrowed workers serve every unfinished batch, so
    with two in flight the same saving counts twice (and a non-positive count is one)."""
    costs = SwitchCostTracker()
    one = borrow_gate(216.0, 210.0, costs)  # 6 s < 9.8 s
    two = borrow_gate(216.0, 210.0, costs, batches_in_flight=2)  # 12 s > 9.8 s
    assert not one.admit and two.admit
    assert two.gain_s == pytest.approx(2 * one.gain_s)
    assert borrow_gate(216.0, 210.0, costs, batches_in_flight=0).gain_s == one.gain_s
    # the window share still applies per batch: 54 s of 216 s -> 2 x 6.5 s = 13 s
    short = borrow_gate(216.0, 190.0, costs, idle_window_s=54.0, batches_in_flight=2)
    assert short.admit and short.gain_s == pytest.approx(13.0)


@given(
    without=st.floats(1.0, 2000.0),
    with_=st.floats(0.0, 2000.0),
    window=st.floats(0.0, 4000.0),
    batches=st.integers(1, 4),
)
def test_borrow_gate_saving_scales_with_the_batches_in_flight(without, with_, window, batches):
    """The saving is never negative, never more than the batches' whole makespan saving,
    and grows linearly with the number of unfinished batches the borrowed workers serve."""
    costs = SwitchCostTracker()
    one = borrow_gate(without, with_, costs, idle_window_s=window)
    many = borrow_gate(without, with_, costs, idle_window_s=window, batches_in_flight=batches)
    assert 0.0 <= one.gain_s <= max(0.0, without - with_) + 1e-9
    assert many.gain_s == pytest.approx(batches * one.gain_s)
    assert many.admit or not one.admit  # more batches never turn a borrow down


def test_a_tiny_positive_gain_never_reads_as_zero():
    g = expansion_gate(100.0, 99.99999, 1800.0, SwitchCostTracker())
    assert g.admit and "<0.1%" in g.reason and "= 0.00017 s > hand-off 0.0 s" in g.reason
    g = expansion_gate(100.0, 80.0, 1800.0, SwitchCostTracker())
    assert "saving 20.0%" in g.reason and "> hand-off 0.0 s" in g.reason
