"""The simulator's driver: world events -> controller -> commands -> world (docs/architecture.md).

It runs the one driver loop of both worlds (`pearl.world.loop.drive`) on a `VirtualClock`:

1. pop the next entry off the world's heap (this advances the virtual clock);
2. run it: it is a world action (physics, env steps, trainer, trace playback) that may
   *emit* controller events into the world's outbox;
3. hand every emitted event, in order, to the `Dispatcher` (`pearl.world.dispatch`, the
   step the runtime's driver repeats too): `controller.handle(event)`, then each returned
   command executed on the world; a command's completion is emitted later (a scheduled
   entry) or, for synchronous commands, into the same outbox, handed over before the next
   entry is popped.

The driver records what the controller did (commands by kind, state snapshots for the role
timeline) and stops at `until_s` or when the heap runs dry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pearl.control.commands import StartRolloutBatch
from pearl.world.contract import ControllerLike, World
from pearl.world.dispatch import Dispatcher, DispatchLog
from pearl.world.loop import drive, run_to_completion


class WorldLike(World, Protocol):
    """What this driver needs of a world beyond the contract (`pearl.world.contract`): its
    event core (the virtual clock), a start, and the events emitted since the last look."""

    @property
    def core(self) -> Any: ...

    def start(self) -> None: ...

    def take_outbox(self) -> list[Any]: ...


class Driver:
    """Runs one world with one controller. `keep_commands` keeps every non-Route command
    with its time (for decision logs and tests)."""

    def __init__(
        self,
        world: WorldLike,
        controller: ControllerLike,
        *,
        keep_history: bool = True,
        keep_commands: bool = True,
    ) -> None:
        self.world = world
        self.controller = controller
        # step -> the decision engine's makespan for it when it started (None: no engine)
        self.predicted_makespans_s: dict[int, float | None] = {}
        self.dispatcher = Dispatcher(
            world,
            controller,
            lambda: world.core.now_s,
            keep_history=keep_history,
            keep_commands=keep_commands,
            before_execute=self._before_execute,
        )
        self.log = self.dispatcher.log

    def _before_execute(self, c: Any) -> None:
        """What the engine predicts for a batch as it starts, as `pearl run` records it."""
        if isinstance(c, StartRolloutBatch):
            predict = getattr(self.controller, "predicted_batch_makespan_s", None)
            self.predicted_makespans_s[c.step] = predict() if predict is not None else None

    def run(
        self,
        until_s: float,
        progress: Callable[[float], None] | None = None,
        *,
        stop: Callable[[], bool] | None = None,
    ) -> DispatchLog:
        """Simulate [now, until_s]; `progress(now_s)` is called about every simulated minute;
        `stop()` (checked after each entry) ends the run early when it returns True."""
        core = self.world.core
        self.world.start()
        clock = VirtualClock(self.world, until_s, progress=progress, stop=stop)
        run_to_completion(drive(clock, self.dispatcher.handle))
        core.now_s = max(core.now_s, until_s) if core.peek_time_s() is not None else core.now_s
        if progress is not None:
            progress(until_s)
        return self.log


class VirtualClock:
    """The simulator's `pearl.world.loop.Clock`: the events already emitted (the world's
    outbox) first, else the next heap entry run, up to `until_s` or until `stop()`."""

    def __init__(
        self,
        world: WorldLike,
        until_s: float,
        *,
        progress: Callable[[float], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self.world = world
        self.core = world.core
        self.until_s = until_s
        self.progress = progress
        self.stop = stop
        self._next_progress = 60.0

    async def advance(self) -> list[Any] | None:
        events = self.world.take_outbox()
        if events:
            return events
        core = self.core
        if self.stop is None:
            handle = core.pop_due(self.until_s)  # peek and pop in one heap look
            if handle is None:
                return None
        else:
            t = core.peek_time_s()
            if t is None or t > self.until_s or self.stop():
                return None
            handle = core.pop()
        handle.payload()
        if self.progress is not None and core.now_s >= self._next_progress:
            self.progress(core.now_s)
            self._next_progress = core.now_s + 60.0
        return self.world.take_outbox()
