"""The runner: policy names, summaries, and worker processes changing nothing."""

from __future__ import annotations

import pytest

from pearl.errors import InputError
from pearl.sim.compare import run_simulation
from pearl.sim.config import SimConfig
from pearl.sim.policy_run import make_policy


def test_static_policy_names() -> None:
    """fixed:colocated and fixed:disagg:P:D are static, no-elasticity policies."""
    col = make_policy("fixed:colocated")
    assert col.modes == ("colocated",) and not col.use_preemptible and col.borrow == "never"
    dis = make_policy("fixed:disagg:3:5")
    assert dis.fixed_ratio == (3, 5) and dis.modes == ("disaggregated",)
    assert make_policy("pearl").name == "pearl"


@pytest.mark.parametrize("bad", ["fixed:nope", "fixed:disagg:0:3", "no-such-policy"])
def test_bad_policy_names_are_input_errors(bad: str) -> None:
    """A bad name is an InputError naming --policies."""
    with pytest.raises(InputError) as err:
        make_policy(bad)
    assert err.value.field == "--policies"


@pytest.mark.slow
def test_worker_processes_give_the_same_results() -> None:
    """jobs=2 and jobs=1 produce identical summaries (and the bound)."""
    cfg = SimConfig().with_updates(
        **{
            "trace.static_gpus": 2,
            "trace.duration_s": 400.0,
            "rollout.batch_size": 8,
            "policies": ["fixed:colocated", "fixed:disagg:1:1"],
        }
    )
    a = run_simulation(cfg, jobs=1, with_bound=False).to_json()
    b = run_simulation(cfg, jobs=2, with_bound=False).to_json()
    assert a == b
    assert a["policies"]["fixed:colocated"]["trajectories"] > 0


@pytest.mark.slow
def test_static_policy_stays_within_its_bound() -> None:
    """The bound's best static rate covers the static policies it was measured from."""
    cfg = SimConfig().with_updates(
        **{
            "trace.static_gpus": 2,
            "trace.duration_s": 600.0,
            "rollout.batch_size": 8,
            "policies": ["fixed:colocated"],
        }
    )
    res = run_simulation(cfg, jobs=1, with_bound=True)
    frac = res.to_json()["policies"]["fixed:colocated"]["fraction_of_bound"]
    assert res.bound is not None and res.bound.num_training_gpus == 0
    assert 0.0 < frac <= 1.05
