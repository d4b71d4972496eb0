"""The one driver loop both worlds run (docs/architecture.md, "the seam").

    while not done():
        events = await clock.advance()   # the clock moves on and the world acts
        if events is None: stop          # nothing left before the end
        for event in events: dispatch(event)
        after_step()

What differs between the worlds is only the `Clock`: the simulator's advances a virtual
clock by popping its heap and running the entry (physics, environment steps, trainer,
trace playback), then hands over the events the world emitted; the runtime's waits on its
event queue against the wall clock (playing the availability trace when it is due). The
`dispatch` is each driver's `Dispatcher.handle` (`pearl.world.dispatch`), so the
controller sees the same sequence of calls in both.

The loop is a coroutine: the runtime awaits it in its asyncio loop; the simulator, whose
clock never waits, runs it to completion with `run_to_completion` (no event loop, so the
simulator stays synchronous and fast).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    """Where a driver's next events come from, and when."""

    async def advance(self) -> list[Any] | None:
        """Move to the next moment something happens; the events emitted by then (empty on
        a moment with none, e.g. a wall-clock tick), or None when the run has reached its
        end."""
        ...


async def drive(
    clock: Clock,
    dispatch: Callable[[Any], object],
    *,
    done: Callable[[], bool] = lambda: False,
    after_step: Callable[[], None] | None = None,
) -> None:
    """Run the loop (module docstring) until `done()` or the clock's end."""
    while not done():
        events = await clock.advance()
        if events is None:
            return
        for event in events:
            dispatch(event)
        if after_step is not None:
            after_step()


def run_to_completion(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never waits on anything (a virtual clock's loop) to its end,
    without an event loop; one that does wait is an error."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a virtual-clock loop waited on real time")
