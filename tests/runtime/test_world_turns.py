"""RayWorld's turn path without Ray: a turn that fails unexpectedly is an interruption (the
trajectory keeps its prefix and is routed again), never a stranded trajectory."""

import asyncio

import pytest

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.runtime.run_config import RunConfig
from pearl.runtime.trajectory import RuntimeTrajectory
from pearl.runtime.worker.api import EngineSpec
from pearl.runtime.world import RayWorld


def test_a_turn_that_raises_comes_back_as_an_interruption():
    events, records = [], []
    world = RayWorld(
        RunConfig(),
        EngineSpec(),
        emit=events.append,
        now=lambda: 1.0,
        on_record=lambda kind, payload: records.append((kind, payload)),
    )
    try:
        traj = RuntimeTrajectory("s0-g0-0", 0, 0, 0)
        traj.add_context([1, 2, 3])
        world.trajectories.trajs[traj.traj_id] = traj

        async def broken(req, c):
            raise AttributeError("a bug in the turn path")

        world.trajectories.run_turn = broken

        async def go():
            await world.trajectories.route(cmd.Route("s0-g0-0", "w0", "w1"))

        asyncio.run(go())
    finally:
        world.env.shutdown()
    assert [type(e) for e in events] == [ev.RequestInterrupted]
    assert events[0].traj_id == "s0-g0-0" and not traj.done
    assert any(kind == "error" and "a bug in the turn path" in str(p) for kind, p in records)
    assert world.counters["interrupts"] == 1


def _world(events, records=None):
    return RayWorld(
        RunConfig(),
        EngineSpec(),
        emit=events.append,
        now=lambda: 1.0,
        on_record=lambda kind, payload: (records if records is not None else []).append(
            (kind, payload)
        ),
    )


def _turn_record(traj_id: str, turn: int):
    from pearl.control.telemetry import turn_record

    return turn_record(
        traj_id=traj_id, turn=turn, step=0, weight_version=4, prefill_worker="w0",
        decode_worker="w1", roles=("prefill", "decode"), context_tokens=3,
        cached_prefix_tokens=0, decode_tokens=2, t_queued_s=0.0, t_prefill_start_s=0.1,
        t_prefill_end_s=0.2, t_kv_start_s=0.2, t_kv_end_s=0.3, t_decode_start_s=0.3,
        t_decode_end_s=0.5,
    )  # fmt: skip


class _FakeHandle:
    def __init__(self):
        self.interrupted = []

        class _M:
            def remote(inner, ids=None):  # noqa: N805 - a stand-in for an actor method
                self.interrupted.append(ids)

        self.interrupt = _M()


def test_a_turn_cancelled_after_it_finished_is_kept_whole_and_not_continued():
    """Split turn w0 -> w1; the controller interrupts w0 while w1 is decoding: w1 is told to
    abort that request; if the turn still comes back complete it is kept as a whole
    prefix, and the next route finishes it without generating (no second env step)."""
    from pearl.runtime.worker.api import TurnResult as TR

    events = []
    world = _world(events)
    w1 = _FakeHandle()
    world.workers.update({"w0": _FakeHandle(), "w1": w1})
    calls, steps = [], []
    rec = _turn_record("s0-g0-0", 0)
    world.env.submit_step = lambda tid, text: steps.append((tid, text))

    async def scenario():
        traj = RuntimeTrajectory("s0-g0-0", 0, 0, 0)
        traj.add_context([1, 2, 3])
        world.trajectories.trajs[traj.traj_id] = traj
        gate = asyncio.Event()

        async def run_turn(req, c):
            calls.append(req.request_id)
            await gate.wait()
            return TR(req.traj_id, req.turn, (65, 66), (-0.1, -0.2), "stop", "w1", 4, record=rec)

        world.trajectories.run_turn = run_turn
        first = world.trajectories.route(cmd.Route("s0-g0-0", "w0", "w1"))
        await asyncio.sleep(0)
        world.execute(cmd.Interrupt("w0"))  # the book interrupts s0-g0-0 now
        second = world.trajectories.route(cmd.Route("s0-g0-0", "w2", None, True))
        await asyncio.sleep(0)
        gate.set()
        await first
        await second
        return traj

    try:
        traj = asyncio.run(scenario())
    finally:
        world.env.shutdown()
    assert calls == ["s0-g0-0#0"]  # the second route did not generate again
    assert steps == [("s0-g0-0", "AB")]  # one env step, with the whole turn
    assert w1.interrupted == [("s0-g0-0#0",)]
    assert [type(e).__name__ for e in events] == ["RequestInterrupted", "TurnFinished"]
    # the controller interrupted the first turn itself and routed it again through w1: the
    # first turn's event is stale at delivery, the second route's is not
    flights = world.trajectories.flights
    assert [flights.is_stale(e) for e in events] == [True, False]
    # the turn ran once, on w0 -> w1: its record is the telemetry of the turn the second
    # route completes (without it the run's telemetry skipped this turn)
    assert events[1].record is rec and world.trajectories.last_record["s0-g0-0"] is rec
    assert traj.num_turns == 1 and traj.token_ids[-2:] == [65, 66]
    assert traj.partial_ids == [] and not traj.partial_complete


def test_a_route_interrupted_before_its_turn_began_never_runs():
    """Route to w0 and Interrupt w0 in one breath (the controller may do both before the
    event loop runs the route's task): the turn never starts on w0, it is answered as
    interrupted, and the controller's next route (a full prefill on w1) runs it."""
    from pearl.runtime.worker.api import TurnResult as TR

    events, records = [], []
    world = _world(events, records)
    world.workers.update({"w0": _FakeHandle(), "w1": _FakeHandle()})
    calls, steps = [], []
    world.env.submit_step = lambda tid, text: steps.append((tid, text))

    async def scenario():
        traj = RuntimeTrajectory("s0-g0-2", 0, 0, 2)
        traj.add_context([1, 2, 3])
        world.trajectories.trajs[traj.traj_id] = traj

        async def run_turn(req, c):
            calls.append((req.request_id, c.prefill_worker_id, req.resumed))
            return TR(req.traj_id, req.turn, (67,), (-0.1,), "stop", c.prefill_worker_id, 2)

        world.trajectories.run_turn = run_turn
        first = world.trajectories.route(cmd.Route("s0-g0-2", "w0", None))
        world.execute(cmd.Interrupt("w0"))  # before `first` has run at all
        await first
        assert [type(e).__name__ for e in events] == ["RequestInterrupted"]
        await world.trajectories.route(cmd.Route("s0-g0-2", "w1", None, True))
        return traj

    try:
        traj = asyncio.run(scenario())
    finally:
        world.env.shutdown()
    assert calls == [("s0-g0-2#0", "w1", True)]  # w0 never saw it
    assert [(type(e).__name__, e.worker_id) for e in events] == [
        ("RequestInterrupted", "w0"),
        ("TurnFinished", "w1"),
    ]
    assert events[0].generated_tokens == 0 and steps == [("s0-g0-2", "C")]
    assert [world.trajectories.flights.is_stale(e) for e in events] == [True, False]
    kinds = [k for k, _ in records]
    assert kinds.count("interrupt") == 1 and kinds.count("resume") == 1
    assert traj.num_turns == 1 and traj.versions[-1] == 2


def test_a_route_waits_for_the_env_step_and_closes_a_finished_episode():
    """A route that raced with the previous turn's env step waits for it; when that step
    ended the episode, the route only closes the trajectory in the book."""
    events = []
    world = _world(events)
    ran = []

    async def scenario():
        traj = RuntimeTrajectory("s0-g0-1", 0, 0, 1)
        traj.add_context([1, 2])
        world.trajectories.trajs[traj.traj_id] = traj
        world.trajectories.flights.hold(traj.traj_id)  # an env step in flight

        async def run_turn(req, c):
            ran.append(req.request_id)

        world.trajectories.run_turn = run_turn
        route = world.trajectories.route(cmd.Route("s0-g0-1", "w3", None, True))
        await asyncio.sleep(0.01)
        assert not route.done() and not ran  # waiting for the env step
        traj.done = True  # the env step ended the episode
        world.trajectories.traj_done(traj)  # settles (already done: emits nothing itself)
        await route

    try:
        asyncio.run(scenario())
    finally:
        world.env.shutdown()
    assert not ran
    assert [type(e).__name__ for e in events] == ["TurnFinished", "TrajectoryDone"]
    assert events[0].worker_id == "w3"


def test_unknown_commands_are_errors_in_both_worlds():
    """A command no world executes is a bug: both worlds raise, neither drops it."""
    from pearl.sim.config import SimConfig
    from pearl.sim.world import SimWorld

    class Bogus:
        time_s = 0.0

    with pytest.raises(TypeError, match="unknown command"):
        _world([]).execute(Bogus())
    with pytest.raises(TypeError, match="unknown command"):
        SimWorld(SimConfig(), [], borrowing=False).execute(Bogus())
    _world([]).execute(cmd.AdmitGroup("g", ("w0",)))  # admission: nothing for the world to do
