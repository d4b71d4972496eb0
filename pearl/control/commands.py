"""Commands: what the world must do next (contract B; docs/architecture.md).

`Controller.handle(event)` returns a list of these, in the order the world must execute
them. Each command's completion comes back as a later event:

| command            | completion event(s)                                   |
|--------------------|-------------------------------------------------------|
| InitWorker         | WorkerReady or WorkerInitFailed                       |
| SyncWeights        | WeightsSynced                                         |
| AdmitGroup         | none (takes effect at once)                           |
| ChangeRole         | none (the worker keeps its requests; new turns follow the new role) |
| Drain              | WorkerDrained (after its in-flight requests finish)   |
| Interrupt          | RequestInterrupted per request it held                |
| StopWorker         | none (the worker and its requests are gone)           |
| ReleaseGpus        | none (synchronous: the GPUs are handed back at once)  |
| OffloadTraining    | none (training state moved off the GPUs)              |
| RestoreTraining    | TrainingRestored (optional: training state is back)   |
| Route              | [RequestPhase...] then TurnFinished or RequestInterrupted |
| StartRolloutBatch  | TrajectoryReady per trajectory, later TrajectoryDone  |

A Route for a trajectory whose previous request the world still runs (the controller
counted it as lost when a worker of its old route went, although it had moved on to its
decode worker) supersedes that request: the world aborts it where it is, keeping its
generated tokens, and follows the new route. The controller's book is the authority.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from pearl.control.state import Role


@dataclass(frozen=True, slots=True)
class InitWorker:
    """Start worker `worker_id` on `gpu_ids` with `role`, in the background, as a member of
    expansion group `group_id` (the group is admitted all together or not at all)."""

    worker_id: str
    gpu_ids: tuple[str, ...]
    role: Role
    group_id: str


@dataclass(frozen=True, slots=True)
class SyncWeights:
    """Load weights `version` into the worker (pull by version)."""

    worker_id: str
    version: int


@dataclass(frozen=True, slots=True)
class AdmitGroup:
    """Every worker of `group_id` is ready and synced: they become routable together.
    A group id is "<kind>-<n>", its kind what made it: "initial", "expand" (preemptible GPUs
    taken, paper §4.5), "borrow" (idle training GPUs, §4.6), or a re-plan's ("switch",
    "shrink")."""

    group_id: str
    worker_ids: tuple[str, ...]

    @property
    def is_expansion(self) -> bool:
        """Preemptible GPUs admitted: what a run directory logs as an "expansion" event."""
        return self.group_id.startswith("expand-")


@dataclass(frozen=True, slots=True)
class ChangeRole:
    """The worker serves `role` from now on (requests in flight finish where they are)."""

    worker_id: str
    role: Role


@dataclass(frozen=True, slots=True)
class Drain:
    """Accept no new request; finish those in flight, then report `WorkerDrained`."""

    worker_id: str


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Abort every request on the worker now, preserving each trajectory's generated prefix
    and environment progress; one `RequestInterrupted` per request comes back."""

    worker_id: str


@dataclass(frozen=True, slots=True)
class StopWorker:
    """Stop the worker and free its GPUs' memory (its requests, if any, are interrupted)."""

    worker_id: str


@dataclass(frozen=True, slots=True)
class ReleaseGpus:
    """Hand `gpu_ids` back to `to` now (synchronously); no worker is bound to them any more."""

    gpu_ids: tuple[str, ...]
    to: Literal["training", "provider"]


@dataclass(frozen=True, slots=True)
class OffloadTraining:
    """Move the trainer's state off `gpu_ids` so rollout can borrow them (paper §4.6)."""

    gpu_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RestoreTraining:
    """Bring the trainer's state back onto `gpu_ids` (after they are released to training)."""

    gpu_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Route:
    """Run the next turn of `traj_id`: prefill on `prefill_worker_id`, then decode on
    `decode_worker_id` (None: decode on the prefill worker, colocated). `full_prefill`: the
    worker holds no prefix of it (resumed after an interruption), prefill the whole context."""

    traj_id: str
    prefill_worker_id: str
    decode_worker_id: str | None = None
    full_prefill: bool = False


@dataclass(frozen=True, slots=True)
class StartRolloutBatch:
    """Start the environments of rollout batch `step` (trajectories `traj_ids`)."""

    step: int
    traj_ids: tuple[str, ...]


Command = (
    InitWorker
    | SyncWeights
    | AdmitGroup
    | ChangeRole
    | Drain
    | Interrupt
    | StopWorker
    | ReleaseGpus
    | OffloadTraining
    | RestoreTraining
    | Route
    | StartRolloutBatch
)


def to_doc(c: Command) -> dict[str, Any]:
    """The command as a JSON-ready dict: its name under "command", then its fields (tuples as
    lists, a role as its name). What a run directory's decisions.jsonl records of it."""
    doc: dict[str, Any] = {"command": type(c).__name__}
    for f in fields(c):
        v = getattr(c, f.name)
        doc[f.name] = list(v) if isinstance(v, tuple) else v.value if isinstance(v, Role) else v
    return doc
