"""Trace playback: preemptible GPUs offered, noticed and reclaimed over time (paper §4.5).

`playback_actions` turns a trace's explicit-id event stream into the world's timeline:
an *offer* when GPUs appear, a *notice* `reclaim_notice_s` before GPUs disappear (never
before they appeared, never before time 0), and a *gone* when they disappear. At most
`max_gpus` preemptible GPUs are live at once: offers beyond the cap are dropped (and so are
their later removals). The result is sorted by (time, kind order, first GPU id), so equal
traces always give equal timelines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Kind = Literal["gone", "notice", "offer"]
_KIND_ORDER = {"gone": 0, "notice": 1, "offer": 2}


@dataclass(frozen=True, slots=True)
class TraceAction:
    """One thing the trace does to the world at `time_s`.

    For a notice, `deadline_s` is when the GPUs will be gone; for an offer,
    `expected_window_s` is the mean lifetime of the trace's GPUs seen so far (None before any
    GPU went away): a hint the world may give, never the future itself.
    """

    time_s: float
    kind: Kind
    gpu_ids: tuple[str, ...]
    deadline_s: float | None = None
    expected_window_s: float | None = None


def playback_actions(
    gpu_events: Iterable[tuple[float, Sequence[str], Sequence[str]]],
    *,
    reclaim_notice_s: float,
    max_gpus: int,
    duration_s: float | None = None,
) -> list[TraceAction]:
    """The world's timeline for a trace; events at or after `duration_s` are dropped."""
    live: dict[str, float] = {}  # gpu id -> time it appeared
    lifetimes: list[float] = []
    actions: list[TraceAction] = []
    for time_s, added, removed in gpu_events:
        if duration_s is not None and time_s >= duration_s:
            break
        gone = tuple(g for g in removed if g in live)
        if gone:
            earliest = max(live[g] for g in gone)
            notice_at = max(0.0, earliest, time_s - reclaim_notice_s)
            if notice_at < time_s:
                actions.append(TraceAction(notice_at, "notice", gone, deadline_s=time_s))
            actions.append(TraceAction(time_s, "gone", gone))
            for g in gone:
                lifetimes.append(time_s - live.pop(g))
        room = max(0, max_gpus - len(live))
        offered = tuple(g for g in added if g not in live)[:room]
        if offered:
            window = sum(lifetimes) / len(lifetimes) if lifetimes else None
            actions.append(TraceAction(time_s, "offer", offered, expected_window_s=window))
            for g in offered:
                live[g] = time_s
    actions.sort(key=lambda a: (a.time_s, _KIND_ORDER[a.kind], a.gpu_ids))
    return actions


def live_gpu_seconds(actions: Sequence[TraceAction], until_s: float) -> float:
    """Preemptible GPU-seconds available in [0, until_s] under a timeline (for the bound)."""
    total = 0.0
    since: dict[str, float] = {}
    for a in actions:
        if a.time_s >= until_s:
            break
        if a.kind == "offer":
            for g in a.gpu_ids:
                since[g] = a.time_s
        elif a.kind == "gone":
            for g in a.gpu_ids:
                total += a.time_s - since.pop(g)
    total += sum(until_s - t for t in since.values())
    return total
