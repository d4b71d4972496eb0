"""Plays an availability trace on a local multi-node Ray cluster (docs/architecture.md).

`schedule` turns a trace into timed node actions; `TracePlaying` (a mixin of the runtime
driver) loads the configured trace and plays its due actions.

Each preemptible GPU of the trace is one node with one device slot. An addition starts the
node and offers its GPU; a removal is preceded, `reclaim_notice_s` earlier, by a drain of
the node with Ray's PREEMPTION reason and a deadline (what a cloud's preemption does), and
then the node is removed: its worker processes die for real.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pearl.control import events as ev
from pearl.control.state import Gpu, Zone
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
    for change in trace.gpu_events(prefix=prefix):
        t = change.time_s / time_scale
        for g in change.removed:
            # the notice cannot come before the GPU arrived
            notice_at = max(added_at.get(g, 0.0), t - lead)
            actions.append(TraceAction(notice_at, 2, "notice", g, t))
            actions.append(TraceAction(t, 0, "remove", g, t))
        for g in change.added:
            added_at[g] = t
            actions.append(TraceAction(t, 1, "add", g))
    return sorted(actions)


class TracePlaying:
    """The runtime driver's trace player (a mixin of `Driver`; attributes set there)."""

    cfg: Any
    config_dir: Path | None
    cluster: Any
    player: list[TraceAction]

    def now(self) -> float:
        raise NotImplementedError

    def emit(self, event: Any) -> None:
        raise NotImplementedError

    def note(self, kind: str, reason: str, **detail: Any) -> None:
        raise NotImplementedError

    def _trace_actions(self) -> list[Any]:
        from pearl.traces import load_trace

        t = self.cfg.trace
        if t.source is None or self.cfg.cluster.address is not None:
            return []  # on a real cluster, nodes come and go by themselves
        source = t.source
        if (
            self.config_dir is not None
            and not Path(source).exists()
            and (self.config_dir / source).exists()
        ):
            source = str(self.config_dir / source)
        trace = load_trace(source, scale_ratio=t.scale, window_s=t.window, cap=t.cap)
        return schedule(trace, time_scale=t.time_scale, notice_s=t.reclaim_notice_s)

    async def _play_due(self) -> None:
        while self.player and self.player[0].at_s <= self.now():
            assert self.cluster is not None  # a trace plays only on a local cluster
            a = self.player.pop(0)
            name = node_name(a.gpu_id)
            if a.kind == "add":
                self.cluster.add_node(
                    name, Zone.PREEMPTIBLE, [a.gpu_id]
                )  # Ray needs the main thread
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
