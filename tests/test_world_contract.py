"""The world contract, played against both worlds: one scripted command sequence, the same
events back.

A scripted controller (no decisions: a fixed reaction to each event) starts one colocated
worker, starts a rollout batch of two trajectories, routes every ready trajectory to the
worker, drains the worker once each trajectory has finished a turn, and stops it when it
is drained. The simulator (virtual clock) and the Ray runtime (wall clock, a real worker
actor and environment) must answer with the same kinds of events in the same causal order:
the worker is ready before anything is routed; each trajectory is ready before its turn
finishes, on the worker it was routed to, with a telemetry record; the drain completes
after the turns it waited for; nothing is left unanswered; and a command the world has no
handler for is an error in both.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.control.state import ClusterState, Role, Zone

TRAJS = ("s0-g0-0", "s0-g0-1")


class Script:
    """The scripted controller: a fixed reaction to each event (see the module doc)."""

    def __init__(self, gpu_id: str) -> None:
        self.gpu_id = gpu_id
        self.seen: list[Any] = []
        self.routed: set[str] = set()
        self.turned: set[str] = set()
        self.drained = False
        self.stopped = False
        self._state = ClusterState()

    @property
    def state(self) -> ClusterState:  # what the simulator's driver records
        return self._state

    def handle(self, e: Any) -> list[cmd.Command]:
        self.seen.append(e)
        if isinstance(e, ev.Started):
            return [cmd.InitWorker("w0", (self.gpu_id,), Role.COLOCATED, "g0")]
        if isinstance(e, ev.WorkerReady) and e.worker_id == "w0":
            return [cmd.AdmitGroup("g0", ("w0",)), cmd.StartRolloutBatch(0, TRAJS)]
        if isinstance(e, ev.TrajectoryReady) and e.traj_id not in self.routed:
            self.routed.add(e.traj_id)
            return [cmd.Route(e.traj_id, "w0", None)]
        if isinstance(e, ev.TurnFinished):
            self.turned.add(e.traj_id)
            if self.turned == set(TRAJS) and not self.drained:
                self.drained = True
                return [cmd.Drain("w0")]
        if isinstance(e, ev.WorkerDrained) and not self.stopped:
            self.stopped = True
            return [cmd.StopWorker("w0")]
        return []

    @property
    def done(self) -> bool:
        return self.stopped


def _check_contract(seen: list[Any]) -> None:
    kinds = [type(e).__name__ for e in seen]
    assert kinds[0] == "Started"
    i_ready = kinds.index("WorkerReady")
    # The first turn of each trajectory (it is routed once; a later turn's readiness is
    # not routed by the script).
    finished: list[tuple[int, Any]] = []
    ready: dict[str, int] = {}
    for i, e in enumerate(seen):
        if isinstance(e, ev.TrajectoryReady):
            ready.setdefault(e.traj_id, i)
        elif isinstance(e, ev.TurnFinished) and all(e.traj_id != f.traj_id for _, f in finished):
            finished.append((i, e))
    assert {e.traj_id for _, e in finished} == set(TRAJS), kinds
    for i, e in finished:
        assert i_ready < ready[e.traj_id] < i  # worker up, trajectory ready, then its turn
        assert e.worker_id == "w0" and e.record is not None
        assert e.record.decode_tokens >= 1 and e.record.prefill_worker == "w0"
    i_drained = kinds.index("WorkerDrained")
    assert all(i < i_drained for i, _ in finished)
    assert "WorkerInitFailed" not in kinds and "RequestInterrupted" not in kinds


# -- the simulator ------------------------------------------------------------------------------
def test_simulated_world_keeps_the_contract() -> None:
    from pearl.sim.config import SimConfig
    from pearl.sim.driver import Driver
    from pearl.sim.world import World

    world = World(SimConfig(), [], borrowing=False)
    script = Script(world.dedicated[0].gpu_id)
    Driver(world, script).run(3600.0, stop=lambda: script.done)
    assert script.done
    _check_contract(script.seen)
    with pytest.raises(TypeError, match="unknown command"):
        world.execute(object())


# -- the Ray runtime ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from pearl.runtime.topology import LocalCluster

    c = LocalCluster(head_cpus=1)
    c.add_node("dedicated", Zone.DEDICATED, ["d0"])
    c.connect()
    yield c
    c.shutdown()


@pytest.mark.ray
def test_ray_world_keeps_the_contract(cluster) -> None:
    from pearl.runtime.run_config import RunConfig
    from pearl.runtime.worker_api import EngineSpec
    from pearl.runtime.world import RayWorld

    script = Script("d0")

    async def play() -> None:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        t0 = time.monotonic()
        world = RayWorld(
            RunConfig(),
            EngineSpec(seed=3, num_kv_blocks=256),
            emit=queue.put_nowait,
            now=lambda: time.monotonic() - t0,
            on_record=lambda kind, payload: None,
        )
        pump = asyncio.get_running_loop().create_task(world.pump_env())
        try:
            queue.put_nowait(ev.Started(0.0))
            deadline = time.monotonic() + 180.0
            while not script.done and time.monotonic() < deadline:
                try:
                    e = await asyncio.wait_for(queue.get(), 1.0)
                except TimeoutError:
                    continue
                for c in script.handle(e):
                    world.execute(c)
            with pytest.raises(TypeError, match="unknown command"):
                world.execute(object())
        finally:
            pump.cancel()
            await world.shutdown()

    asyncio.run(play())
    assert script.done, [type(e).__name__ for e in script.seen]
    _check_contract(script.seen)
