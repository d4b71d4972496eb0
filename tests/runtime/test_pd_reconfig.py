"""What the run report counts as a PD reconfiguration: a mode change or a P:D ratio change,
not a rescale of the same ratio to a new pool size."""

from pearl.control.plan import PDConfig
from pearl.runtime.driver import _prefill_share_changed


def test_ratio_changes_count_and_rescales_do_not():
    d = PDConfig.disaggregated
    assert not _prefill_share_changed(d(1, 1), d(2, 2))
    assert not _prefill_share_changed(d(3, 1), d(6, 2))
    assert _prefill_share_changed(d(1, 1), d(3, 1))
    assert _prefill_share_changed(d(3, 1), d(4, 2))
    # mode changes are counted by the caller; colocated sizes never are
    assert not _prefill_share_changed(PDConfig.colocated(2), PDConfig.colocated(4))
    assert not _prefill_share_changed(PDConfig.colocated(2), d(1, 1))
