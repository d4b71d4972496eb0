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

A third script reclaims a preemptible GPU in the middle of a route: the trajectory is
routed to the worker there and, in the same breath (before the world has run anything),
the worker is interrupted and stopped and its GPU released to the provider, as the
controller does on a reclaim (or, in a variant, only interrupted). Both worlds must answer
with the trajectory interrupted on that worker, and its resumed turn (a full prefill) must
finish on the surviving worker; the reclaimed worker serves nothing. In the mid-decode
variants the cut comes on the turn's `RequestPhase` "decode" instead (the simulator built
with `phase_events=True`): the interruption must carry the generated prefix (>= 1 token),
where the cut before the route ran carries none.

A second script borrows a training GPU: the trainer's state is offloaded, the worker starts
on the training GPU and serves, then is drained and stopped, the GPU is released to
training and the trainer restores onto it. Both worlds must answer the same way and end
with `TrainingRestored` for that GPU after the release, with no turn served after it.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.control.state import ClusterState, Gpu, Role, Zone

TRAJS = ("s0-g0-0", "s0-g0-1")


class Script:
    """The scripted controller: a fixed reaction to each event (see the module doc)."""

    def __init__(self, gpu_id: str, *, borrow: bool = False) -> None:
        self.gpu_id = gpu_id
        self.borrow = borrow  # the GPU is a training GPU: offload first, give it back after
        self.restored = False
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
        gpus = (self.gpu_id,)
        if isinstance(e, ev.Started):
            init = cmd.InitWorker("w0", gpus, Role.COLOCATED, "g0")
            return [cmd.OffloadTraining(gpus), init] if self.borrow else [init]
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
            if self.borrow:
                return [
                    cmd.StopWorker("w0"),
                    cmd.ReleaseGpus(gpus, to="training"),
                    cmd.RestoreTraining(gpus),
                ]
            return [cmd.StopWorker("w0")]
        if isinstance(e, ev.TrainingRestored) and self.gpu_id in e.gpu_ids:
            self.restored = True
        return []

    @property
    def done(self) -> bool:
        return self.stopped and (self.restored or not self.borrow)


class ReclaimScript:
    """The reclaim script (see the module doc): `w1` on a dedicated GPU, `w0` on the
    preemptible GPU once it is offered; one trajectory, routed to `w0` as `w0` is reclaimed."""

    TRAJ = "s0-g0-0"

    def __init__(
        self, dedicated: str, preemptible: str, *, reclaim: bool = True, mid_decode: bool = False
    ) -> None:
        self.dedicated, self.preemptible = dedicated, preemptible
        self.reclaim = reclaim  # False: interrupt only (the worker stays, idle)
        self.mid_decode = mid_decode  # cut the turn once it decodes, not before it runs
        self.seen: list[Any] = []
        self.ready: set[str] = set()
        self.routed = self.resumed = self.done = False
        self._state = ClusterState()

    @property
    def state(self) -> ClusterState:
        return self._state

    def handle(self, e: Any) -> list[cmd.Command]:
        self.seen.append(e)
        if isinstance(e, ev.Started):
            return [cmd.InitWorker("w1", (self.dedicated,), Role.COLOCATED, "g1")]
        if isinstance(e, ev.GpusOffered) and self.preemptible in [g.gpu_id for g in e.gpus]:
            return [cmd.InitWorker("w0", (self.preemptible,), Role.COLOCATED, "g0")]
        if isinstance(e, ev.WorkerReady) and e.worker_id not in self.ready:
            self.ready.add(e.worker_id)
            out: list[cmd.Command] = [cmd.AdmitGroup(f"g{e.worker_id[1:]}", (e.worker_id,))]
            if self.ready == {"w0", "w1"}:
                out.append(cmd.StartRolloutBatch(0, (self.TRAJ,)))
            return out
        if isinstance(e, ev.TrajectoryReady) and not self.routed:
            self.routed = True
            if self.mid_decode:
                return [cmd.Route(self.TRAJ, "w0", None)]
            return [cmd.Route(self.TRAJ, "w0", None), *self._cut()]  # before the world ran it
        if isinstance(e, ev.RequestPhase) and self.mid_decode and not self.resumed:
            assert (e.traj_id, e.phase) == (self.TRAJ, "decode")
            return self._cut()
        if isinstance(e, ev.RequestInterrupted) and not self.resumed:
            self.resumed = True
            return [cmd.Route(self.TRAJ, "w1", None, full_prefill=True)]
        if isinstance(e, ev.TurnFinished) and e.worker_id == "w1":
            self.done = True
        return []

    def _cut(self) -> list[cmd.Command]:
        out: list[cmd.Command] = [cmd.Interrupt("w0")]
        if self.reclaim:
            out += [cmd.StopWorker("w0"), cmd.ReleaseGpus((self.preemptible,), to="provider")]
        return out


def _check_reclaim(
    seen: list[Any], *, mid_decode: bool = False, may_end_first: bool = False
) -> None:
    """`may_end_first`: the cut raced with the turn's last token (a real engine's abort
    lands between its steps): the world keeps the whole turn as the prefix, so the resumed
    route completes it without model work (a `TurnFinished` without a record)."""
    kinds = [type(e).__name__ for e in seen]
    (cut,) = [i for i, e in enumerate(seen) if isinstance(e, ev.RequestInterrupted)]
    assert (seen[cut].traj_id, seen[cut].worker_id) == (ReclaimScript.TRAJ, "w0"), kinds
    if mid_decode:  # cut while decoding: the prefix it generated comes back with it
        phases = [i for i, e in enumerate(seen) if isinstance(e, ev.RequestPhase)]
        assert phases and phases[0] < cut and seen[cut].generated_tokens >= 1, seen[cut]
        assert all(seen[i].phase == "decode" for i in phases), kinds  # colocated: no KV move
    else:  # cut before it ran: nothing generated
        assert seen[cut].generated_tokens == 0, seen[cut]
    turns = [(i, e) for i, e in enumerate(seen) if isinstance(e, ev.TurnFinished)]
    assert turns and all(e.worker_id == "w1" for _, e in turns), kinds  # w0 served nothing
    i, first = turns[0]
    assert cut < i and first.traj_id == ReclaimScript.TRAJ
    if first.record is None and may_end_first:
        return
    assert first.record is not None and first.record.prefill_worker == "w1"
    assert first.record.resumed and first.record.decode_tokens >= 1
    assert "WorkerInitFailed" not in kinds


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


def _check_borrow(seen: list[Any], gpu_id: str) -> None:
    """The borrowed GPU served, went back, and the trainer restored onto it last."""
    _check_contract(seen)
    kinds = [type(e).__name__ for e in seen]
    i_drained = kinds.index("WorkerDrained")
    restored = [i for i, e in enumerate(seen) if isinstance(e, ev.TrainingRestored)]
    assert restored and all(gpu_id in seen[i].gpu_ids for i in restored), kinds
    assert i_drained < restored[0]
    assert all(
        not (isinstance(e, ev.TurnFinished) and e.worker_id == "w0") for e in seen[i_drained:]
    )


# -- the simulator ------------------------------------------------------------------------------
def test_simulated_world_keeps_the_contract() -> None:
    from pearl.sim.config import SimConfig
    from pearl.sim.driver import Driver
    from pearl.sim.world import SimWorld

    world = SimWorld(SimConfig(), [], borrowing=False)
    script = Script(world.dedicated[0].gpu_id)
    Driver(world, script).run(3600.0, stop=lambda: script.done)
    assert script.done
    _check_contract(script.seen)
    with pytest.raises(TypeError, match="unknown command"):
        world.execute(object())


def test_simulated_world_lends_and_restores_a_training_gpu() -> None:
    from pearl.sim.config import SimConfig
    from pearl.sim.driver import Driver
    from pearl.sim.world import SimWorld

    world = SimWorld(SimConfig(), [], borrowing=True)
    gpu = world.training_gpus[0].gpu_id
    script = Script(gpu, borrow=True)
    Driver(world, script).run(3600.0, stop=lambda: script.done)
    assert script.done, [type(e).__name__ for e in script.seen]
    _check_borrow(script.seen, gpu)
    assert world.trainer.home


CUTS = [(True, False), (False, False), (True, True), (False, True)]
CUT_IDS = ["reclaim", "interrupt-only", "reclaim-mid-decode", "interrupt-only-mid-decode"]


@pytest.mark.parametrize(("reclaim", "mid_decode"), CUTS, ids=CUT_IDS)
def test_simulated_world_interrupts_a_reclaimed_route_and_resumes_it(
    reclaim: bool, mid_decode: bool
) -> None:
    from pearl.sim.config import SimConfig
    from pearl.sim.driver import Driver
    from pearl.sim.playback import TraceAction
    from pearl.sim.world import SimWorld

    offer = [TraceAction(0.0, "offer", ("p0",))]
    world = SimWorld(SimConfig(), offer, borrowing=False, phase_events=mid_decode)
    script = ReclaimScript(world.dedicated[0].gpu_id, "p0", reclaim=reclaim, mid_decode=mid_decode)
    Driver(world, script).run(3600.0, stop=lambda: script.done)
    assert script.done, [type(e).__name__ for e in script.seen]
    _check_reclaim(script.seen, mid_decode=mid_decode)
    assert ("p0" in world.gpus) is not reclaim  # released to the provider


# -- the Ray runtime ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from pearl.runtime.local_cluster import LocalCluster

    c = LocalCluster(head_cpus=1)
    c.add_node("dedicated", Zone.DEDICATED, ["d0"])
    c.add_node("training", Zone.OVERLAP, ["t0"])
    c.add_node("spot", Zone.PREEMPTIBLE, ["p0"])
    c.connect()
    yield c
    c.shutdown()


class _Trainer:
    """A stand-in trainer actor: what the training component calls on it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def release(self) -> None:
        self.calls.append("release")

    def restore(self) -> None:
        self.calls.append("restore")

    def history(self) -> list[str]:
        return list(self.calls)


def _play_ray(
    script: Any, *, borrow: bool, offer: tuple[str, ...] = (), max_new_tokens: int | None = None
) -> list[str]:
    """Play `script` against a RayWorld; returns the trainer's calls (borrow only)."""
    import ray

    from pearl.runtime.lending import TrainingLending
    from pearl.runtime.run_config import RunConfig
    from pearl.runtime.wall_clock import WallClock
    from pearl.runtime.worker.api import EngineSpec
    from pearl.runtime.world import RayWorld
    from pearl.world.dispatch import Dispatcher
    from pearl.world.loop import drive

    doc: dict[str, Any] = {"cluster": {"park_borrowed_workers": False}}
    if max_new_tokens is not None:
        doc["rollout"] = {"max_new_tokens": max_new_tokens}
    cfg = RunConfig.model_validate(doc)
    trainer = ray.remote(num_cpus=0)(_Trainer).remote() if borrow else None

    async def play() -> None:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        t0 = time.monotonic()

        def now() -> float:
            return time.monotonic() - t0

        def training(pool: Any) -> TrainingLending:
            return TrainingLending(
                trainer=trainer,
                slots=pool,
                emit=queue.put_nowait,
                now=now,
                note=lambda *a, **k: None,
                last_decision=lambda word: "",
                on_returned=lambda: None,
            )

        world = RayWorld(
            cfg,
            EngineSpec(seed=3, num_kv_blocks=256),
            emit=queue.put_nowait,
            now=now,
            on_record=lambda kind, payload: None,
            training_slots=("t0",) if borrow else (),
            training=training if borrow else None,
        )
        # the runtime driver's step: event -> script -> commands -> world
        dispatcher = Dispatcher(world, script, now, keep_history=False, keep_commands=False)
        pump = asyncio.get_running_loop().create_task(world.trajectories.pump_env())
        try:
            queue.put_nowait(ev.Started(0.0))
            if offer:  # what the cluster watcher reports for a preemptible node
                gpus = tuple(Gpu(g, Zone.PREEMPTIBLE, node="spot") for g in offer)
                queue.put_nowait(ev.GpusOffered(0.0, gpus, None))
            deadline = time.monotonic() + 180.0
            # the runtime driver's loop: the one loop of both worlds, on the wall clock
            await drive(
                WallClock(queue, now),
                dispatcher.handle,
                done=lambda: script.done or time.monotonic() > deadline,
            )
            with pytest.raises(TypeError, match="unknown command"):
                world.execute(object())
        finally:
            pump.cancel()
            await world.shutdown()

    asyncio.run(play())
    assert script.done, [type(e).__name__ for e in script.seen]
    return ray.get(trainer.history.remote()) if trainer is not None else []


@pytest.mark.ray
def test_ray_world_keeps_the_contract(cluster) -> None:
    script = Script("d0")
    _play_ray(script, borrow=False)
    _check_contract(script.seen)


@pytest.mark.ray
def test_ray_world_lends_and_restores_a_training_slot(cluster) -> None:
    script = Script("t0", borrow=True)
    calls = _play_ray(script, borrow=True)
    _check_borrow(script.seen, "t0")
    assert calls == ["release", "restore"]


@pytest.mark.ray
@pytest.mark.parametrize(("reclaim", "mid_decode"), CUTS, ids=CUT_IDS)
def test_ray_world_interrupts_a_reclaimed_route_and_resumes_it(
    cluster, reclaim: bool, mid_decode: bool
) -> None:
    script = ReclaimScript("d0", "p0", reclaim=reclaim, mid_decode=mid_decode)
    # mid-decode: turns long enough (the default is 4 tokens) that the cut lands inside one
    _play_ray(script, borrow=False, offer=("p0",), max_new_tokens=64 if mid_decode else None)
    _check_reclaim(script.seen, mid_decode=mid_decode, may_end_first=mid_decode)
