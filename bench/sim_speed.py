"""Simulator speed: simulated seconds per wall (and CPU) second, and how cost grows.

1. The headline: a two-hour segment (seg1), batch 64, Qwen3-8B, one policy at a time
   (target >= 500x real time).
2. Growth with the batch size (static budget, fixed GPUs) and with the number of GPUs
   (static budget, fixed batch), on shorter runs.

Both wall time and process CPU time are reported: on a shared machine wall time includes
waiting for a core, CPU time does not. Rerun: `.venv/bin/python -m bench.sim_speed`
(`--quick` for a short smoke run that does not touch BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import time

from bench._md import machine_line, write_section
from pearl.sim.config import SimConfig
from pearl.sim.policy_run import run_policy


def measure(cfg: SimConfig, policy: str) -> dict[str, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    run = run_policy(cfg, policy, keep_history=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    sim_s = run.duration_s
    return {
        "sim_s": sim_s,
        "wall_s": wall,
        "cpu_s": cpu,
        "x_wall": sim_s / wall,
        "x_cpu": sim_s / cpu,
        "events": run.log.num_events,
        "trajs": run.summary["trajectories"],
        "us_per_event_cpu": 1e6 * cpu / max(1, run.log.num_events),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short runs, no BENCHMARKS.md update")
    args = ap.parse_args(argv)
    base = SimConfig()
    head_s = 600.0 if args.quick else 7200.0
    scale_s = 300.0 if args.quick else 1200.0
    headline = []
    for policy in ("roll", "rlboost+", "pearl"):
        cfg = base.with_updates(**{"trace.duration_s": head_s})
        r = measure(cfg, policy)
        headline.append((policy, r))
        print(
            f"{policy:9s} seg1 {r['sim_s']:.0f}s: {r['x_wall']:.0f}x wall, {r['x_cpu']:.0f}x CPU,"
            f" {r['events']} events, {r['us_per_event_cpu']:.0f} us CPU/event"
        )
    by_batch = []
    for batch in (32, 64, 128):
        cfg = base.with_updates(
            **{"trace.static_gpus": 8, "trace.duration_s": scale_s, "rollout.batch_size": batch}
        )
        r = measure(cfg, "fixed:colocated")
        by_batch.append((batch, r))
        print(f"batch {batch:3d} on 8 GPUs: {r['x_cpu']:.0f}x CPU, {r['events']} events")
    by_gpus = []
    for gpus in (4, 8, 16):
        cfg = base.with_updates(**{"trace.static_gpus": gpus, "trace.duration_s": scale_s})
        r = measure(cfg, "fixed:colocated")
        by_gpus.append((gpus, r))
        print(f"{gpus:2d} GPUs, batch 64: {r['x_cpu']:.0f}x CPU, {r['events']} events")
    if args.quick:
        return 0
    lines = [
        "## Simulator speed: simulated seconds per second",
        "",
        f"Machine: {machine_line()}, shared with other jobs while measured (wall time includes "
        "waiting for a core; CPU time is the process's own). Rerun: "
        "`.venv/bin/python -m bench.sim_speed`. Target: >= 500x real time for a two-hour "
        "segment, batch 64, Qwen3-8B.",
        "",
        "| policy | simulated s | wall s | CPU s | x real (wall) | x real (CPU) | events |"
        " trajectories | us CPU / event |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for policy, r in headline:
        lines.append(
            f"| {policy} | {r['sim_s']:.0f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
            f"{r['x_wall']:.0f} | {r['x_cpu']:.0f} | {r['events']} | {r['trajs']} | "
            f"{r['us_per_event_cpu']:.0f} |"
        )
    lines += [
        "",
        f"Growth (static budget, `fixed:colocated`, {scale_s:.0f} simulated s):",
        "",
        "| setting | CPU s | x real (CPU) | events | CPU s relative |",
        "|---|---:|---:|---:|---:|",
    ]
    ref_b = by_batch[0][1]["cpu_s"]
    for batch, r in by_batch:
        lines.append(
            f"| batch {batch}, 8 GPUs | {r['cpu_s']:.1f} | {r['x_cpu']:.0f} | "
            f"{r['events']} | {r['cpu_s'] / ref_b:.2f} |"
        )
    ref_g = by_gpus[0][1]["cpu_s"]
    for gpus, r in by_gpus:
        lines.append(
            f"| {gpus} GPUs, batch 64 | {r['cpu_s']:.1f} | {r['x_cpu']:.0f} | "
            f"{r['events']} | {r['cpu_s'] / ref_g:.2f} |"
        )
    write_section("sim_speed", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
