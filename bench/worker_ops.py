"""Rollout-worker operations in milliseconds: worker start, role change, and friends.

* worker start: `start_worker(...)` until `ready()` answers (a new Ray worker process,
  imports, engine build with the tiny model), vs. building the same engine in-process;
* role change: `set_role` round trip from the driver, on an idle worker and on a worker
  decoding a batch (the change waits for the engine step in progress to end);
* interrupt of a decoding batch, release/restore of device state, a weight-snapshot pull.

All on one local Ray node, tiny Qwen3-architecture model (2 layers, hidden 64), CPU.

    .venv/bin/python -m bench.worker_ops [--no-write] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench._md import machine_line, write_section
from pearl.runtime.engine import SamplingParams
from pearl.runtime.worker.api import EngineSpec, TurnRequest

SPEC = EngineSpec(seed=0, num_kv_blocks=512)


def ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f}"


def busy_batch(worker, tag: str, n: int = 8) -> list:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=600)
    reqs = [TurnRequest(f"{tag}{i}", 0, tuple(range(1, 40)), sampling) for i in range(n)]
    return [worker.generate.remote(r) for r in reqs]


def wait_steps(worker, num_steps: int) -> None:
    import ray

    start = ray.get(worker.status.remote()).num_engine_steps
    deadline = time.time() + 60
    while ray.get(worker.status.remote()).num_engine_steps < start + num_steps:
        if time.time() > deadline:
            raise RuntimeError("the worker does not step: were the requests refused?")
        time.sleep(0.005)


def run(repeats: int) -> dict[str, str]:
    import ray

    from pearl.runtime.local_cluster import LocalCluster
    from pearl.runtime.snapshots import get_registry, publish_weights
    from pearl.runtime.worker.rollout_worker import start_worker

    out: dict[str, str] = {}
    builds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        SPEC.build()
        builds.append(time.perf_counter() - t0)
    out["engine build, in-process"] = ms(builds)

    cluster = LocalCluster(head_cpus=2, head_gpu_ids=tuple(f"s{i}" for i in range(repeats + 1)))
    cluster.connect()
    try:
        starts, in_actor = [], []
        for i in range(repeats):
            t0 = time.perf_counter()
            h = start_worker(f"w{i}", "colocated", (f"s{i}",), SPEC)
            status = ray.get(h.ready.remote())
            starts.append(time.perf_counter() - t0)
            in_actor.append(status.engine_build_s)
            ray.kill(h)
        out["worker start (new actor until ready)"] = ms(starts)
        out["(of which engine build inside the actor)"] = ms(in_actor)

        w = start_worker("bench", "colocated", (f"s{repeats}",), SPEC)
        ray.get(w.ready.remote())
        roles = ["prefill", "decode", "colocated"]
        idle = []
        for i in range(3 * repeats):
            t0 = time.perf_counter()
            ray.get(w.set_role.remote(roles[i % 3]))
            idle.append(time.perf_counter() - t0)
        out["role change, idle worker"] = ms(idle)

        busy, steps = [], []
        for i in range(repeats):
            refs = busy_batch(w, f"r{i}-")
            wait_steps(w, 5)
            t0 = time.perf_counter()
            ray.get(w.set_role.remote(roles[i % 2]))  # prefill or decode
            busy.append(time.perf_counter() - t0)
            ray.get(w.set_role.remote("colocated"))  # admitted turns kept their role
            _, recs = ray.get(w.telemetry.remote())
            steps += [r.step_time_s for r in recs if r.batch_size == 8]
            ray.get(w.interrupt.remote())
            ray.get(refs)
        out["role change, 8 turns decoding"] = ms(busy)
        out["(one engine step of that batch)"] = ms(steps)

        interrupts, releases, restores = [], [], []
        for i in range(repeats):
            refs = busy_batch(w, f"i{i}-")
            wait_steps(w, 5)
            t0 = time.perf_counter()
            got = ray.get(w.interrupt.remote())
            interrupts.append(time.perf_counter() - t0)
            assert len(got) == 8 and all(r.token_ids for r in got)
            ray.get(refs)
            t0 = time.perf_counter()
            ray.get(w.release.remote())
            releases.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ray.get(w.restore.remote())
            restores.append(time.perf_counter() - t0)
        out["interrupt 8 decoding turns (prefixes returned)"] = ms(interrupts)
        out["release device state"] = ms(releases)
        out["restore device state"] = ms(restores)

        registry = get_registry()
        weights = EngineSpec(seed=1).build().state_dict()
        syncs = []
        for v in range(1, repeats + 1):
            publish_weights(registry, weights, v)
            t0 = time.perf_counter()
            ray.get(w.sync_weights.remote(v))
            syncs.append(time.perf_counter() - t0)
        out["weight snapshot pull + load (tiny model)"] = ms(syncs)
    finally:
        cluster.shutdown()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="Do not update BENCHMARKS.md.")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    results = run(args.repeats)
    for name, value in results.items():
        print(f"{name:>48}: {value} ms")
    rows = "\n".join(f"| {name} | {value} |" for name, value in results.items())
    body = f"""## Rollout-worker operations

Median milliseconds over {args.repeats} runs (role change on an idle worker: {3 * args.repeats}), timed from the driver (actor-call round trip included) on one local Ray node; tiny Qwen3-architecture model (2 layers, hidden 64) on CPU, one torch thread per worker. A worker start is a new Ray worker process: process spawn and the Python, Ray and torch imports dominate it here (the rest of the row is the engine build inside the actor). A role change is in place (no restart); with a batch decoding it waits for the engine step in progress, so it costs about one step. Machine: {machine_line()}, shared with other jobs while measured.
Rerun: `.venv/bin/python -m bench.worker_ops`.

| operation | ms |
|---|---:|
{rows}
"""
    if not args.no_write:
        write_section("worker_ops", body)
        print("BENCHMARKS.md updated (section worker_ops).")


if __name__ == "__main__":
    main()
