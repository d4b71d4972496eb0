"""Policies side by side on one simulated setting, with the upper bound.

`run_simulation(cfg)` runs every policy of the config (`pearl.sim.policy_run.run_policy`), adds
the upper bound (`pearl.sim.bound`) and returns a `SimulationResult` that prints as one
JSON document and writes its outputs (`--out DIR`).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pearl.control.telemetry_jsonl import TelemetryMeta
from pearl.sim import run_store
from pearl.sim.bound import (
    Bound,
    StaticRate,
    bound_for,
    bound_plan,
    known_rate,
    rate_key,
    remember_rate,
    static_rate,
)
from pearl.sim.config import SimConfig, dump_config
from pearl.sim.policy_run import PolicyRun, Progress, run_policy, tagged, trace_actions
from pearl.sim.telemetry_out import rounded, safe_name, write_run_dir


@dataclass
class SimulationResult:
    cfg: SimConfig
    trace_name: str
    duration_s: float
    runs: list[PolicyRun]
    bound: Bound | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        c = self.cfg
        own = c.rollout.workload  # a workload other than the paper's SWE agent says so
        workload = f", workload: {len(own)} field(s) set (rollout.workload)" if own else ""
        setting = (
            f"{c.cluster.model} on {c.cluster.gpu}, trace {self.trace_name}, "
            f"batch {c.rollout.batch_size}, max len {c.rollout.max_context_tokens}{workload}, "
            f"seed {c.seed}"
        )
        return {
            "setting": setting,
            "model": c.cluster.model,
            "gpu": c.cluster.gpu,
            "trace": self.trace_name,
            "duration_s": self.duration_s,
            "batch_size": c.rollout.batch_size,
            "max_context_tokens": c.rollout.max_context_tokens,
            "seed": c.seed,
            "bound": None if self.bound is None else self.bound.to_json(),
            "policies": {r.name: rounded(r.summary) for r in self.runs},
        }

    def write(self, out_dir: Path) -> list[Path]:
        """Per policy: <out>/<policy>/, a run directory in the format `pearl run` writes
        (`pearl.report.rundir`: states, decisions, events, telemetry, steps, metrics.json,
        report.md); plus <out>/summary.json (all policies) and <out>/config.yaml.
        A result read back from a run store has no telemetry to write: ValueError."""
        if self.extra.get(run_store.TELEMETRY_DROPPED):
            raise ValueError("a stored simulation keeps no telemetry: simulate it to write it")
        out_dir.mkdir(parents=True, exist_ok=True)
        paths: list[Path] = []
        meta = TelemetryMeta(
            self.cfg.cluster.model, self.cfg.cluster.gpu, self.cfg.cluster.gpus_per_worker
        )
        cfg_yaml = dump_config(self.cfg)
        for r in self.runs:
            d = out_dir / safe_name(r.name)
            write_run_dir(
                d,
                turns=r.turns,
                worker_steps=r.worker_steps,
                meta=meta,
                history=r.log.history,
                commands=r.log.command_log,
                decisions=r.decisions,
                request_events=r.request_events,
                step_spans_s=r.step_spans_s,
                step_predicted_s=r.step_predicted_s,
                summary={"policy": r.name, **rounded(r.summary)},
                config_yaml=cfg_yaml,
            )
            paths += sorted(p for p in d.iterdir() if p.is_file())
        import json

        top = out_dir / "summary.json"
        top.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        (out_dir / "config.yaml").write_text(cfg_yaml)
        return [*paths, top, out_dir / "config.yaml"]


def _policy_task(cfg: SimConfig, name: str) -> PolicyRun:
    return run_policy(cfg, name).slim()


def _rate_task(cfg: SimConfig, n: int, name: str, duration_s: float) -> tuple[str, StaticRate]:
    return rate_key(cfg, n, name, duration_s), static_rate(cfg, n, name, duration_s)


def default_jobs() -> int:
    """Worker processes for independent runs: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def run_simulation(
    cfg: SimConfig,
    *,
    progress: Progress | None = None,
    with_bound: bool = True,
    jobs: int = 1,
) -> SimulationResult:
    """Every policy of `cfg` on the same world, plus the bound.

    With `jobs > 1` the independent runs (one per policy, and the bound's static runs) go
    to that many worker processes; results are identical to `jobs=1` (each run is a pure
    function of its config and seed), only progress is reported per finished run.

    With a run store active (`pearl.sim.run_store.use`), a setting it already holds is read
    back instead of simulated, and a finished one is added to it.
    """
    progress = tagged(progress, setting_label(cfg))
    store = run_store.active()
    if store is not None:
        kept = store.get(cfg, with_bound=with_bound)
        if kept is not None:
            if progress is not None:
                for p in cfg.policies:
                    progress(f"{p} (stored)", 1.0, 1.0)
            return kept
    result = _simulate(cfg, progress=progress, with_bound=with_bound, jobs=jobs)
    if store is not None:
        store.put(result, with_bound=with_bound)
    return result


def setting_label(cfg: SimConfig) -> str:
    """What distinguishes one `run_simulation` call's setting, for progress labels."""
    t = cfg.trace
    trace = f"static:{t.static_gpus}" if t.static_gpus is not None else Path(str(t.trace)).name
    r = cfg.rollout
    return (
        f"{cfg.cluster.model} {trace} batch {r.batch_size} "
        f"len {r.max_context_tokens // 1024}K seed {cfg.seed}"
    )


def _simulate(
    cfg: SimConfig, *, progress: Progress | None, with_bound: bool, jobs: int
) -> SimulationResult:
    actions, duration, name = trace_actions(cfg)
    plan = bound_plan(cfg, actions, duration) if with_bound else []
    plan = [t for t in plan if known_rate(rate_key(cfg, *t)) is None]
    runs: dict[str, PolicyRun] = {}
    if jobs > 1 and len(cfg.policies) + len(plan) > 1:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futures: dict[Any, tuple[str, Any]] = {
                pool.submit(_policy_task, cfg, p): ("policy", p) for p in cfg.policies
            }
            futures.update({pool.submit(_rate_task, cfg, *t): ("rate", t) for t in plan})
            for fut in as_completed(futures):
                kind, what = futures[fut]
                if kind == "policy":
                    runs[what] = fut.result()
                else:
                    key, rate = fut.result()
                    remember_rate(key, rate)
                if progress is not None:
                    label = what if kind == "policy" else f"bound: {what[1]} on {what[0]}"
                    progress(label, 1.0, 1.0)
    else:
        for p in cfg.policies:
            runs[p] = run_policy(cfg, p, progress=progress)
    result = SimulationResult(cfg, name, duration, [runs[p] for p in cfg.policies])
    if with_bound:
        if progress is not None:
            progress("bound", 0.0, 1.0)
        result.bound = bound_for(cfg, actions, duration)
        for r in result.runs:
            r.summary["fraction_of_bound"] = result.bound.fraction(r.summary["trajectories"])
        if progress is not None:
            progress("bound", 1.0, 1.0)
    return result
