"""End-to-end throughput: both models x three trace segments x policies (paper §6.2)."""

from __future__ import annotations

from pearl.sim.compare import default_jobs, run_simulation
from pearl.sim.config import SimConfig
from pearl.sim.experiments.result import BarPlot, ExperimentResult, model_files_note
from pearl.sim.policy_run import Progress
from pearl.specs.hardware import model_labels

MODELS = ("qwen3-8b", "qwen3-30b-a3b")
TRACES = ("seg1", "seg2", "seg3")
POLICIES = ("pearl", "rlboost+", "roll", "roll-large")


def run(
    cfg: SimConfig,
    *,
    models: tuple[str, ...] = MODELS,
    traces: tuple[str, ...] = TRACES,
    policies: tuple[str, ...] = POLICIES,
    with_bound: bool = True,
    progress: Progress | None = None,
) -> ExperimentResult:
    rows = []
    timeline = None
    values: dict[str, list[float]] = {p: [] for p in policies}
    groups = []
    labels = model_labels(models)
    for model in models:
        label = labels[model]
        for trace in traces:
            c = cfg.with_updates(
                **{
                    "cluster.model": model,
                    "trace.trace": trace,
                    "trace.static_gpus": None,  # each row is its trace, never a static pool
                    "policies": list(policies),
                }
            )
            res = run_simulation(c, progress=progress, with_bound=with_bound, jobs=default_jobs())
            groups.append(f"{label} {trace}")
            for r in res.runs:
                s = r.summary
                rows.append(
                    {
                        "model": label,
                        "trace": trace,
                        "policy": r.name,
                        "traj/h": s["trajs_per_hour"],
                        "tokens/s": s["tokens_per_s"],
                        "steps/h": s["train_steps_per_hour"],
                        "of bound": s["fraction_of_bound"],
                        "makespan s": s["mean_makespan_s"],
                        "GPU-h": s["gpu_hours"]["total"],
                        "reconfigs": sum(s["reconfigurations"].values()),
                    }
                )
                values[r.name].append(s["trajs_per_hour"])
                if timeline is None and r.name == policies[0]:
                    timeline = (f"{r.name} on {trace} ({label})", r.log.history, r.duration_s)
            if res.bound is not None:
                rows.append(
                    {
                        "model": label,
                        "trace": trace,
                        "policy": "bound",
                        "traj/h": res.bound.trajs_per_hour,
                        "of bound": 1.0,
                    }
                )
    return ExperimentResult(
        name="e2e",
        title="End-to-end throughput on preemptible-GPU traces",
        columns=[
            "model",
            "trace",
            "policy",
            "traj/h",
            "tokens/s",
            "steps/h",
            "of bound",
            "makespan s",
            "GPU-h",
            "reconfigs",
        ],
        rows=rows,
        notes=[
            f"batch {cfg.rollout.batch_size}, length limit {cfg.rollout.max_context_tokens}, "
            f"seed {cfg.seed}; 'of bound' is trajectories as a fraction of the upper bound.",
            *model_files_note(labels),
        ],
        bars=[
            BarPlot(
                "e2e_throughput.png",
                "Trajectories per hour",
                "traj/h",
                tuple(groups),
                {p: tuple(v) for p, v in values.items()},
            )
        ],
        timeline=timeline,
    )
