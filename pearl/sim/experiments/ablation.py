"""Ablation on a static rollout budget (paper §6.3): colocation, the best disaggregation,
then borrowing idle training GPUs without and with PEARL's cost gate."""

from __future__ import annotations

from pearl.sim.compare import default_jobs, run_simulation
from pearl.sim.config import SimConfig
from pearl.sim.experiments.result import BarPlot, ExperimentResult
from pearl.sim.policy_run import Progress

BUDGETS = (4, 8, 12, 16)


def _splits(n: int) -> list[str]:
    ps = sorted({max(1, n // 4), max(1, n // 2), max(1, (3 * n) // 4)} - {n})
    return [f"fixed:disagg:{p}:{n - p}" for p in ps if 1 <= p < n]


def run(
    cfg: SimConfig,
    *,
    budgets: tuple[int, ...] = BUDGETS,
    duration_s: float = 3600.0,
    progress: Progress | None = None,
) -> ExperimentResult:
    rows = []
    series: dict[str, list[float]] = {
        k: [] for k in ("colocated", "best disagg", "ungated borrow", "gated borrow")
    }
    timeline = None
    for n in budgets:
        static = cfg.with_updates(
            **{
                "trace.static_gpus": n,
                "trace.duration_s": duration_s,
                "trace.borrowing": False,
                "policies": ["fixed:colocated", *_splits(n)],
            }
        )
        runs = run_simulation(static, progress=progress, with_bound=False, jobs=default_jobs())
        by_name = {r.name: r.summary["trajs_per_hour"] for r in runs.runs}
        col = by_name.pop("fixed:colocated")
        best_name, best = "-", 0.0
        for name in _splits(n):  # the first of equals, in the splits' order
            if by_name[name] > best:
                best_name, best = name.removeprefix("fixed:"), by_name[name]
        borrow = static.with_updates(
            **{"trace.borrowing": True, "policies": ["pearl-ungated", "pearl"]}
        )
        ungated, gated = run_simulation(
            borrow, progress=progress, with_bound=False, jobs=default_jobs()
        ).runs
        rows.append(
            {
                "GPUs": n,
                "colocated": col,
                "best disagg": best,
                "best split": best_name,
                "ungated borrow": ungated.summary["trajs_per_hour"],
                "gated borrow": gated.summary["trajs_per_hour"],
                "borrows (ungated/gated)": f"{ungated.summary['reconfigurations']['borrow']}/"
                f"{gated.summary['reconfigurations']['borrow']}",
            }
        )
        for k, v in (
            ("colocated", col),
            ("best disagg", best),
            ("ungated borrow", ungated.summary["trajs_per_hour"]),
            ("gated borrow", gated.summary["trajs_per_hour"]),
        ):
            series[k].append(v)
        timeline = (
            f"pearl (gated borrowing) on {n} static GPUs",
            gated.log.history,
            gated.duration_s,
        )
    return ExperimentResult(
        name="ablation",
        title="Ablation: static rollout budget, PD mode and borrowing (traj/h)",
        columns=[
            "GPUs",
            "colocated",
            "best disagg",
            "best split",
            "ungated borrow",
            "gated borrow",
            "borrows (ungated/gated)",
        ],
        rows=rows,
        notes=[
            f"{duration_s:.0f} simulated seconds per run, batch {cfg.rollout.batch_size}; "
            "'best disagg' is the best of the P:D splits tried by simulation; the borrowing "
            "columns run PEARL's decision engine with borrowing ungated / gated."
        ],
        bars=[
            BarPlot(
                "ablation.png",
                "Throughput by rollout budget",
                "traj/h",
                tuple(str(n) for n in budgets),
                {k: tuple(v) for k, v in series.items()},
            )
        ],
        timeline=timeline,
    )
