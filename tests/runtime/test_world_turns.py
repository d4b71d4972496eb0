"""RayWorld's turn path without Ray: a turn that fails unexpectedly is an interruption (the
trajectory keeps its prefix and is routed again), never a stranded trajectory."""

import asyncio

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.runtime.run_config import RunConfig
from pearl.runtime.trajectory import RuntimeTrajectory
from pearl.runtime.worker_api import EngineSpec
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
        world.trajs[traj.traj_id] = traj

        async def broken(req, c):
            raise AttributeError("a bug in the turn path")

        world._run_turn = broken
        asyncio.run(world._turn(cmd.Route("s0-g0-0", "w0", "w1")))
    finally:
        world.env.shutdown()
    assert [type(e) for e in events] == [ev.RequestInterrupted]
    assert events[0].traj_id == "s0-g0-0" and not traj.done
    assert any(kind == "error" and "a bug in the turn path" in str(p) for kind, p in records)
    assert world.counters["interrupts"] == 1
