"""Plays an availability trace on a local multi-node Ray cluster (docs/architecture.md).

`schedule` turns a trace into timed node actions (`load_node_actions` for a run's config);
`TracePlayer`, the runtime driver's trace component (the simulator's is its trace
playback), plays the due ones.

Each preemptible GPU of the trace is one node with one device slot. An addition starts the
node and offers its GPU; a removal is preceded, `reclaim_notice_s` earlier, by a drain of
the node with Ray's PREEMPTION reason and a deadline (what a cloud's preemption does), and
then the node is removed: its worker processes die for real.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pearl.control import events as ev
from pearl.control.state import Gpu, Zone
from pearl.runtime.run_config import RunConfig
from pearl.traces import load_trace
from pearl.traces.availability import AvailabilityTrace

if TYPE_CHECKING:
    from pearl.runtime.local_cluster import LocalCluster


@dataclass(frozen=True, order=True)
class NodeAction:
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
) -> list[NodeAction]:
    """The trace as wall-clock actions: `time_scale` trace seconds per wall second."""
    if time_scale <= 0:
        raise ValueError("time_scale must be > 0")
    lead = (trace.reclaim_notice_s if notice_s is None else notice_s) / time_scale
    actions: list[NodeAction] = []
    added_at: dict[str, float] = {}
    for change in trace.gpu_events(prefix=prefix):
        t = change.time_s / time_scale
        for g in change.removed:
            # the notice cannot come before the GPU arrived
            notice_at = max(added_at.get(g, 0.0), t - lead)
            actions.append(NodeAction(notice_at, 2, "notice", g, t))
            actions.append(NodeAction(t, 0, "remove", g, t))
        for g in change.added:
            added_at[g] = t
            actions.append(NodeAction(t, 1, "add", g))
    return sorted(actions)


def load_node_actions(cfg: RunConfig, config_dir: Path | None) -> list[NodeAction]:
    """The node actions of the run's configured trace (none on a real cluster, where nodes
    come and go by themselves). A relative trace path may be relative to the config."""
    t = cfg.trace
    if t.source is None or cfg.cluster.address is not None:
        return []
    source = t.source
    if config_dir is not None and not Path(source).exists() and (config_dir / source).exists():
        source = str(config_dir / source)
    trace = load_trace(source, scale_ratio=t.scale, window_s=t.window, cap=t.cap)
    return schedule(trace, time_scale=t.time_scale, notice_s=t.reclaim_notice_s)


class TracePlayer:
    """Plays `actions` on the local `cluster`: each becomes a node change and the event the
    controller hears of it. `note(kind, reason, **detail)` records a run event."""

    def __init__(
        self,
        actions: list[NodeAction],
        *,
        cluster: LocalCluster,
        emit: Callable[[Any], None],
        now: Callable[[], float],
        note: Callable[..., None],
    ) -> None:
        self.pending = sorted(actions)
        self.cluster = cluster
        self.emit = emit
        self.now = now
        self.note = note

    def next_at_s(self) -> float | None:
        """When the next action is due (None: the trace is over)."""
        return self.pending[0].at_s if self.pending else None

    def play_due(self) -> None:
        """Play every action due by now (Ray's node changes need the main thread)."""
        while self.pending and self.pending[0].at_s <= self.now():
            a = self.pending.pop(0)
            name = node_name(a.gpu_id)
            if a.kind == "add":
                self.cluster.add_node(name, Zone.PREEMPTIBLE, [a.gpu_id])
                self.emit(ev.GpusOffered(self.now(), (Gpu(a.gpu_id, Zone.PREEMPTIBLE, name),)))
                self.note("offer", f"trace: preemptible {a.gpu_id} joined")
            elif a.kind == "notice":
                if name in self.cluster.node_names:
                    self.cluster.drain_node(name, max(0.0, a.deadline_s - self.now()))
                deadline = self.now() + max(0.0, a.deadline_s - a.at_s)
                self.emit(ev.ReclaimNotice(self.now(), (a.gpu_id,), deadline))
                self.note(
                    "preemption",
                    f"trace: {a.gpu_id} reclaimed at {deadline:.1f}s (notice)",
                    gpus=[a.gpu_id],
                )
            else:
                if name in self.cluster.node_names:
                    self.cluster.remove_node(name)
                self.emit(ev.GpusGone(self.now(), (a.gpu_id,)))
                self.note("preemption", f"trace: {a.gpu_id} gone (node removed)", gpus=[a.gpu_id])
