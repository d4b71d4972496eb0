"""The simulator's driver: world events -> controller -> commands -> world (docs/architecture.md).

The loop is the same shape as the runtime's driver:

1. pop the next entry off the world's heap (this advances the virtual clock);
2. run it: it is a world action (physics, env steps, trainer, trace playback) that may
   *emit* controller events into the world's outbox;
3. hand every emitted event, in order, to the `Dispatcher` (`pearl.world.dispatch`, the
   step the runtime's driver repeats too): `controller.handle(event)`, then each returned
   command executed on the world; a command's completion is emitted later (a scheduled
   entry) or, for synchronous commands, into the same outbox after the current batch.

The driver records what the controller did (commands by kind, state snapshots for the role
timeline) and stops at `until_s` or when the heap runs dry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pearl.world.contract import ControllerLike, World
from pearl.world.dispatch import Dispatcher, DispatchLog


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
        self.dispatcher = Dispatcher(
            world,
            controller,
            lambda: world.core.now_s,
            keep_history=keep_history,
            keep_commands=keep_commands,
        )
        self.log = self.dispatcher.log

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
        self._dispatch()
        next_progress = 60.0
        pop_due = getattr(core, "pop_due", None) if stop is None else None
        while True:
            if pop_due is not None:
                handle = pop_due(until_s)  # the same as below, in one heap look
                if handle is None:
                    break
            else:
                t = core.peek_time_s()
                if t is None or t > until_s or (stop is not None and stop()):
                    break
                handle = core.pop()
            handle.payload()
            self._dispatch()
            if progress is not None and core.now_s >= next_progress:
                progress(core.now_s)
                next_progress = core.now_s + 60.0
        core.now_s = max(core.now_s, until_s) if core.peek_time_s() is not None else core.now_s
        if progress is not None:
            progress(until_s)
        return self.log

    def _dispatch(self) -> None:
        """Feed every pending world event to the controller, executing its commands."""
        take, handle = self.world.take_outbox, self.dispatcher.handle
        while True:
            events = take()
            if not events:
                return
            for event in events:
                handle(event)
