"""The decision engine against the simulator (`pearl validate`), figures for BENCHMARKS.md.

Targets: median relative makespan error under 10%, and the engine's chosen
configuration within 1% of the brute-force best in at least 90% of the grid. The figures
are reported whatever they are. Rerun: `.venv/bin/python -m bench.sim_validate`.
"""

from __future__ import annotations

import argparse
import time

from bench._md import machine_line, write_section
from pearl.sim.config import SimConfig
from pearl.sim.validate import validate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny grid, no BENCHMARKS.md update")
    args = ap.parse_args(argv)
    # the grid: budgets 4-16 GPUs, batches 32-128
    budgets, batches = ((2,), (8,)) if args.quick else ((4, 8, 12, 16), (32, 64, 96, 128))
    sections = []
    for model in ("qwen3-8b",) if args.quick else ("qwen3-8b", "qwen3-30b-a3b"):
        cfg = SimConfig().with_updates(**{"cluster.model": model})
        t0 = time.process_time()
        doc = validate(cfg, budgets=budgets, batches=batches, num_steps=2).to_json()
        cpu = time.process_time() - t0
        within = doc["choice_within_1pct"]
        print(
            f"{model}: median {doc['median_rel_error']:.3f}, p90 {doc['p90_rel_error']:.3f}, "
            f"chosen within 1% in {within:.2f} of {len(doc['choices'])} cases ({cpu:.0f} s CPU)"
        )
        rows = [
            f"| {c['num_gpus']} | {c['batch_size']} | {c['chosen']} | {c['best']} | "
            f"{c['chosen_simulated_s']:.1f} | {c['best_simulated_s']:.1f} | "
            f"{'yes' if c['within_1pct'] else 'no'} |"
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
                    f" {len(doc['choices'])} cases (target >= 90%). Largest errors: "
                    + "; ".join(
                        f"{p['config']} at {p['num_gpus']} GPUs, batch {p['batch_size']}: "
                        f"{100 * p['rel_error']:.0f}%"
                        for p in worst
                    )
                    + ".",
                    "",
                    "| GPUs | batch | chosen | best (simulated) | chosen s | best s | within 1% |",
                    "|---:|---:|---|---|---:|---:|---|",
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
            "disaggregated, 4 GPUs); each grid point is simulated for 2 rollout steps with one "
            "batch in flight and compared with `pearl.control.makespan.predict`.",
            "",
            "\n\n".join(sections),
        ]
    )
    write_section("sim_validate", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
