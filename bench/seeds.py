"""PEARL against RLBoost+ over several seeds on the bundled segments, for BENCHMARKS.md.

One seed's throughput difference between two policies is often inside the seed-to-seed
spread (a two-hour run ends with one batch part-way through, and the seed draws the
workload, the costs and the environment latencies), so the comparison that counts is the
mean over seeds. Each cell is `pearl simulate --trace SEG --model M --policies
pearl,rlboost+ --seed S --no-bound`; the figures are whatever the runs give. Besides the
bundled segments, four synthetic two-hour traces (`SYNTHETIC`, from
`pearl.traces.generators`, written to a temporary folder) stress one pattern each.

Rerun: `.venv/bin/python -m bench.seeds` (`--seeds 0,1`, `--no-synthetic`, `--no-write` to
only print).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from itertools import product
from pathlib import Path

from bench._md import machine_line, write_section
from pearl.sim.bound import pipeline_trajectories
from pearl.sim.config import SimConfig
from pearl.sim.policy_run import run_policy
from pearl.traces import generators
from pearl.traces.availability import AvailabilityTrace
from pearl.traces.io import save_json_trace

MODELS = ("qwen3-8b", "qwen3-30b-a3b")
TRACES = ("seg1", "seg2", "seg3")
POLICIES = ("pearl", "rlboost+")
DURATION_S = 7200.0
NOTICE_S = 120.0  # the bundled segments' reclaim notice
SYNTHETIC: dict[str, tuple[str, AvailabilityTrace]] = {
    "abundant": (
        "12 preemptible GPUs throughout",
        generators.constant(12, DURATION_S, name="abundant", reclaim_notice_s=NOTICE_S),
    ),
    "flickering": (
        "Poisson churn, a change every 2 min on average, 2-12 GPUs, steps of up to 3",
        generators.poisson_churn(
            DURATION_S,
            seed=1,
            mean_interval_s=120.0,
            min_gpus=2,
            max_gpus=12,
            max_step=3,
            name="flickering",
            reclaim_notice_s=NOTICE_S,
        ),
    ),
    "draining": (
        "12, 10, 8, 6, 4, 2 GPUs, 20 min each",
        generators.periodic(
            [12, 10, 8, 6, 4, 2], 1200.0, DURATION_S, name="draining", reclaim_notice_s=NOTICE_S
        ),
    ),
    "bursty": (
        "12 and 2 GPUs alternating every 10 min",
        generators.periodic([12, 2], 600.0, DURATION_S, name="bursty", reclaim_notice_s=NOTICE_S),
    ),
}


def _cell(model: str, trace: str, policy: str, seed: int) -> tuple[float, float]:
    """(trajectories per hour, training's wait for returned GPUs in seconds) of one run."""
    cfg = SimConfig().with_updates(
        **{"cluster.model": model, "trace.trace": trace, "seed": seed, "policies": [policy]}
    )
    run = run_policy(cfg, policy, keep_history=False)
    return float(run.summary["trajs_per_hour"]), float(run.summary["training_wait_for_gpus_s"])


def _pipeline_per_hour(model: str, seed: int) -> float:
    """The staleness pipeline's trajectories per hour (`pearl.sim.bound.pipeline_trajectories`:
    every batch at its latency floor); it does not depend on the trace."""
    cfg = SimConfig().with_updates(**{"cluster.model": model, "seed": seed})
    return pipeline_trajectories(cfg, DURATION_S) * 3600.0 / DURATION_S


def _fmt(x: float) -> str:
    return f"{x:g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3", help="comma-separated seeds (0,1,2,3)")
    ap.add_argument("--no-synthetic", action="store_true", help="the bundled segments only")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md")
    args = ap.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="pearl-bench-traces-") as tmp:
        traces = {t: t for t in TRACES}
        if not args.no_synthetic:
            for name, (_, generated) in SYNTHETIC.items():
                path = Path(tmp) / f"{name}.json"
                save_json_trace(generated, path)
                traces[name] = str(path)
        cells = list(product(MODELS, list(traces.values()), POLICIES, seeds))
        floors = list(product(MODELS, seeds))
        with ProcessPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as ex:
            results = dict(zip(cells, ex.map(_cell, *zip(*cells, strict=True)), strict=True))
            pipeline = dict(
                zip(floors, ex.map(_pipeline_per_hour, *zip(*floors, strict=True)), strict=True)
            )
    wall_s = time.time() - t0
    rows = []
    for model, (label, trace) in product(MODELS, traces.items()):
        tph = {p: [results[(model, trace, p, s)][0] for s in seeds] for p in POLICIES}
        wait = {p: [results[(model, trace, p, s)][1] for s in seeds] for p in POLICIES}
        mean = {p: statistics.fmean(tph[p]) for p in POLICIES}
        wins = sum(a > b for a, b in zip(tph["pearl"], tph["rlboost+"], strict=True))
        ties = sum(a == b for a, b in zip(tph["pearl"], tph["rlboost+"], strict=True))
        spread = max(max(v) - min(v) for v in tph.values()) / max(mean.values())
        of_pipeline = [t / pipeline[(model, s)] for t, s in zip(tph["pearl"], seeds, strict=True)]
        rows.append(
            f"| {model} | {label} | {' / '.join(map(_fmt, tph['pearl']))} | "
            f"{' / '.join(map(_fmt, tph['rlboost+']))} | {mean['pearl']:.1f} | "
            f"{mean['rlboost+']:.1f} | {mean['pearl'] / mean['rlboost+']:.3f} | "
            f"{wins}{f' (and {ties} tie)' if ties else ''} of {len(seeds)} | "
            f"{100 * spread:.1f}% | "
            f"{' / '.join(f'{x:.3f}' for x in of_pipeline)} | "
            f"{statistics.fmean(wait['pearl']):.0f} / {statistics.fmean(wait['rlboost+']):.0f} |"
        )
        print(rows[-1])
    if args.no_write:
        return 0
    body = "\n".join(
        [
            "## PEARL vs RLBoost+ over seeds (`python -m bench.seeds`), trajectories/hour",
            "",
            f"Machine: {machine_line()}; {wall_s:.0f} s wall. Two-hour segments, batch 64, "
            f"staleness 1, the default setting; seeds {', '.join(map(str, seeds))} (each seed "
            "draws the workload, the costs and the environment latencies; the trace is the "
            "same). Rerun one cell: `pearl simulate --trace SEG --model M --policies "
            "pearl,rlboost+ --json --no-bound --seed S`. *spread*: the larger of the two "
            "policies' max - min over seeds, relative to the larger mean. The synthetic "
            "traces (reclaim notice 120 s, as the segments): "
            + "; ".join(f"*{name}*: {what}" for name, (what, _) in SYNTHETIC.items())
            + " (`bench/seeds.py`, `SYNTHETIC`). *pearl of pipeline*: PEARL's trajectories "
            "per hour over the staleness pipeline's, each seed's batches at their latency "
            "floor (`pearl.sim.bound.pipeline_trajectories`; "
            + ", ".join(f"{m} {' / '.join(f'{pipeline[(m, s)]:g}' for s in seeds)}" for m in MODELS)
            + " per hour). The bound of `pearl simulate` is the smaller of that and the GPUs' "
            "capacity, so where the GPUs bind PEARL's fraction of the bound is higher than "
            "this column; on the three segments the pipeline binds (`bench:ladder`).",
            "",
            "| model | trace | pearl, per seed | rlboost+, per seed | pearl mean | "
            "rlboost+ mean | pearl / rlboost+ | seeds pearl wins | spread | pearl of "
            "pipeline, per seed | training wait for returned GPUs, s (pearl / rlboost+) |",
            "|---|---|---|---|---:|---:|---:|---|---:|---|---:|",
            *rows,
        ]
    )
    write_section("seeds", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
