"""The controller's context: the data every part of the controller reads and changes.

The controller is composed of parts (`ElasticScheduler`: plans, groups and the worker lifecycle;
`Rebuilder`: preemptible GPUs; `Lender`: borrowed training GPUs; the controller itself:
batches, routing and re-decisions). They share exactly one object, this context: the
cluster state (replaced, never mutated: states are immutable), the GPUs offered but not
held, the trajectory book, the policy and its advisor, the clock, the latest weight
version, and the commands emitted by the current `handle` call. Nothing else passes between the parts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from pearl.control import commands as cmd
from pearl.control.book import TrajectoryBook
from pearl.control.notes import ControlNote
from pearl.control.policies.advice import Advisor
from pearl.control.policies.base import Policy
from pearl.control.state import ClusterState, Gpu, Status, Worker, Zone

log = logging.getLogger("pearl.control")
_T = TypeVar("_T")


class ControlContext:
    """Shared controller data, plus the helpers every part uses: `emit` a command, record
    an ignored event or a decision, and views of the state memoised per state object."""

    def __init__(
        self,
        *,
        policy: Policy,
        advisor: Advisor,
        state: ClusterState,
        gpus_per_worker: int,
        latest_version: int,
    ) -> None:
        self.policy = policy
        self.advisor = advisor
        self.book = TrajectoryBook(policy.max_staleness)
        self.state = state
        self.gpus_per_worker = gpus_per_worker
        self.latest_version = latest_version
        self.now_s = 0.0
        self.out: list[cmd.Command] = []
        self.notes: list[ControlNote] = []  # decisions and ignored events, in order
        # the world's reports of interruptions the book had counted already (not ignored:
        # an Interrupt command's promised completion)
        self.confirmed_interrupts = 0
        # GPU -> when its RestoreTraining was emitted (its TrainingRestored measures the
        # return's cost).
        self.restoring_since: dict[str, float] = {}
        # Preemptible GPUs offered and not (yet) held: the rebuilder takes them when its
        # gate admits them; a cancelled group's preemptible GPUs come back here.
        self.offered: dict[str, Gpu] = {}
        self._memo_state: ClusterState | None = None
        self._memo: dict[str, object] = {}

    # -- output ----------------------------------------------------------------------------
    def emit(self, *commands: cmd.Command) -> None:
        self.out.extend(commands)
        for c in commands:
            if isinstance(c, cmd.RestoreTraining):
                for g in c.gpu_ids:
                    self.restoring_since[g] = self.now_s

    def ignore(self, why: str) -> None:
        self.notes.append(ControlNote(self.now_s, "ignored", why))
        log.info("ignored: %s", why)

    def decide(self, what: str) -> None:
        self.notes.append(ControlNote(self.now_s, "decision", what))
        log.info("decision: %s", what)

    @property
    def decisions(self) -> list[str]:
        """Every decision taken, one line each ("t=12.345: what")."""
        return [str(n) for n in self.notes if n.kind == "decision"]

    @property
    def ignored(self) -> list[str]:
        """Every event ignored, one line each ("t=12.345: why")."""
        return [str(n) for n in self.notes if n.kind == "ignored"]

    # -- views of the state ------------------------------------------------------------------
    def of_state(self, key: str, compute: Callable[[], _T]) -> _T:
        """`compute()` for the current state, memoised until `state` is replaced. `compute`
        must be a pure function of `state` (states are immutable; identity is the key)."""
        if self._memo_state is not self.state:
            self._memo_state = self.state
            self._memo = {}
        try:
            return self._memo[key]  # type: ignore[return-value]
        except KeyError:
            value = compute()
            self._memo[key] = value
            return value

    def borrowed_gpus(self) -> tuple[str, ...]:
        """Held training GPUs (zone overlap)."""
        return self.of_state("borrowed_gpus", lambda: self.state.gpus_in(Zone.OVERLAP))

    def borrowed_workers(self) -> tuple[Worker, ...]:
        def compute() -> tuple[Worker, ...]:
            ov = set(self.borrowed_gpus())
            return tuple(w for w in self.state.workers if ov.intersection(w.gpu_ids))

        return self.of_state("borrowed_workers", compute)

    def borrowed_worker_ids(self) -> frozenset[str]:
        return self.of_state(
            "borrowed_worker_ids", lambda: frozenset(w.worker_id for w in self.borrowed_workers())
        )

    def has_serving_workers(self) -> bool:
        return self.of_state(
            "has_serving", lambda: bool(self.state.workers_with(statuses=(Status.ACTIVE,)))
        )

    @staticmethod
    def stale(seen: dict[str, float], gpu_id: str, time_s: float, *, strict: bool) -> bool:
        """Is an event at `time_s` about `gpu_id` older than the last opposite event?"""
        last = seen.get(gpu_id, float("-inf"))
        return time_s < last if strict else time_s <= last
