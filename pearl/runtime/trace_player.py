"""Plays an availability trace on a local multi-node Ray cluster (issue 7; DESIGN.md).

Each preemptible GPU of the trace is one node with one device slot. An addition starts the
node and offers its GPU; a removal is preceded, `reclaim_notice_s` earlier, by a drain of
the node with Ray's PREEMPTION reason and a deadline (what a cloud's preemption does), and
then the node is removed: its worker processes die for real.
"""

from __future__ import annotations

from dataclasses import dataclass

from pearl.traces.model import AvailabilityTrace


@dataclass(frozen=True, order=True)
class TraceAction:
    """At wall offset `at_s` (seconds from the run's start): `kind` on `gpu_id`.

    kind: "add" (node joins), "notice" (drain with deadline `deadline_s`), "remove".
    """

    at_s: float
    order: int
    kind: str
    gpu_id: str
    deadline_s: float = 0.0


def node_name(gpu_id: str) -> str:
    return f"node-{gpu_id}"


def schedule(
    trace: AvailabilityTrace,
    *,
    time_scale: float = 1.0,
    notice_s: float | None = None,
    prefix: str = "pre",
) -> list[TraceAction]:
    """The trace as wall-clock actions: `time_scale` trace seconds per wall second."""
    if time_scale <= 0:
        raise ValueError("time_scale must be > 0")
    lead = (trace.reclaim_notice_s if notice_s is None else notice_s) / time_scale
    actions: list[TraceAction] = []
    added_at: dict[str, float] = {}
    for ev in trace.gpu_events(prefix=prefix):
        t = ev.time_s / time_scale
        for g in ev.removed:
            # the notice cannot come before the GPU arrived
            notice_at = max(added_at.get(g, 0.0), t - lead)
            actions.append(TraceAction(notice_at, 2, "notice", g, t))
            actions.append(TraceAction(t, 0, "remove", g, t))
        for g in ev.added:
            added_at[g] = t
            actions.append(TraceAction(t, 1, "add", g))
    return sorted(actions)
