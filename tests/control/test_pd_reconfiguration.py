"""What both worlds log as a PD reconfiguration (`pd_reconfiguration`): a mode change or a
P:D ratio change among the active workers, not a rescale of the same ratio."""

from __future__ import annotations

from pearl.control.plan import PDConfig, apply, pd_reconfiguration, plan_transition
from pearl.control.state import ClusterState, Gpu, Status, Zone


def _state(config: PDConfig, *, active: bool = True) -> ClusterState:
    gpus = [f"d{i}" for i in range(config.num_workers)]
    s0 = ClusterState(gpus=tuple(Gpu(g, Zone.DEDICATED) for g in gpus))
    s = apply(s0, plan_transition(s0, config, gpus))
    if active:
        for w in s.workers:
            s = s.update_worker(w.worker_id, status=Status.ACTIVE)
    return s


def test_ratio_and_mode_changes_count_and_rescales_do_not():
    d, c = PDConfig.disaggregated, PDConfig.colocated
    for before, after in [(d(1, 1), d(2, 2)), (d(3, 1), d(6, 2)), (c(2), c(4)), (c(2), c(2))]:
        assert pd_reconfiguration(_state(before), _state(after)) is None, (before, after)
    for before, after in [(d(1, 1), d(3, 1)), (d(3, 1), d(4, 2)), (c(2), d(1, 1)), (d(2, 2), c(3))]:
        assert pd_reconfiguration(_state(before), _state(after)) == (before, after)


def test_workers_not_yet_active_form_no_config():
    """Only active workers count: a pool still initialising is no reconfiguration."""
    d = PDConfig.disaggregated
    assert pd_reconfiguration(_state(d(1, 1)), _state(d(3, 1), active=False)) is None
