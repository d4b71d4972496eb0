"""Timeline segments from state history, and the PNG they draw."""

from pearl.control.plan import PDConfig, apply, plan_transition
from pearl.control.state import ClusterState, Gpu, Status, Zone
from pearl.report.timeline import plot_timeline, segments


def test_segments_follow_roles_statuses_and_gpu_departures(tmp_path):
    s0 = ClusterState(gpus=(Gpu("d0", Zone.DEDICATED), Gpu("p0", Zone.PREEMPTIBLE)))
    s1 = apply(s0, plan_transition(s0, PDConfig.colocated(2), ["d0", "p0"]))  # initializing
    s2 = s1.update_worker("w0", status=Status.ACTIVE).update_worker("w1", status=Status.ACTIVE)
    s3 = s2.without_worker("w1").without_gpus(["p0"])  # p0 reclaimed
    segs = segments([(0.0, s0), (1.0, s1), (3.0, s2), (10.0, s3)], end_s=12.0)
    d0 = [(s.kind, s.start_s, s.end_s) for s in segs if s.gpu_id == "d0"]
    p0 = [(s.kind, s.start_s, s.end_s) for s in segs if s.gpu_id == "p0"]
    assert d0 == [("idle", 0.0, 1.0), ("initializing", 1.0, 3.0), ("colocated", 3.0, 12.0)]
    assert p0 == [("idle", 0.0, 1.0), ("initializing", 1.0, 3.0), ("colocated", 3.0, 10.0)]
    png = plot_timeline(segs, tmp_path / "t.png")
    assert png.stat().st_size > 1000
