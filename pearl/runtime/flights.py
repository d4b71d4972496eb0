"""Turns in flight in the real world, kept consistent with the controller's book.

The controller counts a split turn on both of its workers: when it interrupts or stops a
worker, it marks every trajectory routed through that worker interrupted at once and may
route it again in the same breath (`TrajectoryBook.interrupt_workers`). The world must make
that true:

* `cancel_on(worker)` marks each turn routed through the worker cancelled and aborts it on
  its *other* worker too (a turn whose KV already moved to a decode worker keeps decoding
  there otherwise); a cancelled turn that still came back complete is kept as an
  interrupted turn's prefix (`RuntimeTrajectory.partial_complete`), so the next route
  finishes it without generating more;
* a route is `reserve`d when the command arrives, before its turn can begin (it may wait
  for the trajectory to settle, or for the event loop): an interrupt of its worker in the
  meantime cancels it, and the turn never starts (it is answered as interrupted with the
  prefix it had);
* one trajectory never has two turns, or a turn and an environment step, in flight: a route
  waits until the trajectory is `settle`d (its turn interrupted, its environment step
  answered, or its episode over);
* an event about a turn (its phases, its finish, its interruption) is `tag`ged with the
  turn's flight, and dropped when it is delivered if the controller has cancelled that
  flight meanwhile (`is_stale`; `cancel_on` also cancels a turn already back while any of
  its events is still queued): the controller has already counted the turn interrupted
  and may have routed the trajectory again, often through the same decode worker, and
  would take the old turn's events for the new route's. (They were taken so in the demo:
  every later turn of the trajectory then ran on the route before the one the controller
  had chosen, and its last route closed an episode already over.) In the simulator the
  question does not arise: an interrupted worker's requests are reported on that worker,
  which the new route does not use (the controller takes them as confirmations,
  `TrajectoryBook.interruption_counted`), and a request a new route supersedes is
  withdrawn without a word (`pearl.sim.rollout`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Flight:
    """One turn in flight: its route and whether the controller has interrupted it."""

    request_id: str
    prefill_worker: str
    decode_worker: str
    cancelled: bool = False

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.prefill_worker, self.decode_worker)))


class Flights:
    """Turns in flight and busy trajectories of one `RayWorld` (see the module docstring)."""

    def __init__(self, handle_of: Callable[[str], Any]) -> None:
        self._handle_of = handle_of
        self._flights: dict[str, Flight] = {}
        self._reserved: dict[str, list[Flight]] = {}  # routes accepted, turns not begun
        self._busy: dict[str, asyncio.Future] = {}
        self._tagged: dict[int, tuple[Any, Flight]] = {}  # id(event) -> (event, its flight)
        self.num_stale = 0  # events dropped at delivery (`is_stale`)

    def tag(self, event: Any, flight: Flight | None) -> Any:
        """Remember that `event` is about `flight`'s turn; returns the event."""
        if flight is not None:
            self._tagged[id(event)] = (event, flight)
        return event

    def is_stale(self, event: Any) -> bool:
        """At delivery: `event` is about a turn the controller cancelled after the world
        emitted it (or before), so the controller must not see it (module docstring)."""
        entry = self._tagged.pop(id(event), None)  # the entry holds the event: ids stay unique
        if entry is None or not entry[1].cancelled:
            return False
        self.num_stale += 1
        return True

    def current(self, traj_id: str) -> Flight | None:
        """The turn of `traj_id` in flight (begun, not landed), if any."""
        return self._flights.get(traj_id)

    def reserve(self, traj_id: str, prefill_worker: str, decode_worker: str) -> Flight:
        """A route has arrived; its turn begins later (`begin`) unless cancelled first."""
        flight = Flight("", prefill_worker, decode_worker)
        self._reserved.setdefault(traj_id, []).append(flight)
        return flight

    def unreserve(self, traj_id: str, flight: Flight) -> None:
        """The route's turn begins now or never: it is no longer only reserved."""
        pending = self._reserved.get(traj_id, [])
        if flight in pending:
            pending.remove(flight)
        if not pending:
            self._reserved.pop(traj_id, None)

    async def wait_idle(self, traj_id: str) -> None:
        """Return when the trajectory has no turn and no environment step in flight."""
        while (f := self._busy.get(traj_id)) is not None and not f.done():
            await asyncio.shield(f)

    def begin(self, traj_id: str, flight: Flight) -> None:
        self._flights[traj_id] = flight
        self.hold(traj_id)

    def hold(self, traj_id: str) -> None:
        """Busy without a turn in flight (an environment step only) until `settle`."""
        self._busy[traj_id] = asyncio.get_running_loop().create_future()

    def land(self, traj_id: str) -> Flight | None:
        """The turn came back (the trajectory stays busy until `settle`)."""
        return self._flights.pop(traj_id, None)

    def settle(self, traj_id: str) -> None:
        """Nothing of the trajectory is in flight any more: a waiting route may go."""
        f = self._busy.pop(traj_id, None)
        if f is not None and not f.done():
            f.set_result(None)

    def cancel_on(self, worker_id: str) -> list[str]:
        """Cancel every turn routed through `worker_id`; returns their trajectory ids. A turn
        that has come back is marked too while any of its events is undelivered: the
        controller, which has not seen them, counts it interrupted now."""
        hit = []
        for traj_id, pending in self._reserved.items():  # nothing runs on a worker yet
            for fl in pending:
                if not fl.cancelled and worker_id in fl.workers:
                    fl.cancelled = True
                    hit.append(traj_id)
        for traj_id, fl in self._flights.items():
            if fl.cancelled or worker_id not in fl.workers:
                continue
            fl.cancelled = True
            hit.append(traj_id)
            for other in fl.workers:
                h = self._handle_of(other) if other != worker_id else None
                if h is not None:
                    try:
                        h.interrupt.remote((fl.request_id,))
                    except Exception:  # noqa: BLE001 - a dead worker holds nothing
                        pass
        for _, fl in self._tagged.values():  # came back, its events still queued
            if worker_id in fl.workers:
                fl.cancelled = True
        return hit
