"""The paper's evaluation, simulated: `e2e`, `ablation`, `sensitivity`, `ratio`, and
`facts` (the paper's §3 measurements of the world, reproduced), `ladder` (ROLL -> RLBoost+
-> PEARL one mechanism a rung, and where PEARL's lost capacity goes).

Each module has `run(cfg, ..., progress=None) -> ExperimentResult` (a markdown table, bar
plots, and for some a role timeline of one run). `quick_kwargs(name)` shrinks an experiment
for smoke tests and demos.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pearl.sim.experiments import ablation, e2e, facts, ladder, ratio, sensitivity
from pearl.sim.experiments.result import BarPlot, ExperimentResult

EXPERIMENTS: dict[str, Callable[..., ExperimentResult]] = {
    "e2e": e2e.run,
    "ablation": ablation.run,
    "sensitivity": sensitivity.run,
    "ratio": ratio.run,
    "facts": facts.run,
    "ladder": ladder.run,
}

QUICK: dict[str, dict[str, Any]] = {
    "e2e": {"models": ("qwen3-8b",), "traces": ("seg1",), "with_bound": False},
    "ablation": {"budgets": (2,), "duration_s": 400.0},
    "sensitivity": {
        "batches": (8,),
        "max_lens": (16384,),
        "policies": ("roll",),
        "duration_s": 400.0,
    },
    "ratio": {"budgets": (2,), "borrowed": 1, "num_steps": 1},
    "facts": {"models": ("qwen3-8b",), "batches": (32,), "scaling_gpus": (), "seeds": (0,)},
    "ladder": {"models": ("qwen3-8b",), "traces": ("seg1",), "rungs": ("rlboost+", "pearl")},
}


def quick_kwargs(name: str) -> dict[str, Any]:
    return dict(QUICK[name])


def models_run(name: str, configured: str, kwargs: dict[str, Any]) -> tuple[str, ...]:
    """The models experiment `name` simulates with `kwargs`, so that a card or tensor
    parallelism that cannot hold one is refused before any run: `e2e` and `ladder` run
    their `models`; `facts` runs Qwen3-8B (§3.1) and Qwen3-30B-A3B (§3.2) whatever its
    `models` (§3.3); the others the configured model."""
    module = {"e2e": e2e, "ladder": ladder, "facts": facts}.get(name)
    if module is None:
        return (configured,)
    models = tuple(kwargs.get("models", module.MODELS))
    if name == "facts":
        models = tuple(dict.fromkeys((*models, "qwen3-8b", "qwen3-30b-a3b")))
    return models


__all__ = ["EXPERIMENTS", "BarPlot", "ExperimentResult", "models_run", "quick_kwargs"]
