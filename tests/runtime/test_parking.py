"""Parked overlap workers (paper §4.6, §5): borrow by activation, not by start.

One local Ray cluster for the module (a node with two training slots). Checked on a real
worker actor: park interrupts a turn in flight (its generated prefix comes back), releases
device state and refuses requests; activation keeps the same process, takes the new worker
id (on results and telemetry), restores device state, syncs to a newer weight version and
serves the same tokens as a reference engine with those weights. On `RayWorld`: a
pre-started worker is warmed up and parked at run start, InitWorker on its slots activates it (same
process, WorkerReady), StopWorker parks it again, and with the switch off it is killed.
The driver's return path is checked without Ray: the trainer restores only after the park.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from pearl.control import commands as cmd
from pearl.control import events as ev
from pearl.control.state import Role, Zone
from pearl.runtime.engine import SamplingParams
from pearl.runtime.worker.api import EngineSpec, TurnRequest, collect_turn

SPEC = EngineSpec(seed=5, num_kv_blocks=256)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


def _prompt(i: int, n: int = 20) -> tuple[int, ...]:
    return tuple((5 * i + 7 * k) % 250 + 1 for k in range(n))


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from pearl.runtime.local_cluster import LocalCluster

    c = LocalCluster(head_cpus=1)
    c.add_node("training", Zone.OVERLAP, ["t0", "t1", "t2"])
    c.connect()
    yield c
    c.shutdown()


@pytest.mark.ray
def test_park_then_activate_keeps_the_process_and_takes_the_new_id(cluster) -> None:
    import ray

    from pearl.runtime.snapshots import fetch_weights, get_registry, publish_weights
    from pearl.runtime.worker.rollout_worker import start_worker

    registry = get_registry()
    w = start_worker("old", "colocated", ("t0",), SPEC)
    before = ray.get(w.ready.remote())
    assert not before.parked and not before.released and before.pid > 0
    # The pre-start warm-up reinstalls the loaded weights: tokens below still match SPEC's.
    assert ray.get(w.warm_up.remote()) >= 0 and ray.get(w.status.remote()).weight_version == 0
    # A long turn is streaming when the worker is parked: it comes back interrupted with
    # every token generated so far, and those are the reference engine's first tokens.
    long = SamplingParams(temperature=0.0, max_new_tokens=2000)
    req = TurnRequest("t", 0, _prompt(0), long)
    seen: list[int] = []

    async def park_mid_turn():
        task = asyncio.create_task(
            collect_turn(w.serve.remote(req), req, "old", lambda ch: seen.extend(ch.token_ids))
        )
        deadline = time.monotonic() + 60
        while len(seen) < 5 and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        park_ms = await w.park.remote()
        return park_ms, await task

    park_ms, cut = asyncio.run(park_mid_turn())
    assert park_ms >= 0
    assert cut.finish_reason == "interrupted" and cut.worker_id == "old"
    assert 5 <= len(cut.token_ids) < long.max_new_tokens and list(cut.token_ids) == seen
    (ref,) = SPEC.build().generate([list(_prompt(0))], long)
    assert cut.token_ids == tuple(ref.output_token_ids[: len(cut.token_ids)])
    parked = ray.get(w.status.remote())
    assert parked.parked and parked.released and not parked.accepting and parked.num_running == 0
    refused = ray.get(w.generate.remote(TurnRequest("x", 0, _prompt(1), GREEDY)))
    assert refused.error is not None and "parked" in refused.error
    ray.get(w.telemetry.remote())  # the old id's records are drained at park (by the world)

    # Activation: the same process under the new id and role, device state back.
    ms = ray.get(w.activate_as.remote("new", "colocated"))
    after = ray.get(w.status.remote())
    assert ms >= 0 and after.pid == before.pid
    assert after.worker_id == "new" and not after.parked and not after.released
    # The controller then syncs it to the current weights: a newer version (other seed).
    weights = EngineSpec(seed=17).build().state_dict()
    snap = publish_weights(registry, weights, 1, metadata={"step": 1})
    assert ray.get(w.sync_weights.remote(1)) == 1
    res = ray.get(w.generate.remote(TurnRequest("y", 0, _prompt(2), GREEDY)))
    reference = SPEC.build()
    reference.load_weights(fetch_weights(snap), 1)
    (want,) = reference.generate([list(_prompt(2))], GREEDY)
    assert res.ok and res.worker_id == "new" and res.weight_version == 1
    assert res.token_ids == tuple(want.output_token_ids)
    turns, steps = ray.get(w.telemetry.remote())
    assert turns and {(t.prefill_worker, t.decode_worker) for t in turns} == {("new", "new")}
    assert steps and {s.worker_id for s in steps} == {"new"}
    ray.kill(w)


class _Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.records: list[tuple[str, Any]] = []

    def emit(self, e: Any) -> None:
        self.events.append(e)

    def record(self, kind: str, payload: Any) -> None:
        self.records.append((kind, payload))


def _world(rec: _Recorder, *, park: bool, slots: tuple[str, ...]):
    from pearl.runtime.run_config import RunConfig
    from pearl.runtime.world import RayWorld

    cfg = RunConfig.model_validate(
        {"cluster": {"num_training_gpus": len(slots), "park_borrowed_workers": park}}
    )
    return RayWorld(
        cfg,
        SPEC,
        emit=rec.emit,
        now=time.monotonic,
        on_record=rec.record,
        training_slots=slots,
    )


async def _until(cond, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def _pid(handle: Any) -> int:
    return (await handle.status.remote()).pid


@pytest.mark.ray
def test_world_prestarts_activates_and_parks_on_training_slots(cluster) -> None:
    rec = _Recorder()

    async def run():
        world = _world(rec, park=True, slots=("t1",))
        starts, real_start = [], world.pool.lot._start

        def start(*args, **kwargs):  # the pre-started engine allocates nothing on the device
            starts.append(kwargs.get("released", False))
            return real_start(*args, **kwargs)

        world.pool.lot._start = start
        try:
            assert world.pool.prestart_parked() == 1
            await _until(lambda: ("t1",) in world.pool.lot.parked)
            (pre,) = [p for k, p in rec.records if k == "park"]
            assert pre["worker"] == "parked-t1" and pre["gpus"] == ["t1"]
            pid0 = await _pid(world.pool.lot.parked[("t1",)])
            assert starts == [True]
            world.execute(cmd.InitWorker("w7", ("t1",), Role.COLOCATED, "borrow-1"))
            await _until(lambda: rec.events)
            assert rec.events == [ev.WorkerReady(rec.events[0].time_s, "w7")]
            kinds = [k for k, _ in rec.records]  # warmed up parked, before the activation
            assert kinds.index("park") < kinds.index("warm_up") < kinds.index("activation")
            h = world.workers["w7"]
            status = await h.status.remote()
            assert status.pid == pid0 and status.worker_id == "w7" and not status.released
            assert not world.pool.lot.parked  # taken out of the lot while it serves
            world.execute(cmd.StopWorker("w7"))
            assert "w7" not in world.workers and world.pool.parks_pending(("t1",))
            await _until(lambda: not world.pool.parks_pending(("t1",)))
            again = await world.pool.lot.parked[("t1",)].status.remote()
            assert again.parked and again.released and again.pid == pid0
            # A group cancelled before its worker is activated: it stays parked, no event.
            world.execute(cmd.InitWorker("w8", ("t1",), Role.DECODE, "borrow-2"))
            world.execute(cmd.StopWorker("w8"))
            await asyncio.sleep(0.5)
            await _until(lambda: ("t1",) in world.pool.lot.parked and not world.tasks)
            assert len(rec.events) == 1
            # ... and while its activation call is in flight: parked after the activation.
            world.execute(cmd.InitWorker("w9", ("t1",), Role.DECODE, "borrow-3"))
            while "w9" not in world.pool.activating:
                await asyncio.sleep(0)
            world.execute(cmd.StopWorker("w9"))
            await _until(lambda: ("t1",) in world.pool.lot.parked and not world.tasks)
            last = await world.pool.lot.parked[("t1",)].status.remote()
            assert last.parked and last.released and not last.accepting and last.pid == pid0
            assert len(rec.events) == 1
            return dict(world.counters)
        finally:
            await world.shutdown()

    counters = asyncio.run(run())
    kinds = [k for k, _ in rec.records]
    assert counters["activations"] == 1 and counters["parks"] == kinds.count("park") >= 2
    assert kinds.count("activation") == 1
    (act,) = [p for k, p in rec.records if k == "activation"]
    assert act["worker"] == "w7" and act["gpus"] == ["t1"] and act["activation_ms"] >= 0


@pytest.mark.ray
def test_world_without_parking_starts_and_kills(cluster) -> None:
    import ray

    rec = _Recorder()

    async def run():
        world = _world(rec, park=False, slots=("t2",))
        try:
            assert world.pool.prestart_parked() == 0
            world.execute(cmd.InitWorker("w1", ("t2",), Role.COLOCATED, "borrow-1"))
            await _until(lambda: rec.events)
            h = world.workers["w1"]
            await h.status.remote()
            world.execute(cmd.StopWorker("w1"))
            assert not world.pool.parks_pending(("t2",)) and not world.pool.lot.parked
            return h, dict(world.counters)
        finally:
            await world.shutdown()

    h, counters = asyncio.run(run())
    assert isinstance(rec.events[0], ev.WorkerReady)
    assert counters["parks"] == counters["activations"] == 0
    # ray.kill is asynchronous: a call that reaches the actor before the kill may still be
    # served, so poll until the process is gone (bounded; a live actor fails the test).
    deadline = time.monotonic() + 30
    with pytest.raises(ray.exceptions.RayActorError):
        while time.monotonic() < deadline:
            ray.get(h.status.remote(), timeout=30)
            time.sleep(0.1)


def test_trainer_restores_only_after_the_park_and_before_training() -> None:
    """ReleaseGpus + RestoreTraining while a park is pending: the restore call and the
    return note wait for the park; the restore goes out before training is started; once
    the trainer has restored, the controller hears `TrainingRestored`."""
    from pearl.runtime.lending import TrainingLending

    calls: list[str] = []

    class Remote:
        def __init__(self, name: str) -> None:
            self.name = name

        def remote(self) -> asyncio.Future:
            calls.append(self.name)
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done

    class Trainer:
        restore = Remote("restore")
        release = Remote("release")

    def lending(parks: list[asyncio.Task]) -> TrainingLending:
        pool = type("P", (), {"parks_pending": lambda _s, g: parks, "device_free": {}})()
        d = TrainingLending(
            trainer=Trainer(),
            slots=pool,
            emit=lambda event: calls.append(type(event).__name__),
            now=lambda: 0.0,
            note=lambda kind, reason, **detail: calls.append(kind),
            last_decision=lambda word: "",
            on_returned=lambda: calls.append("train"),
        )
        d.lent = {"t0"}
        return d

    async def run():
        park_done = asyncio.Event()
        park = asyncio.create_task(park_done.wait())
        d = lending([park])
        d.release(cmd.ReleaseGpus(("t0",), "training"))
        d.restore(cmd.RestoreTraining(("t0",)))
        await asyncio.sleep(0.05)
        assert calls == [] and d.lent == {"t0"}  # the park still holds the device
        park_done.set()
        await asyncio.sleep(0.05)
        return d

    d = asyncio.run(run())
    assert calls == ["restore", "return", "train", "TrainingRestored"]
    assert not d.lent and not d.restore_deferred
