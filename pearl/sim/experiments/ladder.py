"""Where PEARL's throughput comes from: one mechanism at a time, from ROLL to PEARL.

On each model and trace segment, the rungs run on the same world (same trace, same
trajectories): `roll` (the reserved pool) -> `roll-large` (a fixed pool at the segment's
mean) -> `rlboost+` (preemptible instances one by one, budgeted borrowing) ->
`ladder-expansion` (+ PEARL's gated expansion, one group admitted atomically) ->
`ladder-pd` (+ PD decisions by the decision engine) -> `pearl` (+ gated borrowing). Each
rung's gain is against the rung below it.

For PEARL, the gap between what its GPUs could have produced at the best static per-GPU
rate r (the bound's rate) and what it produced is split into:

* idle GPUs: rollout GPU-seconds no worker held (offers not taken, GPUs between a reclaim
  and a new worker) and training GPU-seconds the trainer idled that were not borrowed;
* transitions: GPU-seconds held by workers that served nothing (initialising, syncing,
  draining, parked);
* latency floor: active GPU-seconds at r minus the same at r_n, the best static per-GPU
  rate at PEARL's mean active pool size n (more GPUs on one batch return less: the
  batch's longest trajectory bounds it);
* configuration in hindsight: what the active GPUs would have made at r_n, minus what PEARL
  made (negative: PEARL beat every static configuration of that size).

They add up to r x available GPU-seconds - PEARL's trajectories; the bound is the smaller
of that capacity and the pipeline's limit (`pearl.sim.bound`).
"""

from __future__ import annotations

from typing import Any

from pearl.sim.bound import BALANCED, BOUND_RUN_S, static_rate
from pearl.sim.compare import SimulationResult, default_jobs, run_simulation
from pearl.sim.config import SimConfig
from pearl.sim.experiments.result import BarPlot, ExperimentResult, model_files_note
from pearl.sim.playback import live_gpu_seconds
from pearl.sim.policy_run import PolicyRun, Progress, trace_actions
from pearl.specs.hardware import model_labels

MODELS = ("qwen3-8b", "qwen3-30b-a3b")
TRACES = ("seg1", "seg2", "seg3")
RUNGS = ("roll", "roll-large", "rlboost+", "ladder-expansion", "ladder-pd", "pearl")
RUNG_LABELS = {
    "roll": "ROLL (reserved pool)",
    "roll-large": "ROLL-Large (fixed mean pool)",
    "rlboost+": "RLBoost+",
    "ladder-expansion": "+ gated atomic expansion",
    "ladder-pd": "+ PD decisions",
    "pearl": "+ gated borrowing (PEARL)",
}


def static_configs(n: int) -> list[str]:
    """Static configurations compared at `n` GPUs: colocated and three P:D splits, each
    routed both ways (the static policies' sticky router and PEARL's balanced one)."""
    names = ["fixed:colocated"]
    for p in sorted({max(1, n // 4), max(1, n // 3), max(1, n // 2)}):
        if 1 <= p < n:
            names.append(f"fixed:disagg:{p}:{n - p}")
    return [name + routing for name in names for routing in ("", BALANCED)]


def breakdown(cfg: SimConfig, res: SimulationResult, run: PolicyRun) -> dict[str, Any]:
    """The split of PEARL's lost capacity (module docstring), in trajectories."""
    assert res.bound is not None
    s = run.summary
    d = res.duration_s
    actions, _, _ = trace_actions(cfg)
    rollout_gpu_s = cfg.cluster.num_dedicated_gpus * d + live_gpu_seconds(actions, d)
    hours = s["gpu_hours"]
    worker_rollout_s = 3600.0 * (hours.get("dedicated", 0.0) + hours.get("preemptible", 0.0))
    worker_overlap_s = 3600.0 * hours.get("overlap", 0.0)
    training_idle_s = cfg.cluster.num_training_gpus * d - 3600.0 * s["training_busy_gpu_hours"]
    transition_s = 3600.0 * (s["transition_gpu_hours"] or 0.0)
    active_s = 3600.0 * hours["total"] - transition_s
    r = res.bound.rate_per_gpu_s
    n = max(1, round(active_s / d))
    rates = [static_rate(cfg, n, name, min(d, BOUND_RUN_S)) for name in static_configs(n)]
    best_n = max(rates, key=lambda x: x.per_gpu)
    x = s["trajectories"]
    idle = r * (
        max(0.0, rollout_gpu_s - worker_rollout_s) + max(0.0, training_idle_s - worker_overlap_s)
    )
    parts = {
        "idle GPUs": idle,
        "transitions": r * transition_s,
        "latency floor": (r - best_n.per_gpu) * active_s,
        "configuration": best_n.per_gpu * active_s - x,
    }
    capacity = x + sum(parts.values())
    return {
        "parts": parts,
        "capacity": capacity,
        "mean_active_gpus": active_s / d,
        "best_static_at_n": f"{best_n.config} on {n}",
    }


def run(
    cfg: SimConfig,
    *,
    models: tuple[str, ...] = MODELS,
    traces: tuple[str, ...] = TRACES,
    rungs: tuple[str, ...] = RUNGS,
    progress: Progress | None = None,
) -> ExperimentResult:
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    groups: list[str] = []
    values: dict[str, list[float]] = {RUNG_LABELS.get(r, r): [] for r in rungs}
    labels = model_labels(models)
    for model in models:
        label = labels[model]
        for trace in traces:
            c = cfg.with_updates(
                **{
                    "cluster.model": model,
                    "trace.trace": trace,
                    "trace.static_gpus": None,  # each row is its trace, never a static pool
                    "policies": list(rungs),
                }
            )
            res = run_simulation(c, progress=progress, with_bound=True, jobs=default_jobs())
            assert res.bound is not None
            groups.append(f"{label} {trace}")
            prev = None
            for r in res.runs:
                tph = r.summary["trajs_per_hour"]
                values[RUNG_LABELS.get(r.name, r.name)].append(tph)
                rows.append(
                    {
                        "model": label,
                        "trace": trace,
                        "rung": RUNG_LABELS.get(r.name, r.name),
                        "policy": r.name,
                        "traj/h": tph,
                        "gain": None if prev is None else tph / prev - 1.0,
                        "of bound": r.summary["fraction_of_bound"],
                    }
                )
                prev = tph
            rows.append(
                {
                    "model": label,
                    "trace": trace,
                    "rung": f"bound ({res.bound.limited_by})",
                    "policy": "bound",
                    "traj/h": res.bound.trajs_per_hour,
                    "of bound": 1.0,
                }
            )
            pearl = next((r for r in res.runs if r.name == "pearl"), None)
            if pearl is not None:
                b = breakdown(c, res, pearl)
                per_h = 3600.0 / res.duration_s
                lost = ", ".join(f"{k} {v * per_h:+.0f}" for k, v in b["parts"].items())
                notes.append(
                    f"{label} {trace}: pearl {pearl.summary['trajs_per_hour']:.0f} traj/h of a "
                    f"capacity of {b['capacity'] * per_h:.0f} at the best per-GPU rate "
                    f"(bound {res.bound.trajs_per_hour:.0f}, {res.bound.limited_by}); lost "
                    f"traj/h: {lost}; mean active GPUs {b['mean_active_gpus']:.1f}, best "
                    f"static there {b['best_static_at_n']}"
                )
    notes.append(
        "gain: against the rung above in the table; 'of bound': trajectories over the bound "
        "(pearl.sim.bound: GPU capacity at the best static per-GPU rate, or the staleness "
        "pipeline with each batch at its latency floor, whichever is smaller)."
    )
    notes.extend(model_files_note(labels))
    return ExperimentResult(
        name="ladder",
        title="Where PEARL's throughput comes from: ROLL -> RLBoost+ -> PEARL, one mechanism a rung",
        columns=["model", "trace", "rung", "policy", "traj/h", "gain", "of bound"],
        rows=rows,
        notes=notes,
        bars=[
            BarPlot(
                "ladder.png",
                "Trajectories per hour, rung by rung",
                "traj/h",
                tuple(groups),
                {k: tuple(v) for k, v in values.items()},
            )
        ],
    )
