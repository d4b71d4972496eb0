"""Versioned weight snapshots in Ray's object store (paper §5).

The trainer publishes each version once: `publish_weights(registry, state_dict, version)`
puts the tensors into the object store in shards (numpy buffers, so readers map them
without a copy) and hands the registry a `Snapshot`: the version, a little metadata and the
shards' object references. Nothing else is stored: no checkpoint file, no copy in the
registry (the controller too keeps only version and refs).

A worker told to sync pulls the shards with `fetch_weights(snapshot)` in the background and
loads them between engine steps; a new worker pulls the latest version before it is admitted.

`SnapshotRegistry` is a small Ray actor (named, one per namespace) pinned to the node that
creates it (the driver's node, which is never preemptible): it keeps the newest `keep`
versions and drops older ones, which frees their objects once no worker still reads them.
The objects are owned by the publishing process: if the trainer dies, its snapshots go.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported lazily: the registry actor's process needs no torch
    import torch

REGISTRY_NAME = "pearl_snapshots"
DEFAULT_SHARD_BYTES = 256 * 1024 * 1024


class SnapshotError(LookupError):
    """A version that was never published, or was already dropped."""


@dataclass(frozen=True)
class Snapshot:
    """One published weight version: what the controller and the registry keep.

    `shards` holds `(names, ObjectRef)` pairs: each object is a dict from parameter name to
    an encoded tensor. Refs inside a tuple travel as refs through actor calls.
    """

    version: int
    shards: tuple[tuple[tuple[str, ...], Any], ...]
    num_bytes: int
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for names, _ in self.shards for n in names)


def publish_weights(
    registry: Any,
    state_dict: Mapping[str, torch.Tensor],
    version: int,
    *,
    metadata: Mapping[str, Any] | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> Snapshot:
    """Put `state_dict` into the object store and register it as `version`.

    Tensors are grouped in order into shards of at most `shard_bytes` (a larger tensor gets
    a shard of its own). Returns the `Snapshot`; the registry refuses a version that is not
    newer than its latest (`ValueError`).
    """
    import ray

    from pearl.runtime.transport.kv_transfer import encode_tensors, payload_num_bytes

    if version < 0:
        raise ValueError(f"version must not be negative, got {version}")
    encoded = {name: encode_tensors(t) for name, t in state_dict.items()}
    sizes = {name: payload_num_bytes(enc) for name, enc in encoded.items()}
    shards = tuple(
        (names, ray.put({n: encoded[n] for n in names}))
        for names in shard_names(sizes, shard_bytes)
    )
    total = sum(sizes.values())
    snap = Snapshot(version, shards, total, dict(metadata or {}))
    ray.get(registry.publish.remote(snap))
    return snap


def shard_names(sizes: Mapping[str, int], shard_bytes: int) -> list[tuple[str, ...]]:
    """Group names, in order, into shards of at most `shard_bytes` (an oversized tensor
    gets a shard of its own; no shard is empty)."""
    if shard_bytes < 1:
        raise ValueError("shard_bytes must be positive")
    shards: list[tuple[str, ...]] = []
    group: list[str] = []
    group_bytes = 0
    for name, size in sizes.items():
        if group and group_bytes + size > shard_bytes:
            shards.append(tuple(group))
            group, group_bytes = [], 0
        group.append(name)
        group_bytes += size
    if group:
        shards.append(tuple(group))
    return shards


def fetch_weights(snapshot: Snapshot) -> dict[str, torch.Tensor]:
    """All tensors of `snapshot` (read-only views on the object store's shared memory)."""
    import ray

    from pearl.runtime.transport.kv_transfer import decode_tensors

    objects = ray.get([ref for _, ref in snapshot.shards])
    out: dict[str, torch.Tensor] = {}
    for obj in objects:
        out.update(decode_tensors(obj))
    return out


class _Registry:
    """Keeps the newest `keep` snapshots; see the module docstring."""

    def __init__(self, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self._keep = keep
        self._snapshots: dict[int, Snapshot] = {}

    def publish(self, snapshot: Snapshot) -> int:
        latest = max(self._snapshots, default=-1)
        if snapshot.version <= latest:
            raise ValueError(f"version {snapshot.version} is not newer than {latest}")
        self._snapshots[snapshot.version] = snapshot
        for old in sorted(self._snapshots)[: -self._keep]:
            del self._snapshots[old]
        return snapshot.version

    def latest(self) -> Snapshot | None:
        return self._snapshots[max(self._snapshots)] if self._snapshots else None

    def get(self, version: int) -> Snapshot:
        try:
            return self._snapshots[version]
        except KeyError:
            have = sorted(self._snapshots)
            raise SnapshotError(
                f"weight version {version} is not available (have {have})"
            ) from None

    def versions(self) -> list[int]:
        return sorted(self._snapshots)


def get_registry(*, name: str = REGISTRY_NAME, keep: int = 2) -> Any:
    """The named registry actor of this namespace, created on this node if missing."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    cls = ray.remote(_Registry)
    return cls.options(
        name=name,
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=8,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
    ).remote(keep)
