"""Sensitivity to the rollout batch size and the trajectory-length limit (paper §6.4)."""

from __future__ import annotations

from pearl.sim.compare import default_jobs, run_simulation
from pearl.sim.config import SimConfig
from pearl.sim.experiments.result import BarPlot, ExperimentResult
from pearl.sim.policy_run import Progress

BATCHES = (32, 64, 128)
MAX_LENS = (16384, 32768, 65536)
POLICIES = ("pearl", "rlboost+", "roll", "roll-large")


def run(
    cfg: SimConfig,
    *,
    batches: tuple[int, ...] = BATCHES,
    max_lens: tuple[int, ...] = MAX_LENS,
    policies: tuple[str, ...] = POLICIES,
    duration_s: float = 3600.0,
    progress: Progress | None = None,
) -> ExperimentResult:
    settings = [("batch", b, {"rollout.batch_size": b}) for b in batches]
    settings += [("max len", m, {"rollout.max_context_tokens": m}) for m in max_lens]
    rows = []
    groups = []
    values: dict[str, list[float]] = {p: [] for p in policies}
    for knob, value, upd in settings:
        c = cfg.with_updates(**upd, **{"policies": list(policies), "trace.duration_s": duration_s})
        res = run_simulation(c, progress=progress, with_bound=False, jobs=default_jobs())
        groups.append(f"{knob} {value}")
        for r in res.runs:
            s = r.summary
            rows.append(
                {
                    "knob": knob,
                    "value": value,
                    "policy": r.name,
                    "traj/h": s["trajs_per_hour"],
                    "tokens/s": s["tokens_per_s"],
                    "makespan s": s["mean_makespan_s"],
                }
            )
            values[r.name].append(s["tokens_per_s"])
    return ExperimentResult(
        name="sensitivity",
        title="Sensitivity to batch size and length limit",
        columns=["knob", "value", "policy", "traj/h", "tokens/s", "makespan s"],
        rows=rows,
        notes=[
            (
                f"trace {cfg.trace.trace}"
                if cfg.trace.static_gpus is None
                else f"a static pool of {cfg.trace.static_gpus} GPUs (no trace)"
            )
            + f", {duration_s:.0f} simulated seconds per run; one knob "
            f"varies at a time around batch {cfg.rollout.batch_size}, length "
            f"{cfg.rollout.max_context_tokens}."
        ],
        bars=[
            BarPlot(
                "sensitivity.png",
                "Tokens per second",
                "tokens/s",
                tuple(groups),
                {p: tuple(v) for p, v in values.items()},
            )
        ],
    )
