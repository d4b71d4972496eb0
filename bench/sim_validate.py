"""The decision engine against the simulator (`pearl validate`), figures for BENCHMARKS.md.

Targets: median relative makespan error under 10%, and the engine's chosen
configuration within 1% of the brute-force best in at least 90% of the grid. The figures
are reported whatever they are. Rerun: `.venv/bin/python -m bench.sim_validate`; with
`--keep DIR` each finished grid point is kept in DIR (the run store `pearl validate --out`
uses) and the same command again goes on from them.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench._md import machine_line, write_section
from pearl.sim import run_store
from pearl.sim.config import SimConfig
from pearl.sim.validate import validate

# Rollout steps per grid point. Steps differ by 5-10% (which trajectory ends last), so at 6
# steps two configurations' difference carries 2-5% of noise, more than the 1% the choice
# is judged by; 24 steps halve it. The engine's profile is still learned from 6 steps of
# each of its two runs (what the tracker has after a short run).
STEPS = 24
PROFILE_STEPS = 6


def _validate(
    model: str, budgets: tuple, batches: tuple, steps: int, keep: str | None
) -> tuple[dict, float]:
    cfg = SimConfig().with_updates(**{"cluster.model": model})
    store = None if keep is None else run_store.RunStore(Path(keep))
    t0 = time.process_time()
    with run_store.use(store):
        doc = validate(
            cfg,
            budgets=budgets,
            batches=batches,
            num_steps=steps,
            profile_steps=min(steps, PROFILE_STEPS),
        ).to_json()
    return doc, time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny grid, no BENCHMARKS.md update")
    ap.add_argument("--json", metavar="PATH", help="also write both models' documents here")
    ap.add_argument(
        "--keep",
        metavar="DIR",
        help="keep each finished grid point in DIR; the same command again goes on from them",
    )
    args = ap.parse_args(argv)
    # the grid: budgets 4-16 GPUs, batches 32-128
    budgets, batches = ((2,), (8,)) if args.quick else ((4, 8, 12, 16), (32, 64, 96, 128))
    models = ("qwen3-8b",) if args.quick else ("qwen3-8b", "qwen3-30b-a3b")
    steps = 2 if args.quick else STEPS
    # one process per model (the simulations are independent; the CPU time is per model)
    with ProcessPoolExecutor(max_workers=max(1, min(len(models), os.cpu_count() or 1))) as ex:
        futures = [ex.submit(_validate, m, budgets, batches, steps, args.keep) for m in models]
        results: list[tuple[dict[str, Any], float]] = [f.result() for f in futures]
    if args.json:
        docs = {m: doc for m, (doc, _) in zip(models, results, strict=True)}
        Path(args.json).write_text(json.dumps(docs, indent=1) + "\n")
    sections = []
    for model, (doc, cpu) in zip(models, results, strict=True):
        within = doc["choice_within_1pct"]
        or_noise = doc["choice_within_1pct_or_noise"]
        print(
            f"{model}: median {doc['median_rel_error']:.3f}, p90 {doc['p90_rel_error']:.3f}, "
            f"chosen within 1% in {within:.2f} of {len(doc['choices'])} cases ({cpu:.0f} s CPU)"
        )
        rows = [
            f"| {c['num_gpus']} | {c['batch_size']} | {c['chosen']} | {c['best']} | "
            f"{c['chosen_simulated_s']:.1f} | {c['best_simulated_s']:.1f} | "
            f"{'yes' if c['within_1pct'] else 'no'} | {100 * c['gap']:+.1f}% | "
            f"{100 * c['noise']:.1f}% |"
            for c in doc["choices"]
        ]
        worst = sorted(doc["points"], key=lambda p: -p["rel_error"])[:3]
        sections.append(
            "\n".join(
                [
                    f"### {model}",
                    "",
                    f"{doc['num_points']} grid points (budgets {', '.join(map(str, budgets))} GPUs;"
                    f" batches {', '.join(map(str, batches))}; colocated and every P:D split). "
                    f"Median relative error **{100 * doc['median_rel_error']:.1f}%** (target"
                    f" < 10%), p90 **{100 * doc['p90_rel_error']:.1f}%**; chosen configuration"
                    f" within 1% of the best simulated one in **{100 * within:.0f}%** of"
                    f" {len(doc['choices'])} cases (target >= 90%); within 1% or inside the"
                    f" simulation's noise in **{100 * or_noise:.0f}%**. Largest errors: "
                    + "; ".join(
                        f"{p['config']} at {p['num_gpus']} GPUs, batch {p['batch_size']}: "
                        f"{100 * p['rel_error']:.0f}%"
                        for p in worst
                    )
                    + ".",
                    "",
                    "| GPUs | batch | chosen | best (simulated) | chosen s | best s | within 1% "
                    "| gap | noise |",
                    "|---:|---:|---|---|---:|---:|---|---:|---:|",
                    *rows,
                ]
            )
        )
    if args.quick:
        return 0
    body = "\n".join(
        [
            "## Decision engine vs simulator (`pearl validate`)",
            "",
            f"Machine: {machine_line()}. Rerun: `.venv/bin/python -m bench.sim_validate`. The "
            "runtime tracker learns the profile from two short simulated runs (colocated and "
            f"disaggregated, 4 GPUs, {PROFILE_STEPS} rollout steps each); each grid point is "
            f"simulated for {STEPS} rollout steps with one "
            "batch in flight, routed as `pearl` routes (each turn to a less loaded worker), "
            "and compared with `pearl.control.makespan.predict`. *gap*: how "
            "much slower the chosen configuration simulated than the best; *noise*: two "
            "standard errors of their step-by-step difference (every configuration runs the "
            "same sampled steps, and steps differ by 5-10%: which trajectory ends last "
            "depends on the configuration); a gap inside the noise is a choice the "
            f"simulation cannot tell from the best at {STEPS} steps.",
            "",
            "\n\n".join(sections),
        ]
    )
    write_section("sim_validate", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
