"""PD configurations, plans, and minimal-change planning (paper §4.4.2).

A `PDConfig` is a target: `colocated(n)` or `disaggregated(p, d)` (counts of workers).
`plan_transition(state, target, usable_gpus)` turns the current state into a `Plan`: an
ordered tuple of operations (removals first, then role changes, then additions) that
reaches the target with the fewest operations:

* a worker on a GPU outside `usable_gpus` must go (one removal each);
* each role keeps up to its target count of its current workers (no operation);
* every other surviving worker is *excess*, every missing worker a *deficit*. A role
  change settles one excess and one deficit in one operation, so the planner reassigns
  `min(excess, deficit)` workers, removes the rest of the excess and adds the rest of the
  deficit on free usable GPUs. No plan can do better: each excess worker needs at least
  one operation, and so does each deficit, and only a role change serves both at once.

Which workers to keep is decided by a stable preference (active before initialising
before inactive before draining; dedicated before preemptible before borrowed GPUs; then
age), so equal inputs always give the same plan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pearl.control.state import ClusterState, Role, Status, Worker, Zone

_STATUS_KEEP = {Status.ACTIVE: 0, Status.INITIALIZING: 1, Status.INACTIVE: 2, Status.DRAINING: 3}
_ZONE_KEEP = {Zone.DEDICATED: 0, Zone.PREEMPTIBLE: 1, Zone.OVERLAP: 2}


class PlanError(ValueError):
    """The target cannot be reached with the usable GPUs."""


@dataclass(frozen=True, slots=True, order=True)
class PDConfig:
    """A PD execution target: counts of workers by role."""

    mode: Literal["colocated", "disaggregated"]
    num_colocated: int = 0
    num_prefill: int = 0
    num_decode: int = 0

    def __post_init__(self) -> None:
        if self.mode == "colocated":
            if self.num_colocated < 1 or self.num_prefill or self.num_decode:
                raise ValueError("colocated needs n >= 1 colocated workers and no P/D workers")
        elif self.mode == "disaggregated":
            if self.num_prefill < 1 or self.num_decode < 1 or self.num_colocated:
                raise ValueError("disaggregated needs p >= 1 prefill and d >= 1 decode workers")
        else:
            raise ValueError(f"unknown mode {self.mode!r}")

    @classmethod
    def colocated(cls, n: int) -> PDConfig:
        return cls("colocated", num_colocated=n)

    @classmethod
    def disaggregated(cls, p: int, d: int) -> PDConfig:
        return cls("disaggregated", num_prefill=p, num_decode=d)

    @classmethod
    def parse(cls, text: str) -> PDConfig:
        """`colocated:N`, `disaggregated:P:D` (or `disagg:P:D`)."""
        m = re.fullmatch(r"\s*(colocated|coloc):(\d+)\s*", text)
        if m:
            return cls.colocated(int(m.group(2)))
        m = re.fullmatch(r"\s*(disaggregated|disagg):(\d+):(\d+)\s*", text)
        if m:
            return cls.disaggregated(int(m.group(2)), int(m.group(3)))
        raise ValueError(f"'{text}' is not a PD config (use colocated:N or disaggregated:P:D)")

    @property
    def is_colocated(self) -> bool:
        return self.mode == "colocated"

    @property
    def num_workers(self) -> int:
        return self.num_colocated + self.num_prefill + self.num_decode

    def role_counts(self) -> dict[Role, int]:
        return {
            Role.COLOCATED: self.num_colocated,
            Role.PREFILL: self.num_prefill,
            Role.DECODE: self.num_decode,
        }

    def __str__(self) -> str:
        if self.is_colocated:
            return f"colocated:{self.num_colocated}"
        return f"disaggregated:{self.num_prefill}:{self.num_decode}"

    def to_json(self) -> str:
        return str(self)


@dataclass(frozen=True, slots=True)
class AddWorker:
    """Start a new worker (it begins `initializing`) bound to `gpu_ids`."""

    worker_id: str
    gpu_ids: tuple[str, ...]
    role: Role

    def to_json(self) -> dict[str, Any]:
        return {
            "op": "add",
            "worker_id": self.worker_id,
            "gpu_ids": list(self.gpu_ids),
            "role": self.role.value,
        }


@dataclass(frozen=True, slots=True)
class RemoveWorker:
    worker_id: str

    def to_json(self) -> dict[str, Any]:
        return {"op": "remove", "worker_id": self.worker_id}


@dataclass(frozen=True, slots=True)
class SetRole:
    worker_id: str
    role: Role

    def to_json(self) -> dict[str, Any]:
        return {"op": "set_role", "worker_id": self.worker_id, "role": self.role.value}


PlanOp = AddWorker | RemoveWorker | SetRole


@dataclass(frozen=True, slots=True)
class Plan:
    target: PDConfig
    ops: tuple[PlanOp, ...] = ()

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def is_empty(self) -> bool:
        return not self.ops

    @property
    def adds(self) -> tuple[AddWorker, ...]:
        return tuple(op for op in self.ops if isinstance(op, AddWorker))

    @property
    def removes(self) -> tuple[RemoveWorker, ...]:
        return tuple(op for op in self.ops if isinstance(op, RemoveWorker))

    @property
    def role_changes(self) -> tuple[SetRole, ...]:
        return tuple(op for op in self.ops if isinstance(op, SetRole))

    def to_json(self) -> dict[str, Any]:
        return {
            "target": str(self.target),
            "num_ops": self.num_ops,
            "num_adds": len(self.adds),
            "num_removes": len(self.removes),
            "num_role_changes": len(self.role_changes),
            "ops": [op.to_json() for op in self.ops],
        }


def _keep_key(state: ClusterState, w: Worker) -> tuple[int, int, int, str]:
    zone = max(_ZONE_KEEP[state.gpu(g).zone] for g in w.gpu_ids)
    seq = int(w.worker_id[1:]) if w.worker_id[1:].isdigit() else 1 << 60
    return (_STATUS_KEEP[w.status], zone, seq, w.worker_id)


def _gpu_groups(
    state: ClusterState, free: list[str], size: int, count: int
) -> list[tuple[str, ...]]:
    """Take `count` groups of `size` free GPUs, each group on one node, in (zone, node, id) order."""
    by_node: dict[str, list[str]] = {}
    for g in free:
        by_node.setdefault(state.gpu(g).node, []).append(g)
    groups: list[tuple[str, ...]] = []
    for g in free:  # walk in preference order, forming a group when a node has enough left
        node = state.gpu(g).node
        pool = by_node[node]
        if len(groups) == count:
            break
        if pool and pool[0] == g and len(pool) >= size:
            groups.append(tuple(pool[:size]))
            del pool[:size]
    return groups


def plan_transition(
    state: ClusterState,
    target: PDConfig,
    usable_gpus: Iterable[str],
    *,
    gpus_per_worker: int = 1,
) -> Plan:
    """The minimal plan from `state` to `target` using only `usable_gpus`.

    Raises `PlanError` if the usable GPUs cannot host the target. Deterministic: equal
    inputs give equal plans. New worker ids continue `state.next_worker_seq`.
    """
    if gpus_per_worker < 1:
        raise PlanError("gpus_per_worker must be >= 1")
    usable = frozenset(g for g in usable_gpus if state.has_gpu(g))

    # Phase 1: forced removals (a worker on a GPU that is no longer usable).
    keys = {w.worker_id: _keep_key(state, w) for w in state.workers}
    forced: list[Worker] = []
    survivors: list[Worker] = []
    for w in state.workers:
        (survivors if all(g in usable for g in w.gpu_ids) else forced).append(w)
    survivors.sort(key=lambda w: keys[w.worker_id])

    # Phase 2: keep each role up to its target count, in preference order.
    want = target.role_counts()
    kept_per_role = {r: 0 for r in Role}
    excess: list[Worker] = []
    for w in survivors:
        if kept_per_role[w.role] < want[w.role]:
            kept_per_role[w.role] += 1
        else:
            excess.append(w)
    deficits: list[Role] = []
    for role in (Role.COLOCATED, Role.PREFILL, Role.DECODE):
        deficits.extend([role] * (want[role] - kept_per_role[role]))

    # Phase 3: reassign the most preferred excess workers, remove the rest, add the rest.
    num_reassign = min(len(excess), len(deficits))
    reassign = list(zip(excess[:num_reassign], deficits[:num_reassign], strict=True))
    removed = forced + excess[num_reassign:]
    to_add = deficits[num_reassign:]

    removed_ids = {w.worker_id for w in removed}
    bound = {g for w in state.workers if w.worker_id not in removed_ids for g in w.gpu_ids}
    free: list[str] = []
    if to_add:  # only additions need free GPUs
        free = [g.gpu_id for g in state.gpus if g.gpu_id in usable and g.gpu_id not in bound]
        free.sort(key=lambda g: (_ZONE_KEEP[state.gpu(g).zone], state.gpu(g).node, g))
    groups = _gpu_groups(state, free, gpus_per_worker, len(to_add))
    if len(groups) < len(to_add):
        raise PlanError(
            f"target {target} needs {len(to_add)} new worker(s) of {gpus_per_worker} GPU(s) "
            f"but only {len(groups)} can be placed on the {len(free)} free usable GPU(s)"
        )

    ops: list[PlanOp] = [
        RemoveWorker(w.worker_id) for w in sorted(removed, key=lambda w: keys[w.worker_id])
    ]
    ops += [SetRole(w.worker_id, role) for w, role in reassign]
    seq = state.next_worker_seq
    for role, gpus in zip(to_add, groups, strict=False):
        ops.append(AddWorker(f"w{seq}", gpus, role))
        seq += 1
    return Plan(target, tuple(ops))


def apply(state: ClusterState, plan: Plan | Iterable[PlanOp]) -> ClusterState:
    """Apply plan operations in order; the result is checked like every state.

    New workers start `initializing`; a worker whose role changes keeps its status.
    """
    ops = plan.ops if isinstance(plan, Plan) else tuple(plan)
    workers = {w.worker_id: w for w in state.workers}
    seq = state.next_worker_seq
    for op in ops:
        if isinstance(op, RemoveWorker):
            if op.worker_id not in workers:
                raise PlanError(f"cannot remove unknown worker '{op.worker_id}'")
            del workers[op.worker_id]
        elif isinstance(op, SetRole):
            if op.worker_id not in workers:
                raise PlanError(f"cannot change role of unknown worker '{op.worker_id}'")
            w = workers[op.worker_id]
            workers[op.worker_id] = Worker(
                w.worker_id, w.gpu_ids, op.role, w.status, w.weight_version
            )
        else:
            if op.worker_id in workers:
                raise PlanError(f"worker '{op.worker_id}' already exists")
            workers[op.worker_id] = Worker(op.worker_id, op.gpu_ids, op.role, Status.INITIALIZING)
            if op.worker_id[1:].isdigit():
                seq = max(seq, int(op.worker_id[1:]) + 1)
    return ClusterState(gpus=state.gpus, workers=tuple(workers.values()), next_worker_seq=seq)


def config_of(state: ClusterState, statuses: Iterable[Status] | None = None) -> PDConfig | None:
    """The PD config the state's workers form (None if they form none, e.g. no workers)."""
    counts = state.role_counts(statuses)
    c, p, d = counts[Role.COLOCATED], counts[Role.PREFILL], counts[Role.DECODE]
    if c and not p and not d:
        return PDConfig.colocated(c)
    if p and d and not c:
        return PDConfig.disaggregated(p, d)
    return None


def pd_reconfiguration(
    before: ClusterState, after: ClusterState
) -> tuple[PDConfig, PDConfig] | None:
    """The PD reconfiguration from `before` to `after`, as the configs of their active
    workers, when the mode or the P:D ratio changed; None otherwise (a rescale of the same
    ratio, 1:1 -> 2:2, or either state forming no config). Both worlds log a run's
    `pd_reconfig` events by this rule."""
    active = (Status.ACTIVE,)
    c0, c1 = config_of(before, active), config_of(after, active)
    if c0 is None or c1 is None or c0 == c1:
        return None
    if c0.is_colocated != c1.is_colocated:
        return c0, c1
    if c0.is_colocated or c0.num_prefill * c1.num_workers == c1.num_prefill * c0.num_workers:
        return None
    return c0, c1
