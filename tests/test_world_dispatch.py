"""The dispatch step both drivers repeat (`pearl.world.dispatch`)."""

from __future__ import annotations

from typing import Any

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.control.state import ClusterState, Gpu, Zone
from pearl.world.dispatch import Dispatcher


class _World:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def execute(self, command: Any) -> None:
        self.calls.append(f"execute {type(command).__name__}")


class _Controller:
    """Answers each event with a Route and a Drain; changes its state on the second event."""

    def __init__(self) -> None:
        self._state = ClusterState()
        self.num = 0

    @property
    def state(self) -> ClusterState:
        return self._state

    def handle(self, event: Any) -> list[Any]:
        self.num += 1
        if self.num == 2:
            self._state = ClusterState(gpus=(Gpu("d0", Zone.DEDICATED),))
        return [cmd.Route("t0", "w0", None), cmd.Drain("w0")]


def test_commands_run_in_order_with_the_hook_first_and_the_log_counts_them() -> None:
    calls: list[str] = []
    clock = iter([1.0, 2.0, 3.0, 4.0, 5.0])
    d = Dispatcher(
        _World(calls),
        _Controller(),
        lambda: next(clock),
        before_execute=lambda c: calls.append(f"hook {type(c).__name__}"),
    )
    out = d.handle(ev.Started(0.0))
    assert [type(c).__name__ for c in out] == ["Route", "Drain"]
    assert calls == ["hook Route", "execute Route", "hook Drain", "execute Drain"]
    d.handle(ev.Started(0.0))
    log = d.log
    assert (log.num_events, log.num_commands) == (2, 4)
    assert log.events_by_kind == {"Started": 2}
    assert log.commands_by_kind == {"Route": 2, "Drain": 2}
    # Route is left out of the command log; history records only the changed state
    assert [type(c).__name__ for _, c in log.command_log] == ["Drain", "Drain"]
    assert len(log.history) == 1 and log.history[0][1].gpus[0].gpu_id == "d0"


def test_nothing_kept_when_asked_not_to() -> None:
    d = Dispatcher(_World([]), _Controller(), lambda: 0.0, keep_history=False, keep_commands=False)
    d.handle(ev.Started(0.0))
    d.handle(ev.Started(0.0))
    assert d.log.command_log == [] and d.log.history == []
    assert d.log.num_commands == 4
