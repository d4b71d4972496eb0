"""Events about a turn the controller has cancelled never reach it (`Flights.is_stale`,
checked by the driver's clock as each event is taken off the queue)."""

import asyncio

from pearl.control import events as ev
from pearl.runtime.flights import Flights
from pearl.runtime.wall_clock import WallClock


def test_an_event_of_a_cancelled_flight_is_stale_once_and_others_never():
    async def scenario() -> None:
        flights = Flights(lambda worker_id: None)
        old = flights.reserve("t", "w0", "w1")
        flights.unreserve("t", old)
        flights.begin("t", old)
        # the old turn's decode phase, emitted before or after the controller's interrupt
        phase = flights.tag(ev.RequestPhase(1.0, "t", "decode"), flights.current("t"))
        assert flights.cancel_on("w0") == ["t"]  # the controller interrupted w0 ...
        flights.land("t")
        flights.settle("t")
        new = flights.reserve("t", "w2", "w1")  # ... and routed t again through w1
        flights.unreserve("t", new)
        flights.begin("t", new)
        done = flights.tag(ev.TurnFinished(2.0, "t", "w1", None), flights.current("t"))
        untagged = ev.TrajectoryReady(3.0, "t")
        assert flights.is_stale(phase) and flights.num_stale == 1
        assert not flights.is_stale(done) and not flights.is_stale(untagged)
        assert not flights.is_stale(phase)  # checked once, at its delivery

    asyncio.run(scenario())


def test_the_clock_drops_stale_events_and_delivers_the_rest():
    async def scenario() -> list:
        queue: asyncio.Queue = asyncio.Queue()
        stale, fresh = ev.RequestPhase(1.0, "t", "decode"), ev.TurnFinished(1.1, "t", "w1", None)
        queue.put_nowait(stale)
        queue.put_nowait(fresh)
        clock = WallClock(queue, lambda: 0.0, stale=lambda e: e is stale)
        return [await clock.advance(), await clock.advance()]

    assert asyncio.run(scenario()) == [[], [ev.TurnFinished(1.1, "t", "w1", None)]]


def test_a_turn_whose_finish_is_still_queued_is_stale_after_an_interrupt():
    """The turn came back and its finish is queued, undelivered; the controller, not having
    seen it, interrupts the worker and routes the trajectory again: that finish is stale.
    A finish already delivered is not touched by a later interrupt."""

    async def scenario() -> None:
        flights = Flights(lambda worker_id: None)
        old = flights.reserve("t", "w0", "w1")
        flights.unreserve("t", old)
        flights.begin("t", old)
        flights.land("t")
        done = flights.tag(ev.TurnFinished(1.0, "t", "w1", None), old)  # queued
        flights.settle("t")  # even its environment step has answered meanwhile
        assert flights.cancel_on("w1") == []  # nothing in flight to abort ...
        assert flights.is_stale(done)  # ... but its queued finish is the old route's
        later = flights.reserve("t", "w2", "w3")
        flights.unreserve("t", later)
        flights.begin("t", later)
        flights.land("t")
        again = flights.tag(ev.TurnFinished(2.0, "t", "w3", None), later)
        assert not flights.is_stale(again)  # delivered before any interrupt
        flights.cancel_on("w3")
        assert not flights.is_stale(again)

    asyncio.run(scenario())
