"""The driver: events reach the controller in order, commands reach the world, time stops."""

from __future__ import annotations

from dataclasses import dataclass

from pearl.control.state import ClusterState
from pearl.sim.core import EventCore
from pearl.sim.driver import Driver


@dataclass(frozen=True)
class Ping:
    time_s: float
    n: int


@dataclass(frozen=True)
class Echo:
    n: int


class FakeWorld:
    """Emits Ping(n) at t = n; each Echo command schedules the next ping."""

    def __init__(self) -> None:
        self.core = EventCore(0)
        self.outbox: list = []
        self.executed: list = []

    def start(self) -> None:
        self.outbox.append(Ping(0.0, 0))

    def take_outbox(self) -> list:
        out, self.outbox = self.outbox, []
        return out

    def execute(self, cmd: Echo) -> None:
        self.executed.append((self.core.now_s, cmd.n))
        n = cmd.n + 1
        self.core.schedule(float(n), lambda: self.outbox.append(Ping(float(n), n)))


class FakeController:
    def __init__(self) -> None:
        self.seen: list = []
        self._state = ClusterState()

    @property
    def state(self) -> ClusterState:
        return self._state

    def handle(self, event: Ping) -> list[Echo]:
        self.seen.append(event)
        return [Echo(event.n)]


def test_events_and_commands_alternate_until_the_end() -> None:
    """Every event is handled at its time; each command runs at that same time."""
    world, ctl = FakeWorld(), FakeController()
    log = Driver(world, ctl).run(5.5)
    assert [e.n for e in ctl.seen] == [0, 1, 2, 3, 4, 5]
    assert world.executed == [(float(n), n) for n in range(6)]
    assert log.num_events == 6 and log.commands_by_kind["Echo"] == 6
    assert [t for t, _ in log.command_log] == [float(n) for n in range(6)]


def test_stop_ends_the_run_early() -> None:
    """A stop condition ends the loop after the entry that made it true."""
    world, ctl = FakeWorld(), FakeController()
    Driver(world, ctl).run(100.0, stop=lambda: len(ctl.seen) >= 3)
    assert len(ctl.seen) == 3


def test_progress_is_reported_with_the_end_time() -> None:
    """Progress callbacks end with the run's end time."""
    world, ctl = FakeWorld(), FakeController()
    seen: list[float] = []
    Driver(world, ctl).run(200.0, progress=seen.append)
    assert seen[-1] == 200.0 and seen == sorted(seen)
