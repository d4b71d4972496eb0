"""Events: what happened in a world, and when (contract B; docs/architecture.md).

A world (the simulator or the Ray runtime) hands each event to `Controller.handle(event)`
and executes the commands it returns. Every event is a frozen dataclass whose first field is
`time_s`, the world's clock when it happened; the controller never reads a clock itself.

Events may arrive late, twice or out of order (a `WorkerReady` for a worker that was
cancelled meanwhile, a `ReclaimNotice` for a GPU already gone, a second `TrainingWants`):
the controller logs and ignores whatever makes no sense for its current state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pearl.control.state import Gpu

if TYPE_CHECKING:  # the decision engine's telemetry records (contract A)
    from pearl.control.telemetry import TurnRecord, WorkerStepRecord


# -- start ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Started:
    """The world is up. The controller plans workers for its free GPUs and starts the first
    rollout batches (it does the same on whatever event comes first; this one is explicit)."""

    time_s: float


# -- GPUs coming and going (paper §4.1.2, §4.5) ---------------------------------------------
@dataclass(frozen=True, slots=True)
class GpusOffered:
    """Preemptible GPUs became available. Admitting them is optional (expansion gate).

    `expected_window_s` is how long the provider expects them to stay, if it knows.
    """

    time_s: float
    gpus: tuple[Gpu, ...]
    expected_window_s: float | None = None


@dataclass(frozen=True, slots=True)
class ReclaimNotice:
    """The provider takes `gpu_ids` back at `deadline_s` (absolute time). Urgent."""

    time_s: float
    gpu_ids: tuple[str, ...]
    deadline_s: float


@dataclass(frozen=True, slots=True)
class GpusGone:
    """`gpu_ids` are gone now (with or without a notice); their workers died with them."""

    time_s: float
    gpu_ids: tuple[str, ...]


# -- training GPUs (intra-scale elasticity, paper §4.6) -------------------------------------
@dataclass(frozen=True, slots=True)
class TrainingIdle:
    """Training GPUs `gpu_ids` are idle until about `idle_until_s`; rollout may borrow them."""

    time_s: float
    gpu_ids: tuple[str, ...]
    idle_until_s: float


@dataclass(frozen=True, slots=True)
class TrainingWants:
    """Training needs `gpu_ids` back by `deadline_s` (absolute). Returning is mandatory."""

    time_s: float
    gpu_ids: tuple[str, ...]
    deadline_s: float


@dataclass(frozen=True, slots=True)
class TrainingRestored:
    """A `RestoreTraining` completed: the trainer's state is back on `gpu_ids` and the return
    is over. The controller learns the deactivation cost from it (return decided -> restored);
    a world that never emits it leaves that cost at its prior."""

    time_s: float
    gpu_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TrainingStepFinished:
    """The trainer published weights `version` (rollout workers should sync to it)."""

    time_s: float
    version: int


# -- worker lifecycle ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WorkerReady:
    """`InitWorker` completed: the worker is loaded and can receive `SyncWeights`."""

    time_s: float
    worker_id: str


@dataclass(frozen=True, slots=True)
class WorkerInitFailed:
    """`InitWorker` failed; the whole group of that worker is cancelled (all-or-nothing)."""

    time_s: float
    worker_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WorkerDrained:
    """A `Drain` completed: the worker holds no request any more."""

    time_s: float
    worker_id: str


@dataclass(frozen=True, slots=True)
class WeightsSynced:
    """The worker now serves weights `version`."""

    time_s: float
    worker_id: str
    version: int


# -- trajectories and requests ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TrajectoryReady:
    """Trajectory `traj_id` needs the model for its next turn (e.g. its env step ended)."""

    time_s: float
    traj_id: str


@dataclass(frozen=True, slots=True)
class RequestPhase:
    """Optional progress of a turn in flight: its prefill ended and its KV is moving to the
    decode worker (`kv_transfer`), or it is decoding (`decode`). Worlds may omit these; the
    book then shows the turn in `prefill` until it finishes. The Ray runtime reports both
    (decode: the first streamed tokens); the simulator only when built with
    `phase_events=True` (they change no decision and cost it wake-ups)."""

    time_s: float
    traj_id: str
    phase: Literal["kv_transfer", "decode"]


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """The model finished a turn of `traj_id` on `worker_id` (the decode worker if split);
    the trajectory is now in its environment (or done, then `TrajectoryDone` follows)."""

    time_s: float
    traj_id: str
    worker_id: str
    record: TurnRecord | None = None


@dataclass(frozen=True, slots=True)
class RequestInterrupted:
    """The request of `traj_id` on `worker_id` was interrupted; `generated_tokens` of its
    current turn are preserved and the trajectory resumes elsewhere with a full prefill."""

    time_s: float
    traj_id: str
    worker_id: str
    generated_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TrajectoryDone:
    """Trajectory `traj_id` finished (its last turn and env step are done)."""

    time_s: float
    traj_id: str


@dataclass(frozen=True, slots=True)
class RolloutStepFinished:
    """Rollout batch `step` completed; telemetry of its turns and worker steps attached."""

    time_s: float
    step: int
    turns: tuple[TurnRecord, ...] = ()
    worker_steps: tuple[WorkerStepRecord, ...] = ()


Event = (
    Started
    | GpusOffered
    | ReclaimNotice
    | GpusGone
    | TrainingIdle
    | TrainingWants
    | TrainingRestored
    | TrainingStepFinished
    | WorkerReady
    | WorkerInitFailed
    | WorkerDrained
    | WeightsSynced
    | TrajectoryReady
    | RequestPhase
    | TurnFinished
    | RequestInterrupted
    | TrajectoryDone
    | RolloutStepFinished
)

EVENT_TYPES: tuple[type, ...] = (
    Started,
    GpusOffered,
    ReclaimNotice,
    GpusGone,
    TrainingIdle,
    TrainingWants,
    TrainingRestored,
    TrainingStepFinished,
    WorkerReady,
    WorkerInitFailed,
    WorkerDrained,
    WeightsSynced,
    TrajectoryReady,
    RequestPhase,
    TurnFinished,
    RequestInterrupted,
    TrajectoryDone,
    RolloutStepFinished,
)


def describe(event: Any) -> str:
    """A one-line human description (for logs and ignored-event messages)."""
    fields = ", ".join(
        f"{name}={getattr(event, name)!r}"
        for name in event.__dataclass_fields__
        if name not in ("turns", "worker_steps", "record")
    )
    return f"{type(event).__name__}({fields})"
