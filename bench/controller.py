"""Benchmark `Controller.handle`: microseconds per event on a steady pipeline and per
urgent reclaim, at 16 GPUs (batch 64) and 256 GPUs (batch 1,024).

A turn cycle is two events (`TrajectoryReady` -> route, `TurnFinished`); a reclaim takes a
quarter of the preemptible workers with their requests in flight (interrupt, stop,
release, re-plan, re-route). Every `handle` also checks its invariants (all of them after
an elastic event, the touched trajectories after a trajectory event).

    .venv/bin/python -m bench.controller [--no-write]
"""

from __future__ import annotations

import statistics
import sys
import time

from bench._md import machine_line, write_section
from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.controller import Controller
from pearl.control.state import ClusterState, Gpu, Zone


def booted(num_gpus: int, batch: int) -> Controller:
    num_dedicated = max(4, num_gpus // 4)
    state = ClusterState(
        gpus=tuple(Gpu(f"d{i}", Zone.DEDICATED, f"n{i // 8}") for i in range(num_dedicated))
    )
    ctl = Controller("pearl", state=state, batch_size=batch, group_size=8)
    out = ctl.handle(E.Started(0.0))
    offer = tuple(
        Gpu(f"p{i}", Zone.PREEMPTIBLE, f"s{i // 8}") for i in range(num_gpus - num_dedicated)
    )
    for t, cmds in ((1.0, out), (2.0, None)):
        if cmds is None:
            cmds = ctl.handle(E.GpusOffered(t, offer, None))
        synced = []
        for c in cmds:
            if isinstance(c, C.InitWorker):
                synced += ctl.handle(E.WorkerReady(t, c.worker_id))
        for c in synced:
            if isinstance(c, C.SyncWeights):
                ctl.handle(E.WeightsSynced(t, c.worker_id, c.version))
    return ctl


def turn_cycles(ctl: Controller, num_events: int) -> float:
    """Median microseconds per event over `num_events` ready/finish events."""
    t = 10.0
    times: list[float] = []
    trajs = [tr.traj_id for tr in ctl.book.step_trajs(0)]
    while len(times) < num_events:
        for tid in trajs:
            t += 0.001
            t0 = time.perf_counter()
            ctl.handle(E.TrajectoryReady(t, tid))
            times.append(time.perf_counter() - t0)
        for tid in trajs:
            tr = ctl.book.get(tid)
            assert tr is not None and tr.decode_worker is not None
            t += 0.001
            t0 = time.perf_counter()
            ctl.handle(E.TurnFinished(t, tid, tr.decode_worker))
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def reclaim(num_gpus: int, batch: int) -> float:
    ctl = booted(num_gpus, batch)
    for tr in ctl.book.step_trajs(0):
        ctl.handle(E.TrajectoryReady(5.0, tr.traj_id))
    held = [g for g in ctl.state.gpus_in(Zone.PREEMPTIBLE)]
    lost = tuple(held[: max(1, len(held) // 4)])
    t0 = time.perf_counter()
    out = ctl.handle(E.ReclaimNotice(6.0, lost, 36.0))
    dt = time.perf_counter() - t0
    assert any(isinstance(c, C.ReleaseGpus) for c in out)
    return dt * 1e6


def main() -> None:
    rows = []
    for num_gpus, batch, events in ((16, 64, 2000), (256, 1024, 4000)):
        us = turn_cycles(booted(num_gpus, batch), events)
        rec = statistics.median(reclaim(num_gpus, batch) for _ in range(5))
        rows.append(f"| {num_gpus} | {batch:,} | {us:.0f} | {rec / 1e3:.1f} |")
        print(f"{num_gpus} GPUs, batch {batch}: {us:.0f} us/event, reclaim {rec / 1e3:.1f} ms")
    body = "\n".join(
        [
            "## Controller: `handle(event)`",
            "",
            "Median wall time per event of a steady turn cycle (route on ready, finish), and of",
            "one reclaim of a quarter of the preemptible workers with requests in flight; each",
            "call checks its invariants (all after an elastic event, the touched trajectories",
            f"after a trajectory event). Machine: {machine_line()} (shared, noisy).",
            "Rerun: `.venv/bin/python -m bench.controller`.",
            "",
            "| GPUs | batch | us per turn event | ms per reclaim |",
            "|---:|---:|---:|---:|",
            *rows,
        ]
    )
    if "--no-write" not in sys.argv:
        write_section("controller", body)


if __name__ == "__main__":
    main()
