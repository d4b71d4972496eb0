"""The runtime's clock for the one driver loop of both worlds (`pearl.world.loop`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pearl.runtime.trace_player import TracePlayer


class WallClock:
    """The runtime's `pearl.world.loop.Clock`: the next event off the driver's queue, waited
    for at most `TICK_S` (an empty step then, so the live view stays fresh) or until the
    availability trace's next action is due, which is played before the step's events.
    `stale(event)`, checked as each event is taken off the queue, drops an event the world
    has since made stale (`pearl.runtime.flights.Flights.is_stale`)."""

    TICK_S = 0.25

    def __init__(
        self,
        queue: asyncio.Queue[Any],
        now: Callable[[], float],
        player: TracePlayer | None = None,
        stale: Callable[[Any], bool] | None = None,
    ) -> None:
        self.queue = queue
        self.now = now
        self.player = player
        self.stale = stale

    async def advance(self) -> list[Any] | None:
        timeout = self.TICK_S
        next_at = self.player.next_at_s() if self.player is not None else None
        if next_at is not None:
            timeout = max(0.0, min(timeout, next_at - self.now()))
        try:
            event = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            event = None
        if self.player is not None:
            self.player.play_due()
        if event is None or (self.stale is not None and self.stale(event)):
            return []
        return [event]
