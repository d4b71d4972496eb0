"""Benchmark `plan_transition` at 16, 256 and 4,096 GPUs (targets: < 1 ms at 16, < 50 ms at 4,096).

Each case is a realistic reconfiguration: a colocated pool loses a quarter of its
preemptible GPUs and switches to a 1:3 disaggregated split on the rest.

    .venv/bin/python -m bench.plan [--no-write]
"""

from __future__ import annotations

import statistics
import sys
import time

from bench._md import machine_line, write_section
from pearl.control.plan import PDConfig, apply, plan_transition
from pearl.control.state import ClusterState, Gpu, Zone

TARGETS_MS = {16: 1.0, 256: None, 4096: 50.0}


def case(num_gpus: int) -> tuple[ClusterState, PDConfig, list[str]]:
    num_dedicated = max(4, num_gpus // 4)
    gpus = tuple(
        Gpu(f"g{i}", Zone.DEDICATED if i < num_dedicated else Zone.PREEMPTIBLE, f"n{i // 8}")
        for i in range(num_gpus)
    )
    state = ClusterState(gpus=gpus)
    state = apply(
        state, plan_transition(state, PDConfig.colocated(num_gpus), [g.gpu_id for g in gpus])
    )
    lost = set(
        [g.gpu_id for g in gpus if g.zone is Zone.PREEMPTIBLE][: (num_gpus - num_dedicated) // 4]
    )
    usable = [g.gpu_id for g in gpus if g.gpu_id not in lost]
    p = max(1, len(usable) // 4)
    return state, PDConfig.disaggregated(p, len(usable) - p), usable


def measure(num_gpus: int, repeats: int) -> float:
    state, target, usable = case(num_gpus)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        plan_transition(state, target, usable)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    rows = []
    for n, reps in ((16, 200), (256, 50), (4096, 10)):
        ms = measure(n, reps)
        target = TARGETS_MS[n]
        verdict = (
            "" if target is None else ("meets" if ms < target else "MISSES") + f" < {target:g} ms"
        )
        rows.append(f"| {n:,} | {ms:.3f} | {verdict} |")
        print(f"plan_transition at {n} GPUs: {ms:.3f} ms (median of {reps}) {verdict}")
    body = "\n".join(
        [
            "## Planner: `plan_transition`",
            "",
            f"Median wall time of one plan (colocated pool loses 1/4 of its preemptible GPUs and "
            f"switches to 1:3 disaggregation). Machine: {machine_line()}.",
            "Rerun: `.venv/bin/python -m bench.plan`.",
            "",
            "| GPUs | ms per plan | target |",
            "|---:|---:|---|",
            *rows,
        ]
    )
    if "--no-write" not in sys.argv:
        write_section("plan", body)


if __name__ == "__main__":
    main()
