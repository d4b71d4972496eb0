"""The `controller:` section a simulation config shares with a run config reaches the
simulated controller: modes, routing bound and the decision engine's hysteresis."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl.errors import InputError
from pearl.sim.config import SimConfig, load_config
from pearl.sim.policy_run import build


def test_knobs_reach_the_policy_and_the_decision_engine() -> None:
    cfg = SimConfig().with_updates(
        **{
            "controller.modes": ["colocated"],
            "controller.sticky_max_imbalance": 3,
            "controller.mode_switch_threshold": 0.2,
            "controller.ratio_switch_threshold": 0.05,
        }
    )
    _, controller, _, _ = build(cfg, "pearl")
    assert controller.policy.modes == ("colocated",)
    assert controller.policy.sticky_max_imbalance == 3
    engine = controller.advisor.engine
    assert engine.cfg.mode_switch_threshold == 0.2
    assert engine.cfg.ratio_switch_threshold == 0.05


def test_default_knobs_keep_each_policy_as_it_is() -> None:
    # pearl and rlboost+ balance load at every turn (RLBoost migrates for load balance);
    # ROLL's router keeps each environment on one engine (EnvAffinityRouter).
    expected = {
        "pearl": 0,
        "rlboost+": 0,
        "roll": None,
        "roll-large": None,
        "fixed:colocated": None,
    }
    for name, k in expected.items():
        _, controller, _, _ = build(SimConfig(), name)
        assert controller.policy.sticky_max_imbalance == k, name
    _, pearl, _, _ = build(SimConfig(), "pearl")
    assert pearl.policy.modes == ("colocated", "disaggregated")


def test_bad_knobs_name_the_file_and_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "sim.yaml"
    bad.write_text("controller:\n  modes: [split]\n")
    with pytest.raises(InputError) as err:
        load_config(bad)
    assert "sim.yaml" in str(err.value) and "controller" in str(err.value)
