"""The unified GPU-worker-role state (paper §4.4.1).

One `ClusterState` holds every GPU (with its zone) and every rollout worker (with its fixed
GPU binding, role and status). It is immutable: every change returns a new state, and every
new state checks all invariants in one place (`_check`). It is the single source of truth
that the router reads and the planner changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from pearl.errors import PathError


class Zone(StrEnum):
    """Where a GPU lives. `overlap` is a training GPU that rollout may borrow while idle."""

    DEDICATED = "dedicated"
    PREEMPTIBLE = "preemptible"
    OVERLAP = "overlap"


class Role(StrEnum):
    COLOCATED = "colocated"
    PREFILL = "prefill"
    DECODE = "decode"


class Status(StrEnum):
    """`active` serves requests; `inactive` is alive and serves none; the other two are
    transitions and serve none."""

    INITIALIZING = "initializing"
    ACTIVE = "active"
    INACTIVE = "inactive"
    DRAINING = "draining"


class StateError(PathError):
    """A state that breaks an invariant. `path` is a JSON path to the offending part."""


@dataclass(frozen=True, slots=True)
class Gpu:
    gpu_id: str
    zone: Zone
    node: str = "node0"


@dataclass(frozen=True, slots=True)
class Worker:
    """A rollout worker bound for life to `gpu_ids` (several for tensor parallelism)."""

    worker_id: str
    gpu_ids: tuple[str, ...]
    role: Role
    status: Status = Status.ACTIVE
    weight_version: int = 0


_ZONE_ORDER = {Zone.DEDICATED: 0, Zone.PREEMPTIBLE: 1, Zone.OVERLAP: 2}


@dataclass(frozen=True)
class ClusterState:
    """All GPUs and workers. Construct freely; invalid combinations raise `StateError`.

    `next_worker_seq` numbers new workers (`w<seq>`) so that a worker id is never reused,
    even after its worker is gone: late events about an old worker cannot hit a new one.
    """

    gpus: tuple[Gpu, ...] = ()
    workers: tuple[Worker, ...] = ()
    next_worker_seq: int = 0
    _gpu_index: dict[str, Gpu] = field(init=False, repr=False, compare=False, hash=False)
    _worker_index: dict[str, Worker] = field(init=False, repr=False, compare=False, hash=False)
    _owner: dict[str, str] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", tuple(self.gpus))
        object.__setattr__(self, "workers", tuple(self.workers))
        self._check()

    # -- invariants (the one place they are checked) ------------------------------------
    def _check(self) -> None:
        gpu_index: dict[str, Gpu] = {}
        for i, g in enumerate(self.gpus):
            if not isinstance(g.gpu_id, str) or not g.gpu_id:
                raise StateError("GPU id must be a non-empty string", f"gpus[{i}]", "gpu_id")
            if g.gpu_id in gpu_index:
                raise StateError(f"GPU '{g.gpu_id}' listed twice", f"gpus[{i}]", "gpu_id")
            if not isinstance(g.zone, Zone):
                raise StateError(f"unknown zone {g.zone!r}", f"gpus[{i}]", "zone")
            gpu_index[g.gpu_id] = g
        worker_index: dict[str, Worker] = {}
        owner: dict[str, str] = {}
        for i, w in enumerate(self.workers):
            path = f"workers[{i}]"
            if not w.worker_id:
                raise StateError("worker id must be a non-empty string", path, "worker_id")
            if w.worker_id in worker_index:
                raise StateError(f"worker '{w.worker_id}' listed twice", path, "worker_id")
            if not w.gpu_ids:
                raise StateError("a worker needs at least one GPU", path, "gpu_ids")
            if not isinstance(w.role, Role):
                raise StateError(f"unknown role {w.role!r}", path, "role")
            if not isinstance(w.status, Status):
                raise StateError(f"unknown status {w.status!r}", path, "status")
            for gid in w.gpu_ids:
                if gid not in gpu_index:
                    raise StateError(
                        f"worker '{w.worker_id}' is bound to unknown GPU '{gid}'", path, "gpu_ids"
                    )
                if gid in owner:
                    raise StateError(
                        f"GPU '{gid}' bound twice (workers '{owner[gid]}' and '{w.worker_id}')",
                        path,
                        "gpu_ids",
                    )
                owner[gid] = w.worker_id
            worker_index[w.worker_id] = w
        if self.next_worker_seq < 0:
            raise StateError("must not be negative", "next_worker_seq", "next_worker_seq")
        object.__setattr__(self, "_gpu_index", gpu_index)
        object.__setattr__(self, "_worker_index", worker_index)
        object.__setattr__(self, "_owner", owner)

    # -- queries --------------------------------------------------------------------------
    def gpu(self, gpu_id: str) -> Gpu:
        return self._gpu_index[gpu_id]

    def worker(self, worker_id: str) -> Worker:
        return self._worker_index[worker_id]

    def has_gpu(self, gpu_id: str) -> bool:
        return gpu_id in self._gpu_index

    def has_worker(self, worker_id: str) -> bool:
        return worker_id in self._worker_index

    def owner_of(self, gpu_id: str) -> str | None:
        """The worker bound to `gpu_id`, if any."""
        return self._owner.get(gpu_id)

    def free_gpus(self) -> tuple[str, ...]:
        """GPUs no worker is bound to, in (zone, node, id) order."""
        free = [g for g in self.gpus if g.gpu_id not in self._owner]
        return tuple(
            g.gpu_id for g in sorted(free, key=lambda g: (_ZONE_ORDER[g.zone], g.node, g.gpu_id))
        )

    def gpus_in(self, *zones: Zone) -> tuple[str, ...]:
        return tuple(g.gpu_id for g in self.gpus if g.zone in zones)

    def workers_with(
        self, role: Role | None = None, statuses: Iterable[Status] | None = None
    ) -> tuple[Worker, ...]:
        wanted = None if statuses is None else frozenset(statuses)
        return tuple(
            w
            for w in self.workers
            if (role is None or w.role == role) and (wanted is None or w.status in wanted)
        )

    def routable(self) -> tuple[Worker, ...]:
        """Workers the router may send requests to: active ones only."""
        return self.workers_with(statuses=(Status.ACTIVE,))

    def role_counts(self, statuses: Iterable[Status] | None = None) -> dict[Role, int]:
        counts = {r: 0 for r in Role}
        for w in self.workers_with(statuses=statuses):
            counts[w.role] += 1
        return counts

    def condition(self, gpu_id: str) -> tuple[str, str | None]:
        """What a GPU is doing: (`idle` | an active worker's role | a worker's transition
        status, the worker id or None). Timelines and live views show this."""
        wid = self._owner.get(gpu_id)
        if wid is None:
            return "idle", None
        w = self._worker_index[wid]
        return (w.role.value if w.status is Status.ACTIVE else w.status.value), wid

    def zone_of_worker(self, worker_id: str) -> Zone:
        """The least stable zone among the worker's GPUs (overlap > preemptible > dedicated)."""
        w = self.worker(worker_id)
        return max((self.gpu(g).zone for g in w.gpu_ids), key=lambda z: _ZONE_ORDER[z])

    # -- changes (each returns a new, checked state) -------------------------------------
    def with_gpus(self, new: Iterable[Gpu]) -> ClusterState:
        return replace(self, gpus=self.gpus + tuple(new))

    def without_gpus(self, gpu_ids: Iterable[str]) -> ClusterState:
        """Drop GPUs; any worker still bound to one of them is an error (remove it first)."""
        drop = frozenset(gpu_ids)
        return replace(self, gpus=tuple(g for g in self.gpus if g.gpu_id not in drop))

    def with_worker(self, worker: Worker) -> ClusterState:
        return replace(self, workers=self.workers + (worker,))

    def new_worker(
        self, gpu_ids: tuple[str, ...], role: Role, status: Status = Status.INITIALIZING
    ) -> tuple[ClusterState, Worker]:
        w = Worker(f"w{self.next_worker_seq}", tuple(gpu_ids), role, status)
        return replace(
            self, workers=self.workers + (w,), next_worker_seq=self.next_worker_seq + 1
        ), w

    def without_worker(self, worker_id: str) -> ClusterState:
        return replace(self, workers=tuple(w for w in self.workers if w.worker_id != worker_id))

    def update_worker(self, worker_id: str, **changes: Any) -> ClusterState:
        if worker_id not in self._worker_index:
            raise StateError(f"unknown worker '{worker_id}'")
        return replace(
            self,
            workers=tuple(
                replace(w, **changes) if w.worker_id == worker_id else w for w in self.workers
            ),
        )

    def view(self, gpu_ids: Iterable[str]) -> ClusterState:
        """The sub-state of `gpu_ids` and of the workers bound only to them."""
        keep = frozenset(gpu_ids)
        return ClusterState(
            gpus=tuple(g for g in self.gpus if g.gpu_id in keep),
            workers=tuple(w for w in self.workers if all(g in keep for g in w.gpu_ids)),
            next_worker_seq=self.next_worker_seq,
        )

    # -- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": [{"gpu_id": g.gpu_id, "zone": g.zone.value, "node": g.node} for g in self.gpus],
            "workers": [
                {
                    "worker_id": w.worker_id,
                    "gpu_ids": list(w.gpu_ids),
                    "role": w.role.value,
                    "status": w.status.value,
                    "weight_version": w.weight_version,
                }
                for w in self.workers
            ],
            "next_worker_seq": self.next_worker_seq,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    @classmethod
    def from_json(cls, doc: Any) -> ClusterState:
        """Parse and validate; errors are `StateError` with a JSON path and field."""
        if not isinstance(doc, Mapping):
            raise StateError("expected a JSON object with 'gpus' and 'workers'", "$")
        unknown = set(doc) - {"gpus", "workers", "next_worker_seq"}
        if unknown:
            raise StateError(
                f"unknown key(s): {', '.join(sorted(unknown))}", "$", sorted(unknown)[0]
            )
        gpus_raw = doc.get("gpus", [])
        workers_raw = doc.get("workers", [])
        if not isinstance(gpus_raw, list):
            raise StateError("expected a list", "gpus", "gpus")
        if not isinstance(workers_raw, list):
            raise StateError("expected a list", "workers", "workers")
        gpus = [_parse_gpu(raw, f"gpus[{i}]") for i, raw in enumerate(gpus_raw)]
        workers = [_parse_worker(raw, f"workers[{i}]") for i, raw in enumerate(workers_raw)]
        seq_default = 1 + max((_seq_of(w.worker_id) for w in workers), default=-1)
        seq = doc.get("next_worker_seq", seq_default)
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise StateError("expected an integer", "next_worker_seq", "next_worker_seq")
        return cls(gpus=tuple(gpus), workers=tuple(workers), next_worker_seq=max(seq, seq_default))


def _seq_of(worker_id: str) -> int:
    if worker_id.startswith("w") and worker_id[1:].isdigit():
        return int(worker_id[1:])
    return -1


def _get(
    raw: Mapping[str, Any], path: str, key: str, kind: type | tuple[type, ...], default: Any = ...
) -> Any:
    if key not in raw:
        if default is ...:
            raise StateError("missing", f"{path}.{key}", key)
        return default
    value = raw[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise StateError(f"wrong type {type(value).__name__}", f"{path}.{key}", key)
    return value


def _enum(enum: type[StrEnum], value: str, path: str, key: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(e.value for e in enum)
        raise StateError(
            f"unknown value '{value}' (allowed: {allowed})", f"{path}.{key}", key
        ) from None


def _parse_gpu(raw: Any, path: str) -> Gpu:
    if not isinstance(raw, Mapping):
        raise StateError("expected an object", path)
    return Gpu(
        gpu_id=_get(raw, path, "gpu_id", str),
        zone=_enum(Zone, _get(raw, path, "zone", str), path, "zone"),
        node=_get(raw, path, "node", str, "node0"),
    )


def _parse_worker(raw: Any, path: str) -> Worker:
    if not isinstance(raw, Mapping):
        raise StateError("expected an object", path)
    gpu_ids = _get(raw, path, "gpu_ids", list)
    if not all(isinstance(g, str) for g in gpu_ids):
        raise StateError("GPU ids must be strings", f"{path}.gpu_ids", "gpu_ids")
    if len(set(gpu_ids)) != len(gpu_ids):
        raise StateError("a GPU is listed twice", f"{path}.gpu_ids", "gpu_ids")
    version = _get(raw, path, "weight_version", int, 0)
    if version < 0:
        raise StateError("must not be negative", f"{path}.weight_version", "weight_version")
    return Worker(
        worker_id=_get(raw, path, "worker_id", str),
        gpu_ids=tuple(gpu_ids),
        role=_enum(Role, _get(raw, path, "role", str), path, "role"),
        status=_enum(Status, _get(raw, path, "status", str, "active"), path, "status"),
        weight_version=version,
    )
