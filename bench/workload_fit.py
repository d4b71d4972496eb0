"""`pearl profile workload`'s round trip: fit a simulated run's turns, simulate the fit.

For each workload (the default SWE agent on its 32K limit, the same on a 16K limit, a
thinking agent on a 16K limit): one simulated hour of PEARL on 8 static GPUs writes the
turns; `pearl.sim.workload_fit` fits them (what `pearl profile workload` does with a run
directory); then two simulated hours of PEARL with the fitted workload against the world's
own, seeds 1-4. Reported: each law, the world's against the fit, and trajectories per hour
and mean makespans, fitted against the original.

Rerun: `.venv/bin/python -m bench.workload_fit` (about ten minutes; `--quick`: one workload,
one seed, shorter runs, no BENCHMARKS.md update).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench._md import machine_line, write_section
from pearl.sim.config import SimConfig
from pearl.sim.policy_run import run_policy
from pearl.sim.workload_fit import fit_workload
from pearl.specs.workload import WorkloadSpec, workload_from_dict

THINKING = {"median_tokens": 1000, "p90_tokens": 3000, "min_tokens": 8, "max_tokens": 8192}
WORKLOADS: dict[str, tuple[int, dict[str, Any]]] = {
    "default, 32K": (32768, {}),
    "default, 16K": (16384, {}),
    "thinking, 16K": (16384, {"decode_tokens": THINKING}),
}
GPUS = 8


def _config(cap: int, workload: dict[str, Any], seed: int, duration_s: float) -> SimConfig:
    return SimConfig().with_updates(
        **{
            "seed": seed,
            "trace.static_gpus": GPUS,
            "trace.duration_s": duration_s,
            "rollout.max_context_tokens": cap,
            "rollout.workload": workload,
        }
    )


def _laws(spec: WorkloadSpec) -> dict[str, str]:
    d, o = spec.decode_tokens, spec.observation_tokens
    return {
        "generated": f"{d.median_tokens:.0f} / {d.p90_tokens:.0f}",
        # the world appends its template after each observation: the growth a record shows
        "observation + template": (
            f"{o.median_tokens + spec.template_tokens:.0f} / "
            f"{o.p90_tokens + spec.template_tokens:.0f}"
        ),
        "turns": (
            f"{spec.num_turns_median:.1f} / {spec.num_turns_p90:.1f}, "
            f"{spec.run_to_cap_fraction:.0%} to cap"
        ),
    }


def _pearl(cfg: SimConfig) -> dict[str, float]:
    s = run_policy(cfg, "pearl", keep_history=False).summary
    return {"tph": float(s["trajs_per_hour"]), "makespan": float(s["mean_makespan_s"])}


def measure(name: str, seeds: tuple[int, ...], source_s: float, run_s: float) -> dict[str, Any]:
    cap, overrides = WORKLOADS[name]
    src = _config(cap, overrides, 0, source_s)
    world = workload_from_dict(src.rollout.workload, context_cap_tokens=cap)
    t0 = time.perf_counter()
    turns = run_policy(src, "pearl", keep_history=False).turns
    t1 = time.perf_counter()
    fit = fit_workload(turns, max_context_tokens=cap, max_turns=world.max_turns)
    fit_s = time.perf_counter() - t1
    fitted = workload_from_dict(fit.workload, context_cap_tokens=cap)
    runs = []
    for seed in seeds:
        mine = _pearl(_config(cap, fit.workload, seed, run_s))
        theirs = _pearl(_config(cap, overrides, seed, run_s))
        runs.append((seed, theirs, mine))
        print(
            f"{name}, seed {seed}: {theirs['tph']:.1f} -> {mine['tph']:.1f} traj/h, "
            f"{theirs['makespan']:.1f} -> {mine['makespan']:.1f} s",
            flush=True,
        )
    return {
        "name": name,
        "world": _laws(world),
        "fit": _laws(fitted),
        "trajectories": fit.samples["trajectories"],
        "turns": fit.samples["turns"],
        "source_s": t1 - t0,
        "fit_s": fit_s,
        "runs": runs,
    }


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one workload and seed, no write")
    args = ap.parse_args(argv)
    if args.quick:
        results = [measure("default, 16K", (1,), 900.0, 900.0)]
        return 0 if results[0]["runs"] else 1
    seeds, source_s, run_s = (1, 2, 3, 4), 3600.0, 7200.0
    results = [measure(name, seeds, source_s, run_s) for name in WORKLOADS]
    lines = [
        "## Workload fit round trip (`pearl profile workload`)",
        "",
        f"Machine: {machine_line()}. Rerun: `.venv/bin/python -m bench.workload_fit`. One "
        f"simulated hour of PEARL on {GPUS} static GPUs (seed 0) writes the turns; the fit "
        "(`pearl.sim.workload_fit`, what `pearl profile workload RUN_DIR` runs) gets the "
        "run's length limit and turn cap; then two simulated hours of PEARL on the fitted "
        "workload and on the world's own, seeds "
        f"{', '.join(map(str, seeds))}. Laws as median / p90 (tokens; the observation with "
        "the world's 24-token template, which the records cannot tell apart from it).",
        "",
        "| workload | law | world | fitted |",
        "|---|---|---|---|",
    ]
    for r in results:
        for law, value in r["world"].items():
            lines.append(f"| {r['name']} | {law} | {value} | {r['fit'][law]} |")
    lines += [
        "",
        "| workload | trajectories fitted (turns) | fit s | world: traj/h | fitted: traj/h |"
        " largest seed gap | world: makespan s | fitted: makespan s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        theirs = [t["tph"] for _, t, _ in r["runs"]]
        mine = [m["tph"] for _, _, m in r["runs"]]
        gap = max(abs(m / t - 1.0) for t, m in zip(theirs, mine, strict=True))
        lines.append(
            f"| {r['name']} | {r['trajectories']} ({r['turns']}) | {r['fit_s']:.1f} | "
            f"{_mean(theirs):.1f} | {_mean(mine):.1f} | {gap:.1%} | "
            f"{_mean([t['makespan'] for _, t, _ in r['runs']]):.1f} | "
            f"{_mean([m['makespan'] for _, _, m in r['runs']]):.1f} |"
        )
    lines += [
        "",
        "Per seed (traj/h, world -> fitted): "
        + "; ".join(
            f"{r['name']}: "
            + ", ".join(f"{s} {t['tph']:.1f} -> {m['tph']:.1f}" for s, t, m in r["runs"])
            for r in results
        )
        + ".",
    ]
    write_section("workload_fit", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
