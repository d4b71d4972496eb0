"""Speed of the simulator's physics alone: inference workers advanced segment by segment.

Runs back-to-back rollout batches (64 trajectories) of the calibration loop
(`pearl.sim.calibration.colocated_mix`: workers + a router, no controller) until two
simulated hours have passed, and reports simulated seconds per CPU second, and how many
worker segments stand for how many model iterations. The whole simulator adds the
controller, trainer and trace on top (see its own benchmark).

    .venv/bin/python -m bench.sim_physics [--no-write]
"""

from __future__ import annotations

import sys
import time

from bench._md import machine_line, write_section
from pearl.sim.calibration import colocated_mix

CASES = [
    ("qwen3-8b", 16, "sticky"),
    ("qwen3-8b", 4, "least_loaded"),
    ("qwen3-30b-a3b", 8, "least_loaded"),
]
HORIZON_S = 7200.0


def measure(model: str, workers: int, router: str) -> dict[str, float]:
    sim_s = cpu_s = 0.0
    turns = segments = iterations = 0
    seed = 0
    while sim_s < HORIZON_S:
        t0 = time.process_time()
        m = colocated_mix(model=model, num_workers=workers, router=router, seed=seed)
        cpu_s += time.process_time() - t0
        sim_s += m.makespan_s
        turns += m.num_turns
        segments += m.num_segments
        iterations += m.num_iterations
        seed += 1
    return {
        "batches": seed,
        "sim_s": sim_s,
        "cpu_s": cpu_s,
        "speed": sim_s / cpu_s,
        "us_per_segment": 1e6 * cpu_s / segments,
        "segments_per_turn": segments / turns,
        "iterations_per_segment": iterations / segments,
    }


def main() -> None:
    rows = []
    for model, workers, router in CASES:
        r = measure(model, workers, router)
        rows.append((model, workers, router, r))
        print(
            f"{model:14s} {workers:2d} workers {router:12s}: {r['sim_s']:7.0f} s simulated in "
            f"{r['cpu_s']:5.2f} CPU s = {r['speed']:6.0f}x real time; "
            f"{r['us_per_segment']:.0f} us/segment, {r['segments_per_turn']:.1f} segments/turn, "
            f"{r['iterations_per_segment']:.0f} iterations/segment"
        )
    if "--no-write" in sys.argv:
        return
    lines = [
        "## Simulator physics alone (`python -m bench.sim_physics`)",
        "",
        f"Machine: {machine_line()} (shared and noisy; CPU time measured). Back-to-back",
        "batches of 64 trajectories for two simulated hours on colocated workers with a",
        "router, no controller. A segment is a run of iterations advanced in one step.",
        "",
        "| model | workers | router | simulated s | CPU s | x real time | us/segment "
        "| segments/turn | iterations/segment |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model, workers, router, r in rows:
        lines.append(
            f"| {model} | {workers} | {router} | {r['sim_s']:.0f} | {r['cpu_s']:.2f} "
            f"| {r['speed']:.0f} | {r['us_per_segment']:.0f} | {r['segments_per_turn']:.1f} "
            f"| {r['iterations_per_segment']:.0f} |"
        )
    write_section("sim_physics", "\n".join(lines))


if __name__ == "__main__":
    main()
