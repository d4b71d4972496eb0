"""The trajectory book: states, exactly-once re-queue, staleness, batches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.control.book import BookError, TrajectoryBook, TrajState


def _book(num_groups: int = 2, group_size: int = 2, staleness: int = 1) -> TrajectoryBook:
    b = TrajectoryBook(staleness)
    b.start_batch(0, num_groups, group_size)
    return b


def test_batch_holds_grpo_groups_in_env_state():
    """A new batch has num_groups x group_size trajectories, all in ENV, ids by group."""
    b = _book(3, 4)
    assert len(b) == 12
    assert {t.group for t in b} == {0, 1, 2}
    assert b.counts()[TrajState.ENV] == 12
    with pytest.raises(BookError):
        b.start_batch(0, 1, 1)


def test_turn_cycle_records_segment_version_and_prefix_worker():
    """ready -> routed -> finished returns to ENV with the version and sticky worker kept."""
    b = _book()
    assert b.mark_ready("s0-g0-0")
    b.mark_routed("s0-g0-0", "w1", None, version=0)
    t = b.get("s0-g0-0")
    assert t is not None and t.state == TrajState.PREFILL and t.workers == ("w1",)
    assert b.loads() == {"w1": 1}
    assert not b.mark_turn_finished("s0-g0-0", "w9")  # wrong worker: ignored
    assert b.mark_turn_finished("s0-g0-0", "w1")
    assert t.state == TrajState.ENV and t.prefix_worker == "w1" and t.segment_versions == [0]


def test_interrupt_requeues_exactly_once():
    """A duplicate or late interrupt does not queue the trajectory a second time."""
    b = _book()
    b.mark_ready("s0-g0-1")
    b.mark_routed("s0-g0-1", "w1", "w2", version=0)
    assert b.mark_interrupted("s0-g0-1", "w2", generated_tokens=17)
    assert not b.mark_interrupted("s0-g0-1", "w2", generated_tokens=20)
    assert not b.mark_interrupted("s0-g0-1", "w1")
    q = b.queued()
    assert [t.traj_id for t in q] == ["s0-g0-1"]
    t = q[0]
    assert t.num_interrupts == 1 and t.generated_tokens == 20 and t.prefix_worker is None
    # the interruption was counted on both workers of its route, on no other
    assert b.interruption_counted("s0-g0-1", "w1") and b.interruption_counted("s0-g0-1", "w2")
    assert not b.interruption_counted("s0-g0-1", "w3")
    assert not b.interruption_counted("s0-g0-0", "w1")  # never interrupted


def test_interrupted_go_first_in_queue():
    """Interrupted trajectories are routed before waiting ones, older batches first."""
    b = _book()
    b.start_batch(1, 1, 1)
    b.mark_ready("s1-g0-0")
    b.mark_ready("s0-g1-0")
    b.mark_ready("s0-g0-0")
    b.mark_routed("s0-g0-0", "w1", None, 0)
    b.interrupt_workers(["w1"])
    assert [t.traj_id for t in b.queued()] == ["s0-g0-0", "s0-g1-0", "s1-g0-0"]


def test_staleness_bound_refuses_old_weights():
    """Batch 3 with bound 1 may use weights v2 or newer, never v1."""
    b = TrajectoryBook(1)
    b.start_batch(3, 1, 1)
    b.mark_ready("s3-g0-0")
    with pytest.raises(BookError):
        b.mark_routed("s3-g0-0", "w0", None, version=1)
    b.mark_routed("s3-g0-0", "w0", None, version=2)
    b.check()


def test_retire_only_finished_batch():
    """A batch leaves the book only when all of its trajectories are done."""
    b = _book(1, 2)
    assert not b.retire_batch(0) and not b.retire_batch(7)
    for tid in ("s0-g0-0", "s0-g0-1"):
        assert b.mark_done(tid)
    assert not b.mark_done("s0-g0-0")
    assert b.retire_batch(0) and len(b) == 0


def test_unfinished_batches_count_until_every_trajectory_is_done():
    b = _book(1, 2)
    b.start_batch(1, 1, 1)
    assert b.num_unfinished() == 2
    for tid in ("s0-g0-0", "s0-g0-1"):
        b.mark_done(tid)
    assert b.num_unfinished() == 1  # batch 0 done (not yet retired), batch 1 running
    b.retire_batch(0)
    assert b.num_unfinished() == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 2)), max_size=60))
def test_random_operations_keep_every_trajectory_once(ops):
    """Any sequence of book operations keeps each trajectory once, in one state."""
    b = _book(1, 3, staleness=1)
    ids = [t.traj_id for t in b]
    workers = ["w0", "w1", "w2"]
    for kind, i, wi in ops:
        tid, w = ids[i % 3], workers[wi]
        t = b.get(tid)
        assert t is not None
        if kind == 0:
            b.mark_ready(tid)
        elif kind == 1 and t.state in (TrajState.WAITING, TrajState.INTERRUPTED):
            b.mark_routed(tid, w, None, 0)
        elif kind == 2:
            b.mark_turn_finished(tid, w)
        elif kind == 3:
            b.mark_interrupted(tid, w)
        else:
            b.mark_done(tid)
        b.check()
        assert sum(b.counts().values()) == 3


def test_event_older_than_the_current_route_is_rejected():
    """A late finish or interrupt of an earlier request never touches the current one,
    even when the trajectory went back to the same worker."""
    b = _book()
    b.mark_ready("s0-g0-0")
    b.mark_routed("s0-g0-0", "w1", None, 0, time_s=5.0)
    assert b.mark_interrupted("s0-g0-0", "w1", time_s=6.0)
    b.mark_routed("s0-g0-0", "w1", None, 0, time_s=7.0)
    assert not b.mark_interrupted("s0-g0-0", "w1", time_s=6.0)  # the same event, replayed
    assert not b.mark_turn_finished("s0-g0-0", "w1", time_s=6.5)
    t = b.get("s0-g0-0")
    assert t is not None and t.state == TrajState.PREFILL and t.num_interrupts == 1
    assert b.mark_turn_finished("s0-g0-0", "w1", time_s=7.0)


def test_phases_only_move_forward_within_the_current_request():
    """PREFILL -> KV_TRANSFER -> DECODE, never back, never for an older request."""
    b = _book()
    b.mark_ready("s0-g0-0")
    b.mark_routed("s0-g0-0", "w1", "w2", 0, time_s=3.0)
    assert not b.mark_phase("s0-g0-0", TrajState.DECODE, time_s=2.0)
    assert b.mark_phase("s0-g0-0", TrajState.KV_TRANSFER, time_s=4.0)
    assert b.mark_phase("s0-g0-0", TrajState.DECODE, time_s=5.0)
    assert not b.mark_phase("s0-g0-0", TrajState.KV_TRANSFER, time_s=6.0)
    t = b.get("s0-g0-0")
    assert t is not None and t.state == TrajState.DECODE and t.workers == ("w1", "w2")
    assert b.mark_turn_finished("s0-g0-0", "w2", time_s=7.0)
