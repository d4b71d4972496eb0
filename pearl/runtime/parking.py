"""Parked rollout workers on training device slots (paper §4.6, §5).

The paper borrows idle training GPUs by time-sharing: overlap workers are Ray actors kept
alive across handoffs, and only their device state moves. `ParkingLot` keeps those actors
for `RayWorld`, keyed by the tuple of device slots they are bound to:

* `park(worker_id, handle, slots)`: a borrowed worker that must go back to training is
  parked (`RolloutWorker.park`: in-flight turns come back interrupted with their prefix,
  weights and KV leave the device) instead of killed; the process stays.
* `prestart(slots)`: at run start a worker is started on the slots with its engine
  released (weights on the CPU, nothing on the device the trainer holds), parked and then
  warmed up while parked (the one-time cost of a process's first weight sync), so that
  even the first borrow is an activation, not a process start.
* `take(slots)`: the next borrow of exactly those slots gets the parked actor (after any
  park or pre-start of overlapping slots has finished); actors parked on a different
  grouping of those slots are killed so that a fresh worker can bind them.
* `waiting(slots)`: parks and pre-starts still running on the slots; the driver lets the
  trainer restore its device state only after they have released theirs.

Parks and activations are counted (`counters["parks"]`, `counters["activations"]` belong
to the world) and recorded through `on_record`. A park that fails or outlasts
`PARK_TIMEOUT_S` kills the actor (the slots are never lost, nor kept past the return
grace); worker step records drained at park are kept for the next telemetry drain, and a
parked actor is never asked for telemetry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

#: a park (after any activation in flight) taking longer kills the actor: the slots go back
#: to training within the return grace (`trainer.return_grace_s`, 10 s by default)
PARK_TIMEOUT_S = 8.0
PRESTART_TIMEOUT_S = 120.0

Slots = tuple[str, ...]


class ParkingLot:
    """Parked worker actors by device slots. See the module docstring.

    `start(worker_id, role, slots)` creates a worker actor (`start_worker`); `spawn(coro)`
    runs a coroutine as a task of the world and returns it; `kill(handle)` ends an actor.
    With `enabled=False` nothing is ever parked (`owns` is False): the start/stop runtime.
    """

    def __init__(
        self,
        training_slots: tuple[str, ...],
        *,
        enabled: bool,
        start: Callable[..., Any],  # (worker_id, role, slots, *, released=False) -> handle
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task],
        kill: Callable[[Any], None],
        on_record: Callable[[str, Any], None],
        counters: dict[str, int],
    ) -> None:
        self.training_slots = frozenset(training_slots)
        self.enabled = enabled
        self._start = start
        self._spawn = spawn
        self._kill = kill
        self.on_record = on_record
        self.counters = counters
        self.parked: dict[Slots, Any] = {}
        self.pending: dict[Slots, asyncio.Future] = {}  # device held: parks, pre-starts
        self.warming: dict[Slots, asyncio.Task] = {}  # pre-starts until warmed up
        self._in_flight: dict[Slots, Any] = {}  # handles being parked or pre-started
        self._steps: list[Any] = []

    def owns(self, slots: Slots) -> bool:
        """Workers on these slots are parked rather than killed (all are training slots)."""
        return self.enabled and bool(slots) and self.training_slots.issuperset(slots)

    # -- parking ------------------------------------------------------------------------------
    def park(
        self, worker_id: str, handle: Any, slots: Slots, *, reason: str, after: Any = None
    ) -> asyncio.Task:
        """Park `handle` (it was worker `worker_id`) in the background; returns the task.

        `after`: a call on the actor (ObjectRef) that must finish first, e.g. an activation
        still in flight (Ray does not order the calls of an async actor)."""
        slots = tuple(slots)
        self._in_flight[slots] = handle
        task = self._spawn(self._park(worker_id, handle, slots, reason, after))
        self._pending(slots, task)
        return task

    async def _park(
        self, worker_id: str, handle: Any, slots: Slots, reason: str, after: Any = None
    ) -> bool:
        try:
            async with asyncio.timeout(PARK_TIMEOUT_S):  # the return to training waits
                if after is not None:
                    await settled(after, PARK_TIMEOUT_S)
                park_ms = await _aget(handle.park.remote())
        except Exception as err:  # noqa: BLE001 - a worker that cannot park is stopped
            self._in_flight.pop(slots, None)
            self._kill(handle)
            log.info("park of %s failed (%s): killed", worker_id, err)
            self.on_record("error", f"park of {worker_id} failed: {type(err).__name__}: {err}")
            return False
        self._in_flight.pop(slots, None)
        old = self.parked.pop(slots, None)
        if old is not None and old is not handle:
            self._kill(old)
        self.parked[slots] = handle
        self.counters["parks"] = self.counters.get("parks", 0) + 1
        self.on_record(
            "park",
            {
                "reason": reason,
                "worker": worker_id,
                "gpus": list(slots),
                "park_ms": round(float(park_ms), 2),
            },
        )
        try:  # step records of the old worker id: kept for the next telemetry drain
            _, steps = await asyncio.wait_for(_aget(handle.telemetry.remote()), 5.0)
            self._steps.extend(steps)
        except Exception:  # noqa: BLE001 - lost records are not worth a worker
            pass
        return True

    def prestart(self, slots: Slots) -> asyncio.Task:
        """Start a worker on `slots` in the background, park it as soon as it is ready, then
        warm it up parked. `waiting` covers the start and park (the device is held), `take`
        also the warm-up."""
        slots = tuple(slots)
        held: asyncio.Future = asyncio.get_running_loop().create_future()
        task = self._spawn(self._prestart(slots, held))
        self._pending(slots, held)
        self.warming[slots] = task
        task.add_done_callback(lambda t: self.warming.pop(slots, None))

        def release_held(_: asyncio.Task) -> None:  # a pre-start that never parked
            if not held.done():
                held.set_result(False)

        task.add_done_callback(release_held)
        return task

    def _is_parked(self, slots: Slots, handle: Any) -> bool:
        return self.parked.get(slots) is handle

    async def _prestart(self, slots: Slots, held: asyncio.Future) -> bool:
        worker_id = "parked-" + "-".join(slots)
        try:
            handle = self._start(worker_id, "colocated", slots, released=True)
            self._in_flight[slots] = handle
            await asyncio.wait_for(_aget(handle.ready.remote()), PRESTART_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - a borrow then starts a fresh worker
            h = self._in_flight.pop(slots, None)
            if h is not None:
                self._kill(h)
            self.on_record("error", f"pre-start on {list(slots)} failed: {err}"[:300])
            return False
        parked = await self._park(worker_id, handle, slots, "pre-started overlap worker")
        held.set_result(parked)  # the device is free (or the actor killed)
        if not parked or not self._is_parked(slots, handle):
            return parked
        try:  # the first weight sync's one-time cost, paid now rather than at a borrow
            warm_ms = await asyncio.wait_for(_aget(handle.warm_up.remote()), PRESTART_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - only the first activation is slower
            log.info("warm-up on %s failed: %s", slots, err)
            return True
        self.on_record(
            "warm_up",
            {
                "reason": f"parked worker on {list(slots)} warmed up (first weight install)",
                "gpus": list(slots),
                "warm_up_ms": round(float(warm_ms), 2),
            },
        )
        return True

    def _pending(self, slots: Slots, task: asyncio.Future) -> None:
        self.pending[slots] = task

        def done(t: asyncio.Future) -> None:
            if self.pending.get(slots) is t:
                del self.pending[slots]

        task.add_done_callback(done)

    def waiting(self, slots: Slots) -> list[asyncio.Future]:
        """Parks and pre-starts (until parked) still holding device state on any of `slots`."""
        want = set(slots)
        return [t for s, t in self.pending.items() if want.intersection(s) and not t.done()]

    # -- activation ----------------------------------------------------------------------------
    async def take(self, slots: Slots) -> Any | None:
        """The actor parked on exactly `slots` (removed from the lot), or None. Waits for
        parks and pre-starts on those slots first; kills actors parked on overlapping but
        different slot tuples (their slots must be free for a fresh start)."""
        slots = tuple(slots)
        while waiting := [
            *self.waiting(slots),
            *(t for s, t in self.warming.items() if set(s).intersection(slots)),
        ]:
            await asyncio.wait(waiting)
        handle = self.parked.pop(slots, None)
        for other in [s for s in self.parked if set(s).intersection(slots)]:
            self._kill(self.parked.pop(other))
        return handle

    def put_back(self, slots: Slots, handle: Any) -> None:
        """Return a taken actor that was never activated (still parked) to the lot."""
        old = self.parked.pop(tuple(slots), None)
        if old is not None and old is not handle:
            self._kill(old)
        self.parked[tuple(slots)] = handle

    def record_activation(
        self,
        worker_id: str,
        slots: Slots,
        role: str,
        ms: float,
        waits: dict[str, float] | None = None,
    ) -> None:
        """Count and record an activation (`waits`: what it waited for first, in ms)."""
        self.counters["activations"] = self.counters.get("activations", 0) + 1
        self.on_record(
            "activation",
            {
                "reason": f"parked worker on {list(slots)} activated as {worker_id} ({role})",
                "worker": worker_id,
                "gpus": list(slots),
                "role": role,
                "activation_ms": round(float(ms), 2),
                **(waits or {}),
            },
        )

    # -- telemetry and the end ---------------------------------------------------------------------
    def take_steps(self) -> list[Any]:
        """Worker step records drained from workers when they were parked."""
        steps, self._steps = self._steps, []
        return steps

    def kill_all(self) -> None:
        for handle in [*self.parked.values(), *self._in_flight.values()]:
            self._kill(handle)
        self.parked.clear()
        self._in_flight.clear()


async def _aget(ref: Any) -> Any:
    return await ref


async def settled(ref: Any, timeout_s: float = PARK_TIMEOUT_S) -> None:
    """Wait for a call to finish, however it ends."""
    try:
        await asyncio.wait_for(_aget(ref), timeout_s)
    except Exception:  # noqa: BLE001 - only its end matters
        pass
