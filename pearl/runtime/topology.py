"""Devices as Ray resources on zone-labelled nodes, and the signals nodes give (paper §4.5).

Naming, one place:

* every device slot is the custom resource `pearl_gpu_<gpu_id>` (amount 1) on its node, so
  a worker bound to GPU `g` is placed exactly there (`worker_options((g,))`); every node
  also carries `pearl_slot` (its number of slots) and `pearl_zone_<zone>` resources;
* nodes are labelled `pearl.zone=<zone>` and `pearl.node=<name>` (zone: dedicated,
  preemptible, overlap; the training pool's GPUs are `overlap`, paper §4.4.1);
* on CUDA machines the worker also asks for `num_gpus` (one per bound slot).

`discover_gpus()` reads the live cluster back into control-plane `Gpu`s. `reclaim_notices()`
turns Ray's node draining state into reclaim notices: a node that is draining with a
deadline is about to be taken (a raylet that receives SIGTERM from a cloud preemption, or
`ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N`).
Ray 2.x exposes the deadline of a draining node but not, while the node is alive, the drain
reason; so a notice is produced for draining nodes of the preemptible and overlap zones
that carry a deadline (idle-termination drains carry none and take a node that is empty).

A local cluster of such nodes (tests, benchmarks, the trace player) and joining a cluster
at an address are `pearl.runtime.local_cluster`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pearl.control.state import Gpu, Zone

SLOT_RESOURCE = "pearl_slot"
GPU_RESOURCE_PREFIX = "pearl_gpu_"
ZONE_RESOURCE_PREFIX = "pearl_zone_"
ZONE_LABEL = "pearl.zone"
NODE_LABEL = "pearl.node"


def gpu_resource(gpu_id: str) -> str:
    return f"{GPU_RESOURCE_PREFIX}{gpu_id}"


def node_resources(zone: Zone | str, gpu_ids: Iterable[str]) -> dict[str, float]:
    """Custom resources of a node holding `gpu_ids` in `zone`."""
    ids = tuple(gpu_ids)
    res: dict[str, float] = {gpu_resource(g): 1.0 for g in ids}
    if ids:
        res[SLOT_RESOURCE] = float(len(ids))
        res[f"{ZONE_RESOURCE_PREFIX}{Zone(zone).value}"] = float(len(ids))
    return res


def node_labels(zone: Zone | str, name: str) -> dict[str, str]:
    return {ZONE_LABEL: Zone(zone).value, NODE_LABEL: name}


def current_node_id() -> str:
    """The Ray node this process runs on ("" outside Ray; never raises: status calls use it)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:  # noqa: BLE001 - status must always answer
        return ""


def worker_options(gpu_ids: tuple[str, ...], *, use_cuda: bool = False) -> dict[str, Any]:
    """Ray actor options that bind a worker to exactly `gpu_ids` (its device slots)."""
    if not gpu_ids:
        raise ValueError("a worker needs at least one device slot")
    opts: dict[str, Any] = {
        "resources": {gpu_resource(g): 1.0 for g in gpu_ids},
        "num_cpus": 0,
    }
    if use_cuda:
        opts["num_gpus"] = len(gpu_ids)
    return opts


def discover_gpus(nodes: list[Mapping[str, Any]] | None = None) -> tuple[Gpu, ...]:
    """The device slots of the live cluster as control-plane `Gpu`s (sorted by id).

    `nodes` defaults to `ray.nodes()`; a node's zone comes from its `pearl.zone` label (or
    its `pearl_zone_*` resource), its name from the `pearl.node` label (else its node id).
    """
    if nodes is None:
        import ray

        nodes = ray.nodes()
    gpus: list[Gpu] = []
    for node in nodes:
        if not node.get("Alive", False):
            continue
        resources = node.get("Resources", {}) or {}
        labels = node.get("Labels", {}) or {}
        zone = _zone_of(labels, resources)
        if zone is None:
            continue
        name = labels.get(NODE_LABEL, node.get("NodeID", "node"))
        for key in resources:
            if key.startswith(GPU_RESOURCE_PREFIX):
                gpus.append(Gpu(key.removeprefix(GPU_RESOURCE_PREFIX), zone, name))
    return tuple(sorted(gpus, key=lambda g: g.gpu_id))


def _zone_of(labels: Mapping[str, str], resources: Mapping[str, float]) -> Zone | None:
    if ZONE_LABEL in labels:
        return Zone(labels[ZONE_LABEL])
    for key in resources:
        if key.startswith(ZONE_RESOURCE_PREFIX):
            return Zone(key.removeprefix(ZONE_RESOURCE_PREFIX))
    return None


@dataclass(frozen=True, slots=True)
class NodeReclaim:
    """A node about to be taken: its device slots and the wall-clock deadline (unix s)."""

    node_id: str
    node_name: str
    zone: Zone
    gpu_ids: tuple[str, ...]
    deadline_unix_s: float


def reclaim_notices(
    draining: Mapping[str, int] | None = None,
    nodes: list[Mapping[str, Any]] | None = None,
    *,
    zones: tuple[Zone, ...] = (Zone.PREEMPTIBLE, Zone.OVERLAP),
) -> tuple[NodeReclaim, ...]:
    """Draining nodes with a deadline in `zones`, as reclaim information (node id order).

    `draining` maps node id (hex) to deadline in unix ms (0: none), as Ray's
    `get_draining_nodes()` returns it; `nodes` is `ray.nodes()`. Both default to the live
    cluster. A caller turns each into `ReclaimNotice(time_s, gpu_ids, deadline_s)` on its
    own clock (the deadline converts with `deadline_unix_s - time.time()`).
    """
    if draining is None:
        import ray

        draining = ray._private.state.state.get_draining_nodes()
    if nodes is None:
        import ray

        nodes = ray.nodes()
    out: list[NodeReclaim] = []
    by_id = {n.get("NodeID"): n for n in nodes}
    for node_id, deadline_ms in sorted(draining.items()):
        node = by_id.get(node_id)
        if node is None or not node.get("Alive", False) or not deadline_ms:
            continue
        resources = node.get("Resources", {}) or {}
        labels = node.get("Labels", {}) or {}
        zone = _zone_of(labels, resources)
        if zone is None or zone not in zones:
            continue
        gpu_ids = tuple(
            sorted(
                k.removeprefix(GPU_RESOURCE_PREFIX)
                for k in resources
                if k.startswith(GPU_RESOURCE_PREFIX)
            )
        )
        name = labels.get(NODE_LABEL, node_id)
        out.append(NodeReclaim(node_id, name, zone, gpu_ids, deadline_ms / 1000.0))
    return tuple(out)


def gpu_changes(
    before: Iterable[Gpu], after: Iterable[Gpu]
) -> tuple[tuple[Gpu, ...], tuple[str, ...]]:
    """(GPUs that joined, ids of GPUs that left) between two `discover_gpus()` readings."""
    old = {g.gpu_id: g for g in before}
    new = {g.gpu_id: g for g in after}
    joined = tuple(g for gid, g in sorted(new.items()) if gid not in old)
    gone = tuple(gid for gid in sorted(old) if gid not in new)
    return joined, gone


@dataclass(frozen=True)
class WatchState:
    """What a `ClusterWatcher` has already reported: live GPUs and noticed node ids."""

    gpus: tuple[Gpu, ...] = ()
    noticed: frozenset[str] = frozenset()


def watch_step(
    prev: WatchState,
    gpus: tuple[Gpu, ...],
    reclaims: tuple[NodeReclaim, ...],
    *,
    now_s: float,
    now_unix_s: float,
    zones_offered: tuple[Zone, ...] = (Zone.PREEMPTIBLE,),
) -> tuple[WatchState, list[Any]]:
    """Compare one reading of the cluster with the last; return the controller events.

    Pure: `gpus` is a `discover_gpus()` reading, `reclaims` a `reclaim_notices()` reading,
    `now_s` the caller's clock and `now_unix_s` wall time (a deadline converts as
    `now_s + deadline_unix_s - now_unix_s`). Events, in this order: `ReclaimNotice` once per
    newly draining node (for its GPUs still live), `GpusGone` for GPUs that left,
    `GpusOffered` for GPUs that joined in `zones_offered` (dedicated and training GPUs are
    configured, not offered). A node that drains and leaves between two readings yields
    only `GpusGone`.
    """
    from pearl.control.events import GpusGone, GpusOffered, ReclaimNotice

    events: list[Any] = []
    live = {g.gpu_id for g in gpus}
    noticed = set(prev.noticed)
    for r in reclaims:
        ids = tuple(g for g in r.gpu_ids if g in live)
        if r.node_id in noticed or not ids:
            continue
        noticed.add(r.node_id)
        deadline_s = now_s + max(0.0, r.deadline_unix_s - now_unix_s)
        events.append(ReclaimNotice(now_s, ids, deadline_s))
    joined, gone = gpu_changes(prev.gpus, gpus)
    if gone:
        events.append(GpusGone(now_s, gone))
    offered = tuple(g for g in joined if g.zone in zones_offered)
    if offered:
        events.append(GpusOffered(now_s, offered))
    draining_now = {r.node_id for r in reclaims}
    return WatchState(tuple(gpus), frozenset(noticed & draining_now)), events


class ClusterWatcher:
    """Turns the live Ray cluster into controller events by polling (`poll(now_s)`).

    The same code serves a cloud autoscaler (nodes drained on preemption, then gone) and
    the local trace player. The first poll reports the GPUs already there as offered.
    """

    def __init__(self, zones_offered: tuple[Zone, ...] = (Zone.PREEMPTIBLE,)) -> None:
        self.state = WatchState()
        self.zones_offered = zones_offered

    def poll(self, now_s: float) -> list[Any]:
        nodes = _ray_nodes()
        self.state, events = watch_step(
            self.state,
            discover_gpus(nodes),
            reclaim_notices(nodes=nodes),
            now_s=now_s,
            now_unix_s=time.time(),
            zones_offered=self.zones_offered,
        )
        return events


def _ray_nodes() -> list[Mapping[str, Any]]:
    import ray

    return ray.nodes()
