"""The pure, sans-IO control plane: no clock, no threads, no I/O, no Ray.

Everything here is deterministic and driven by events; see docs/architecture.md.
"""

from pearl.control.plan import (
    AddWorker,
    PDConfig,
    Plan,
    PlanError,
    RemoveWorker,
    SetRole,
    apply,
    config_of,
    plan_transition,
)
from pearl.control.state import ClusterState, Gpu, Role, StateError, Status, Worker, Zone

__all__ = [
    "AddWorker",
    "ClusterState",
    "Gpu",
    "PDConfig",
    "Plan",
    "PlanError",
    "RemoveWorker",
    "Role",
    "SetRole",
    "StateError",
    "Status",
    "Worker",
    "Zone",
    "apply",
    "config_of",
    "plan_transition",
]
