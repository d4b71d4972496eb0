"""Ratio selection (paper §6.5): the decision engine's chosen configuration against the best
one found by brute-force simulation, at several budgets, with and without borrowed GPUs.

"With borrowing" adds `borrowed` GPUs to the budget: a quarter of the 16 training GPUs by
default, about the share of time they idle in the paper's setting (docs/simulator-model.md).
"""

from __future__ import annotations

from typing import Any

from pearl.sim.config import SimConfig
from pearl.sim.experiments.result import BarPlot, ExperimentResult
from pearl.sim.policy_run import Progress
from pearl.sim.validate import validate

BUDGETS = (4, 8, 12)


def run(
    cfg: SimConfig,
    *,
    budgets: tuple[int, ...] = BUDGETS,
    borrowed: int = 4,
    num_steps: int = 2,
    progress: Progress | None = None,
) -> ExperimentResult:
    rows: list[dict[str, Any]] = []
    for label, extra in (("no", 0), ("yes", borrowed)):
        res = validate(
            cfg,
            budgets=tuple(n + extra for n in budgets),
            batches=(cfg.rollout.batch_size,),
            num_steps=num_steps,
            progress=progress,
        )
        for c in res.choices:
            rows.append(
                {
                    "GPUs": c.num_gpus,
                    "borrowing": label,
                    "chosen": c.chosen,
                    "best": c.best,
                    "chosen makespan s": c.chosen_s,
                    "best makespan s": c.best_s,
                    "gap": c.chosen_s / c.best_s - 1.0,
                    "within 1%": c.within_1pct,
                }
            )
    groups = tuple(f"{r['GPUs']} ({'b' if r['borrowing'] == 'yes' else 'nb'})" for r in rows)
    return ExperimentResult(
        name="ratio",
        title="Chosen vs brute-force best PD configuration",
        columns=[
            "GPUs",
            "borrowing",
            "chosen",
            "best",
            "chosen makespan s",
            "best makespan s",
            "gap",
            "within 1%",
        ],
        rows=rows,
        notes=[
            f"batch {cfg.rollout.batch_size}; each configuration simulated for {num_steps} "
            "rollout step(s) with one batch in flight; the engine's profile is learned from "
            "simulated telemetry by the runtime tracker."
        ],
        bars=[
            BarPlot(
                "ratio.png",
                "Makespan: chosen vs best",
                "s",
                groups,
                {
                    "chosen": tuple(r["chosen makespan s"] for r in rows),
                    "best": tuple(r["best makespan s"] for r in rows),
                },
            )
        ],
    )
