"""The one driver loop (`pearl.world.loop`): its stops, and running it without an event loop."""

from __future__ import annotations

import asyncio

import pytest

from pearl.world.loop import drive, run_to_completion


class ListClock:
    """A clock over a fixed list of steps (each a list of events), then the end."""

    def __init__(self, steps: list[list[str]]) -> None:
        self.steps = list(steps)

    async def advance(self) -> list[str] | None:
        return self.steps.pop(0) if self.steps else None


def test_every_event_in_order_then_the_clock_ends() -> None:
    seen: list[str] = []
    ticks: list[int] = []
    clock = ListClock([["a", "b"], [], ["c"]])
    run_to_completion(drive(clock, seen.append, after_step=lambda: ticks.append(len(seen))))
    assert seen == ["a", "b", "c"]
    assert ticks == [2, 2, 3]  # after each step, empty ones too


def test_done_is_checked_before_each_step() -> None:
    seen: list[str] = []
    clock = ListClock([["a"], ["b"], ["c"]])
    run_to_completion(drive(clock, seen.append, done=lambda: "b" in seen))
    assert seen == ["a", "b"] and clock.steps == [["c"]]


def test_a_loop_that_waits_on_real_time_is_refused_without_an_event_loop() -> None:
    class Suspend:
        """What awaiting a future amounts to: the coroutine suspends."""

        def __await__(self):
            yield None

    class Sleepy:
        async def advance(self) -> list[str] | None:
            await Suspend()
            return None

    with pytest.raises(RuntimeError, match="waited on real time"):
        run_to_completion(drive(Sleepy(), print))


def test_the_same_loop_runs_in_an_event_loop() -> None:
    seen: list[str] = []

    class Queued:
        def __init__(self) -> None:
            self.queue: asyncio.Queue[str] = asyncio.Queue()

        async def advance(self) -> list[str] | None:
            return [await asyncio.wait_for(self.queue.get(), 1.0)]

    async def main() -> None:
        clock = Queued()
        for e in ("x", "y"):
            clock.queue.put_nowait(e)
        await drive(clock, seen.append, done=lambda: len(seen) == 2)

    asyncio.run(main())
    assert seen == ["x", "y"]
