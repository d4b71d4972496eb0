"""The simulator's driver: world events -> controller -> commands -> world (docs/architecture.md).

The loop is the same shape as the runtime's driver:

1. pop the next entry off the world's heap (this advances the virtual clock);
2. run it: it is a world action (physics, env steps, trainer, trace playback) that may
   *emit* controller events into the world's outbox;
3. hand every emitted event, in order, to `controller.handle(event)` and execute each
   returned command on the world; a command's completion is emitted later (a scheduled
   entry) or, for synchronous commands, into the same outbox after the current batch.

The driver records what the controller did (commands by kind, state snapshots for the role
timeline) and stops at `until_s` or when the heap runs dry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pearl.control.state import ClusterState
from pearl.world.contract import ControllerLike, World


class WorldLike(World, Protocol):
    """What this driver needs of a world beyond the contract (`pearl.world.contract`): its
    event core (the virtual clock), a start, and the events emitted since the last look."""

    @property
    def core(self) -> Any: ...

    def start(self) -> None: ...

    def take_outbox(self) -> list[Any]: ...


@dataclass
class DriverLog:
    """What happened, for summaries and plots."""

    num_events: int = 0
    num_commands: int = 0
    events_by_kind: Counter[str] = field(default_factory=Counter)
    commands_by_kind: Counter[str] = field(default_factory=Counter)
    history: list[tuple[float, ClusterState]] = field(default_factory=list)
    command_log: list[tuple[float, Any]] = field(default_factory=list)


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
        self.keep_history = keep_history
        self.keep_commands = keep_commands
        self.log = DriverLog()

    def run(
        self,
        until_s: float,
        progress: Callable[[float], None] | None = None,
        *,
        stop: Callable[[], bool] | None = None,
    ) -> DriverLog:
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
        world, ctl, log = self.world, self.controller, self.log
        events_by_kind, commands_by_kind = log.events_by_kind, log.commands_by_kind
        keep_commands, keep_history = self.keep_commands, self.keep_history
        while True:
            events = world.take_outbox()
            if not events:
                return
            for event in events:
                log.num_events += 1
                events_by_kind[type(event).__name__] += 1
                before = ctl.state
                commands = ctl.handle(event)
                if commands:
                    log.num_commands += len(commands)
                    for cmd in commands:
                        name = type(cmd).__name__
                        commands_by_kind[name] += 1
                        if keep_commands and name != "Route":
                            log.command_log.append((world.core.now_s, cmd))
                        world.execute(cmd)
                if keep_history:
                    after = ctl.state
                    if after is not before and after != before:
                        log.history.append((world.core.now_s, after))
