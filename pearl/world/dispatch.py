"""The step both worlds' drivers repeat: one event to the controller, each command it
returns to the world, in order (docs/architecture.md, "the seam").

Both drivers run one loop (`pearl.world.loop`) and differ only in its clock, where the
next event comes from: the simulator pops its heap (a virtual clock, `pearl.sim.driver`),
the runtime awaits its event queue (a wall clock, `pearl.runtime.wall_clock`). What happens
to an event is this one `Dispatcher`, so the controller meets the same sequence of calls in
both, and both keep the same log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pearl.control.state import ClusterState
from pearl.world.contract import ControllerLike, World


@dataclass
class DispatchLog:
    """What the controller was told and what it did: counts by kind, and optionally the
    state after each change (`history`, for role timelines) and every command but `Route`
    with its time (`command_log`, for decision logs and tests)."""

    num_events: int = 0
    num_commands: int = 0
    events_by_kind: Counter[str] = field(default_factory=Counter)
    commands_by_kind: Counter[str] = field(default_factory=Counter)
    history: list[tuple[float, ClusterState]] = field(default_factory=list)
    command_log: list[tuple[float, Any]] = field(default_factory=list)


class Dispatcher:
    """Hands each event to `controller.handle` and executes the returned commands on
    `world`; `before_execute(command)` runs just before each (the runtime driver's
    bookkeeping); `now()` stamps the log."""

    def __init__(
        self,
        world: World,
        controller: ControllerLike,
        now: Callable[[], float],
        *,
        keep_history: bool = True,
        keep_commands: bool = True,
        before_execute: Callable[[Any], None] | None = None,
    ) -> None:
        self.world = world
        self.controller = controller
        self.now = now
        self.keep_history = keep_history
        self.keep_commands = keep_commands
        self.before_execute = before_execute
        self.log = DispatchLog()

    def handle(self, event: Any) -> list[Any]:
        """One event through the controller; its commands executed in order; returned."""
        log, ctl = self.log, self.controller
        log.num_events += 1
        log.events_by_kind[type(event).__name__] += 1
        before = ctl.state
        commands = ctl.handle(event)
        if commands:
            log.num_commands += len(commands)
            execute, hook = self.world.execute, self.before_execute
            for command in commands:
                name = type(command).__name__
                log.commands_by_kind[name] += 1
                if self.keep_commands and name != "Route":
                    log.command_log.append((self.now(), command))
                if hook is not None:
                    hook(command)
                execute(command)
        if self.keep_history:
            after = ctl.state
            if after is not before and after != before:
                log.history.append((self.now(), after))
        return commands
