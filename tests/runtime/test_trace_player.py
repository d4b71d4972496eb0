"""The trace player's schedule: wall-clock node actions from an availability trace."""

from pearl.runtime.trace_player import schedule
from pearl.traces.availability import AvailabilityTrace, Change


def _trace(levels, notice_s=5.0):
    changes = tuple(Change(time_s=t, num_gpus=n) for t, n in levels)
    return AvailabilityTrace(name="t", duration_s=100.0, reclaim_notice_s=notice_s, changes=changes)


def test_removal_is_preceded_by_a_notice_with_its_deadline():
    acts = schedule(_trace([(0.0, 0), (10.0, 2), (40.0, 1)]))
    kinds = [(a.at_s, a.kind, a.gpu_id) for a in acts]
    assert kinds == [
        (10.0, "add", "pre0"),
        (10.0, "add", "pre1"),
        (35.0, "notice", "pre1"),
        (40.0, "remove", "pre1"),
    ]
    notice = next(a for a in acts if a.kind == "notice")
    assert notice.deadline_s == 40.0


def test_notice_never_precedes_the_arrival_and_time_scale_applies():
    acts = schedule(_trace([(0.0, 0), (10.0, 1), (12.0, 0)]), time_scale=2.0)
    assert [(a.at_s, a.kind) for a in acts] == [(5.0, "add"), (5.0, "notice"), (6.0, "remove")]


def test_notice_override():
    acts = schedule(_trace([(0.0, 1), (30.0, 0)]), notice_s=10.0)
    assert [(a.at_s, a.kind) for a in acts] == [(0.0, "add"), (20.0, "notice"), (30.0, "remove")]
