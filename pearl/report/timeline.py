"""Timelines of every GPU's zone, worker role and status over time, from state snapshots.

Both worlds record `(time_s, ClusterState)` after each change; this module turns that
history into per-GPU segments and a PNG, so the simulator and the real runtime share one
picture of what the controller did.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pearl.control.state import ClusterState, Zone

_ZONE_ORDER = {Zone.DEDICATED: 0, Zone.PREEMPTIBLE: 1, Zone.OVERLAP: 2}


@dataclass(frozen=True)
class Span:
    """GPU `gpu_id` is in `zone` and in condition `kind` from `start_s` to `end_s`.

    `kind` is `idle` (present, no worker), a role (`colocated`, `prefill`, `decode`) for an
    active worker, or the status of a worker in transition (`initializing`, `draining`,
    `inactive`).
    """

    gpu_id: str
    zone: str
    kind: str
    worker_id: str | None
    start_s: float
    end_s: float


def segments(history: Sequence[tuple[float, ClusterState]], end_s: float) -> list[Span]:
    """Merge consecutive snapshots into maximal segments per GPU (history sorted by time)."""
    open_: dict[str, tuple[str, str, str | None, float]] = {}
    out: list[Span] = []
    for t, state in history:
        present = set()
        for g in state.gpus:
            present.add(g.gpu_id)
            kind, wid = state.condition(g.gpu_id)
            cur = open_.get(g.gpu_id)
            if cur is not None and (cur[0], cur[1], cur[2]) == (g.zone.value, kind, wid):
                continue
            if cur is not None:
                out.append(Span(g.gpu_id, cur[0], cur[1], cur[2], cur[3], t))
            open_[g.gpu_id] = (g.zone.value, kind, wid, t)
        for gid in [g for g in open_ if g not in present]:
            z, k, w, s = open_.pop(gid)
            out.append(Span(gid, z, k, w, s, t))
    for gid, (z, k, w, s) in open_.items():
        out.append(Span(gid, z, k, w, s, max(end_s, s)))
    return out


COLORS = {
    "idle": "#d9d9d9",
    "colocated": "#4c72b0",
    "prefill": "#dd8452",
    "decode": "#55a868",
    "initializing": "#f2d55c",
    "draining": "#c44e52",
    "inactive": "#8c8c8c",
}


def plot_timeline(segs: Sequence[Span], path: Path, *, title: str = "GPU roles over time") -> Path:
    """Write a PNG with one row per GPU (grouped by zone) and coloured role/status bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    zone_of = {s.gpu_id: s.zone for s in segs}
    gpus = sorted(zone_of, key=lambda g: (_ZONE_ORDER[Zone(zone_of[g])], len(g), g))
    row = {g: i for i, g in enumerate(gpus)}
    fig, ax = plt.subplots(figsize=(11, max(2.5, 0.28 * len(gpus) + 1.2)))
    for s in segs:
        ax.barh(
            row[s.gpu_id],
            s.end_s - s.start_s,
            left=s.start_s,
            height=0.8,
            color=COLORS.get(s.kind, "#000"),
            linewidth=0,
        )
    ax.set_yticks(range(len(gpus)), [f"{g} ({zone_of[g][:3]})" for g in gpus], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(title)
    ax.legend(
        handles=[Patch(color=c, label=k) for k, c in COLORS.items()],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.3),
        ncol=7,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # legend below the axis label
    plt.close(fig)
    return path


def plot_series(
    xs: Sequence[float], series: dict[str, Sequence[float]], path: Path, *, xlabel: str, title: str
) -> Path:
    """A small line plot of one or more per-step series (reward, throughput, makespan)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, ys in series.items():
        ax.plot(list(xs)[: len(ys)], list(ys), marker="o", markersize=3, label=name)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
