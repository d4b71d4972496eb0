"""The trajectory book: every trajectory of the current and next rollout batches (paper §4.1.1,
the pure part of the Pipeline Scheduler).

A trajectory is exactly once in the book and in exactly one `TrajState` at any time:

    ENV --ready--> WAITING --route--> PREFILL [--> KV_TRANSFER] --> DECODE --turn done--> ENV
                      ^                  |  (in flight: on its prefill/decode worker)      |
                      |                  +--interrupt--> INTERRUPTED --route(full)--> PREFILL
                      +---------------------------------------------------------- done --> DONE

Each routed turn is a *segment* generated with one weight version; the staleness of a
segment is `step - version` (batch `step` is trained from weights `step`, so data generated
with version `v` is `step - v` versions old). The router only routes a trajectory to a
worker whose version keeps that within `max_staleness`, so the bound holds by construction.

An interrupted trajectory keeps its generated prefix and environment progress; it is queued
once (a duplicate or late interrupt changes nothing) and its next route is a full prefill.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum


class TrajState(StrEnum):
    ENV = "env"
    WAITING = "waiting"
    PREFILL = "prefill"
    KV_TRANSFER = "kv_transfer"
    DECODE = "decode"
    INTERRUPTED = "interrupted"
    DONE = "done"


IN_FLIGHT = frozenset({TrajState.PREFILL, TrajState.KV_TRANSFER, TrajState.DECODE})
QUEUED = frozenset({TrajState.WAITING, TrajState.INTERRUPTED})


@dataclass(slots=True)
class Trajectory:
    """One trajectory's bookkeeping (mutable, owned by the book; read it, do not change it)."""

    traj_id: str
    step: int
    group: int
    state: TrajState = TrajState.ENV
    prefill_worker: str | None = None
    decode_worker: str | None = None
    prefix_worker: str | None = None  # the worker that holds its prefix KV, if any
    segment_versions: list[int] = field(default_factory=list)
    num_turns: int = 0
    num_interrupts: int = 0
    generated_tokens: int = 0  # preserved tokens of an interrupted turn
    queue_seq: int = 0  # FIFO order among queued trajectories
    routed_s: float = float("-inf")  # when its current (or last) request was routed
    env_since_s: float = float("-inf")  # when it last entered its environment
    workers: tuple[str, ...] = ()  # the workers it is on while in flight (prefill first)
    interrupted_on: tuple[str, ...] = ()  # the workers of its last interrupted request
    home: str | None = None  # the prefill worker it lives on (its last route), until it ends
    min_version: int | None = None  # the oldest weights that generated a segment

    def staleness(self) -> int:
        """Versions between the oldest weights that generated it and the weights it trains."""
        return 0 if self.min_version is None else self.step - self.min_version


class BookError(ValueError):
    """An impossible book operation (a programming error, not a bad event)."""


class TrajectoryBook:
    """The trajectories of the batches in flight, with their states.

    Methods that apply an event return False (and change nothing) when the event makes no
    sense for the trajectory's state; the controller logs and ignores it.
    """

    def __init__(self, max_staleness: int = 1) -> None:
        if max_staleness < 0:
            raise BookError("max_staleness must be >= 0")
        self.max_staleness = max_staleness
        self._trajs: dict[str, Trajectory] = {}
        self._steps: dict[int, list[str]] = {}
        self._loads: dict[str, int] = {}
        self._homes: dict[str, int] = {}  # live trajectories per home worker
        self._queued: set[str] = set()  # ids in QUEUED states
        self._seq = 0

    # -- queries ---------------------------------------------------------------------------
    def __contains__(self, traj_id: object) -> bool:
        return traj_id in self._trajs

    def __iter__(self) -> Iterator[Trajectory]:
        return iter(self._trajs.values())

    def __len__(self) -> int:
        return len(self._trajs)

    def get(self, traj_id: str) -> Trajectory | None:
        return self._trajs.get(traj_id)

    @property
    def steps(self) -> tuple[int, ...]:
        """Batches in the book (started and not yet retired), oldest first."""
        return tuple(sorted(self._steps))

    def step_trajs(self, step: int) -> tuple[Trajectory, ...]:
        return tuple(self._trajs[t] for t in self._steps.get(step, ()))

    def step_done(self, step: int) -> bool:
        ids = self._steps.get(step)
        return ids is not None and all(self._trajs[t].state == TrajState.DONE for t in ids)

    def queued(self) -> list[Trajectory]:
        """Trajectories waiting for a route: interrupted first, then older batches, then FIFO."""
        q = [self._trajs[tid] for tid in self._queued]
        q.sort(key=lambda t: (t.state != TrajState.INTERRUPTED, t.step, t.queue_seq))
        return q

    def has_queued(self) -> bool:
        """Is any trajectory waiting for a route? (O(1); `queued()` sorts them.)"""
        return bool(self._queued)

    def num_on_worker(self, worker_id: str) -> int:
        """Requests in flight on `worker_id` (O(1))."""
        return self._loads.get(worker_id, 0)

    def on_worker(self, worker_id: str) -> list[Trajectory]:
        """Trajectories in flight on `worker_id` (as prefill or decode worker)."""
        return [t for t in self._trajs.values() if worker_id in t.workers]

    def homes(self) -> dict[str, int]:
        """Live trajectories per home worker (the prefill worker of their last route; a
        trajectory leaves its home when it is done, interrupted or its worker goes). The
        book's own dict, kept current as routes are marked: read it, do not change it."""
        return self._homes

    def _set_home(self, t: Trajectory, worker_id: str | None) -> None:
        if t.home == worker_id:
            return
        if t.home is not None:
            n = self._homes[t.home] - 1
            if n:
                self._homes[t.home] = n
            else:
                del self._homes[t.home]
        t.home = worker_id
        if worker_id is not None:
            self._homes[worker_id] = self._homes.get(worker_id, 0) + 1

    def loads(self) -> dict[str, int]:
        """In-flight requests per worker (a split request counts on both of its workers)."""
        return dict(self._loads)

    def counts(self) -> dict[TrajState, int]:
        out = {s: 0 for s in TrajState}
        for t in self._trajs.values():
            out[t.state] += 1
        return out

    # -- batches ----------------------------------------------------------------------------
    def start_batch(
        self, step: int, num_groups: int, group_size: int, time_s: float = float("-inf")
    ) -> tuple[str, ...]:
        """Add batch `step` (GRPO groups of `group_size`); its trajectories start in ENV."""
        if step in self._steps:
            raise BookError(f"batch {step} already started")
        ids: list[str] = []
        for g in range(num_groups):
            for i in range(group_size):
                tid = f"s{step}-g{g}-{i}"
                self._trajs[tid] = Trajectory(tid, step, g, env_since_s=time_s)
                ids.append(tid)
        self._steps[step] = ids
        return tuple(ids)

    def num_unfinished(self) -> int:
        """Batches in the book with a trajectory not yet done."""
        return sum(1 for step in self._steps if not self.step_done(step))

    def retire_batch(self, step: int) -> bool:
        """Remove a finished batch (handed to training). False if unknown or unfinished."""
        if not self.step_done(step):
            return False
        for tid in self._steps.pop(step):
            del self._trajs[tid]
        return True

    # -- transitions ------------------------------------------------------------------------
    def mark_ready(self, traj_id: str, time_s: float = float("inf")) -> bool:
        """ENV -> WAITING: it needs the model for its next turn. An event older than its
        entry into the environment (`time_s < env_since_s`) is a stale duplicate."""
        t = self._trajs.get(traj_id)
        if t is None or t.state != TrajState.ENV or time_s < t.env_since_s:
            return False
        t.state = TrajState.WAITING
        self._queued.add(traj_id)
        t.queue_seq = self._next_seq()
        return True

    def can_use_version(self, traj: Trajectory, version: int) -> bool:
        return traj.step - version <= self.max_staleness

    def version_admissible(self, version: int, latest_version: int) -> bool:
        """The admission rule (the one place it lives): a worker holding weights `version`
        may serve once `version >= latest_version - max_staleness`. Every batch still in
        flight is for a step >= latest_version, so such a worker can serve at least the
        oldest of them; the router keeps each trajectory within its own bound
        (`can_use_version`). Requiring exactly the latest version instead livelocks a new
        worker whenever training publishes faster than it can sync."""
        return version >= latest_version - self.max_staleness

    def mark_routed(
        self,
        traj_id: str,
        prefill_worker: str,
        decode_worker: str | None,
        version: int,
        time_s: float = float("-inf"),
    ) -> None:
        """WAITING/INTERRUPTED -> PREFILL on `prefill_worker` (decode on `decode_worker`, or on
        the prefill worker when None), generated with weights `version`."""
        t = self._trajs[traj_id]
        if t.state not in QUEUED:
            raise BookError(f"{traj_id} is {t.state}, not queued")
        if not self.can_use_version(t, version):
            raise BookError(f"{traj_id} of step {t.step} cannot use weights v{version}")
        t.state = TrajState.PREFILL
        self._queued.discard(traj_id)
        t.routed_s = time_s
        t.prefill_worker = prefill_worker
        t.decode_worker = decode_worker if decode_worker is not None else prefill_worker
        t.workers = tuple(dict.fromkeys((prefill_worker, t.decode_worker)))
        self._set_home(t, prefill_worker)
        for w in t.workers:
            self._loads[w] = self._loads.get(w, 0) + 1
        t.segment_versions.append(version)
        t.min_version = version if t.min_version is None else min(t.min_version, version)

    def mark_phase(self, traj_id: str, state: TrajState, time_s: float = float("inf")) -> bool:
        """Optional progress inside a turn: PREFILL -> KV_TRANSFER -> DECODE (forward only;
        an event older than the current route is about an earlier request)."""
        t = self._trajs.get(traj_id)
        order = (TrajState.PREFILL, TrajState.KV_TRANSFER, TrajState.DECODE)
        if t is None or t.state not in order or state not in order or time_s < t.routed_s:
            return False
        if order.index(state) <= order.index(t.state):
            return False
        t.state = state
        return True

    def mark_turn_finished(
        self, traj_id: str, worker_id: str, time_s: float = float("inf")
    ) -> bool:
        """In flight -> ENV, from its decode worker (or its prefill worker when colocated).

        An event older than the current request's route (`time_s < routed_s`) is about an
        earlier request of the trajectory and is rejected."""
        t = self._trajs.get(traj_id)
        if t is None or t.state not in IN_FLIGHT or worker_id not in t.workers:
            return False
        if time_s < t.routed_s:
            return False
        t.state = TrajState.ENV
        t.env_since_s = time_s if time_s != float("inf") else t.routed_s
        t.num_turns += 1
        t.generated_tokens = 0
        # The prefill worker keeps the prefix in its cache; the next turn sticks to it.
        t.prefix_worker = t.prefill_worker
        self._leave(t)
        return True

    def mark_interrupted(
        self,
        traj_id: str,
        worker_id: str,
        generated_tokens: int = 0,
        time_s: float = float("inf"),
    ) -> bool:
        """In flight on `worker_id` -> INTERRUPTED (queued once; resumes with a full prefill).

        A late duplicate for a trajectory already interrupted only updates the count of
        preserved tokens; one older than the current request's route (`time_s < routed_s`,
        about an earlier request, even on the same worker) and anything else is rejected.
        """
        t = self._trajs.get(traj_id)
        if t is None:
            return False
        if t.state == TrajState.INTERRUPTED:
            if generated_tokens > t.generated_tokens:
                t.generated_tokens = generated_tokens
            return False
        if t.state not in IN_FLIGHT or worker_id not in t.workers or time_s < t.routed_s:
            return False
        t.state = TrajState.INTERRUPTED
        t.interrupted_on = t.workers
        self._queued.add(traj_id)
        t.num_interrupts += 1
        t.generated_tokens = max(0, generated_tokens)
        t.prefix_worker = None  # its KV is gone with the request
        self._set_home(t, None)
        self._leave(t)
        t.queue_seq = self._next_seq()
        return True

    def interruption_counted(self, traj_id: str, worker_id: str) -> bool:
        """Whether the book has counted the interruption of `traj_id`'s request on
        `worker_id` already: its last interrupted request ran there. The world's report of
        it then confirms what the book holds (an `Interrupt` command's promised completion,
        after `interrupt_workers` counted it at once); `mark_interrupted` has nothing to
        apply but the preserved tokens."""
        t = self._trajs.get(traj_id)
        return t is not None and worker_id in t.interrupted_on

    def interrupt_workers(self, worker_ids: Iterable[str]) -> list[str]:
        """Interrupt everything in flight on `worker_ids`; returns the trajectory ids."""
        gone = frozenset(worker_ids)
        hit = [t for t in self._trajs.values() if gone.intersection(t.workers)]
        for t in hit:
            self.mark_interrupted(t.traj_id, next(w for w in t.workers if w in gone))
        return [t.traj_id for t in hit]

    def forget_worker(self, worker_id: str) -> None:
        """A worker is gone: no trajectory may stick to it any more."""
        for t in self._trajs.values():
            if t.prefix_worker == worker_id:
                t.prefix_worker = None
            if t.home == worker_id:
                self._set_home(t, None)

    def mark_done(self, traj_id: str, time_s: float = float("inf")) -> bool:
        """ENV/WAITING -> DONE (its last env step ended; no turn may be in flight). An event
        older than its entry into the environment is a stale duplicate."""
        t = self._trajs.get(traj_id)
        if t is None or t.state not in (TrajState.ENV, TrajState.WAITING):
            return False
        if time_s < t.env_since_s:
            return False
        t.state = TrajState.DONE
        self._queued.discard(traj_id)
        t.prefix_worker = None
        self._set_home(t, None)
        return True

    def _leave(self, t: Trajectory) -> None:
        """The trajectory's request leaves its workers."""
        for w in t.workers:
            n = self._loads[w] - 1
            if n:
                self._loads[w] = n
            else:
                del self._loads[w]
        t.workers = ()
        t.prefill_worker = t.decode_worker = None

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- invariants ------------------------------------------------------------------------
    def check(self, traj_ids: Iterable[str] | None = None) -> None:
        """Every trajectory once, in one state, within the staleness bound, and the
        per-worker loads in step. With `traj_ids`: only those trajectories (cheap)."""
        if traj_ids is not None:
            for tid in traj_ids:
                t = self._trajs.get(tid)
                if t is not None:
                    self._check_one(t)
            return
        seen: set[str] = set()
        for step, ids in self._steps.items():
            for tid in ids:
                if tid in seen or tid not in self._trajs or self._trajs[tid].step != step:
                    raise BookError(f"trajectory {tid} is lost or duplicated")
                seen.add(tid)
        if len(seen) != len(self._trajs):
            raise BookError("book and batches disagree")
        loads: dict[str, int] = {}
        bound = self.max_staleness
        for t in self._trajs.values():
            if t.min_version is not None and t.step - t.min_version > bound:
                raise BookError(f"{t.traj_id} staleness {t.staleness()} > {bound}")
            if (t.state in IN_FLIGHT) != bool(t.workers):
                raise BookError(f"{t.traj_id} is {t.state} with workers {t.workers}")
            for w in t.workers:
                loads[w] = loads.get(w, 0) + 1
        if loads != self._loads:
            raise BookError("per-worker loads out of step with the trajectories")
        if self._queued != {t.traj_id for t in self._trajs.values() if t.state in QUEUED}:
            raise BookError("queue out of step with the trajectories")

    def _check_one(self, t: Trajectory) -> None:
        if t.staleness() > self.max_staleness:
            raise BookError(f"{t.traj_id} staleness {t.staleness()} > {self.max_staleness}")
        if (t.state in IN_FLIGHT) != bool(t.workers):
            raise BookError(f"{t.traj_id} is {t.state} with workers {t.workers}")
        if t.traj_id not in self._steps.get(t.step, ()):
            raise BookError(f"trajectory {t.traj_id} is not in its batch")
