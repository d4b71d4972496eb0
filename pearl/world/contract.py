"""The contract between the controller and a world (docs/architecture.md, "the seam").

A world is what the controller's commands act on: the simulator's `pearl.sim.world.SimWorld`
(a virtual clock) or the runtime's `pearl.runtime.world.RayWorld` (Ray actors, a wall
clock). Both implement `World`; both map each command type to the component that carries
it out through one `CommandTable`, so a command no component handles is a `TypeError` in
both; and both answer each command with the events `COMPLETIONS` names for it.
`tests/test_world_contract.py` plays the same scripted command sequences against both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.control.state import ClusterState


class World(Protocol):
    """What a world offers the controller's driver."""

    def execute(self, command: Any) -> None:
        """Carry out one command now; its completion comes back as later events. A command
        of a type the world has no component for raises `TypeError`."""
        ...


class ControllerLike(Protocol):
    """What a driver needs of a controller: its state and one reaction per event."""

    @property
    def state(self) -> ClusterState: ...

    def handle(self, event: Any) -> list[Any]: ...


class CommandTable:
    """Command type -> the world component's method that carries it out."""

    def __init__(self, handlers: dict[type, Callable[[Any], object]]) -> None:
        self.handlers = dict(handlers)

    def add(self, kind: type, handler: Callable[[Any], object]) -> None:
        self.handlers[kind] = handler

    def __call__(self, command: Any) -> None:
        handler = self.handlers.get(type(command))
        if handler is None:  # a command nobody executes is a bug, in either world
            raise TypeError(f"unknown command {command!r}")
        handler(command)


# The events that complete each command (the table in `pearl.control.commands`); an empty
# tuple: the command takes effect at once and nothing answers it.
COMPLETIONS: dict[type, tuple[type, ...]] = {
    cmd.InitWorker: (ev.WorkerReady, ev.WorkerInitFailed),
    cmd.SyncWeights: (ev.WeightsSynced,),
    cmd.AdmitGroup: (),
    cmd.ChangeRole: (),
    cmd.Drain: (ev.WorkerDrained,),
    cmd.Interrupt: (ev.RequestInterrupted,),
    cmd.StopWorker: (),
    cmd.ReleaseGpus: (),
    cmd.OffloadTraining: (),
    cmd.RestoreTraining: (ev.TrainingRestored,),
    cmd.Route: (ev.TurnFinished, ev.RequestInterrupted),
    cmd.StartRolloutBatch: (ev.TrajectoryReady,),
}
