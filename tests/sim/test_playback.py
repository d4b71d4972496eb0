"""Trace playback: notices lead removals, the cap holds, GPU-seconds add up."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pearl.sim.playback import live_gpu_seconds, playback_actions


def test_notice_leads_removal_by_the_configured_time() -> None:
    """A removal at t gets a notice at t - notice and a gone at t."""
    events = [(0.0, ("p0", "p1"), ()), (100.0, (), ("p1",))]
    acts = playback_actions(events, reclaim_notice_s=30.0, max_gpus=12)
    kinds = [(a.time_s, a.kind, a.gpu_ids) for a in acts]
    assert kinds == [
        (0.0, "offer", ("p0", "p1")),
        (70.0, "notice", ("p1",)),
        (100.0, "gone", ("p1",)),
    ]
    assert acts[1].deadline_s == 100.0


def test_notice_never_before_the_gpu_appeared() -> None:
    """A GPU that lives shorter than the notice is noticed when it appears."""
    events = [(50.0, ("p0",), ()), (60.0, (), ("p0",))]
    acts = playback_actions(events, reclaim_notice_s=30.0, max_gpus=12)
    notice = next(a for a in acts if a.kind == "notice")
    assert notice.time_s == 50.0


def test_cap_drops_extra_gpus_and_their_removals() -> None:
    """Beyond max_gpus an offer is cut, and the cut GPUs' removals vanish too."""
    events = [(0.0, ("a", "b", "c"), ()), (10.0, (), ("c",))]
    acts = playback_actions(events, reclaim_notice_s=0.0, max_gpus=2)
    assert [(a.kind, a.gpu_ids) for a in acts] == [("offer", ("a", "b"))]


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=30), st.integers(0, 6))
def test_live_gpu_seconds_matches_count_integral(steps: list[tuple[bool, int]], cap: int) -> None:
    """GPU-seconds from the timeline equal the integral of the live count."""
    live: list[str] = []
    events = []
    n = 0
    for i, (add, k) in enumerate(steps):
        t = 10.0 * (i + 1)
        if add:
            ids = tuple(f"g{n + j}" for j in range(k))
            n += k
            live.extend(ids)
            events.append((t, ids, ()))
        else:
            ids = tuple(live[-k:]) if k else ()
            live = live[: len(live) - len(ids)]
            events.append((t, (), ids))
    acts = playback_actions(events, reclaim_notice_s=5.0, max_gpus=cap)
    until = 10.0 * (len(steps) + 2)
    count, last, integral = 0, 0.0, 0.0
    for a in acts:
        if a.kind == "notice":
            continue
        integral += count * (a.time_s - last)
        last = a.time_s
        count += len(a.gpu_ids) if a.kind == "offer" else -len(a.gpu_ids)
        assert 0 <= count <= cap
    integral += count * (until - last)
    assert abs(live_gpu_seconds(acts, until) - integral) < 1e-6
