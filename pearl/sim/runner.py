"""Run policies on one simulated setting and summarise them side by side.

`run_policy(cfg, name)` builds a fresh world (same seed, same trace, same trajectories for
every policy), a controller with the named policy, and drives them to the end of the trace.
`run_simulation(cfg)` does that for every policy of the config, adds the upper bound
(`pearl.sim.bound`) and returns a `SimulationResult` that prints as one JSON document and
writes its outputs (`--out DIR`).

Policy names come from `pearl.control.policies` (pearl, rlboost+, roll, roll-large,
ablations), plus
static ones for `--static-gpus` runs: `fixed:colocated` and `fixed:disagg:P:D`.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pearl.control.state import ClusterState
from pearl.control.telemetry import TelemetryMeta
from pearl.errors import InputError
from pearl.sim.bound import (
    RATE_CACHE,
    Bound,
    StaticRate,
    bound_for,
    bound_plan,
    rate_key,
    static_rate,
)
from pearl.sim.config import SimConfig, dump_config
from pearl.sim.driver import Driver, DriverLog
from pearl.sim.playback import TraceAction, live_gpu_seconds, playback_actions
from pearl.sim.telemetry_out import decision_docs, rounded, safe_name, summarise, write_outputs
from pearl.sim.world import World

Progress = Callable[[str, float, float], None]
STATIC_DURATION_S = 7200.0


# -- policies ---------------------------------------------------------------------------------
def make_policy(name: str) -> Any:
    """A policy object by name; `fixed:*` are static baselines (no elasticity at all)."""
    from pearl.control.policies import get_policy
    from pearl.control.policies.base import Policy

    if name == "fixed:colocated":
        return Policy(
            name=name,
            use_preemptible=False,
            borrow="never",
            adapt_pd=False,
            modes=("colocated",),
        )
    m = re.fullmatch(r"fixed:(?:disagg|disaggregated):(\d+):(\d+)", name)
    if m:
        ratio = (int(m.group(1)), int(m.group(2)))
        if min(ratio) < 1:
            raise InputError("<argument>", f"bad ratio in '{name}'", field="--policies")
        return Policy(
            name=name,
            use_preemptible=False,
            borrow="never",
            adapt_pd=False,
            modes=("disaggregated",),
            fixed_ratio=ratio,
        )
    if name.startswith("fixed:"):
        raise InputError(
            "<argument>",
            f"unknown static policy '{name}' (fixed:colocated or fixed:disagg:P:D)",
            field="--policies",
        )
    try:
        return get_policy(name)
    except (KeyError, ValueError) as err:
        msg = err.args[0] if err.args else f"unknown policy '{name}'"
        raise InputError("<argument>", str(msg), field="--policies") from None


def hardware_prior(cfg: SimConfig) -> Any:
    """The decision engine's hardware prior for the configured model and GPU."""
    from pearl.control.profile import HardwarePrior
    from pearl.specs import get_gpu, get_model

    return HardwarePrior.from_specs(
        get_model(cfg.cluster.model),
        get_gpu(cfg.cluster.gpu),
        gpus_per_worker=cfg.cluster.gpus_per_worker,
    )


# -- the trace ----------------------------------------------------------------------------------
def trace_actions(cfg: SimConfig) -> tuple[list[TraceAction], float, str]:
    """(timeline, duration_s, trace name) of the config; empty timeline for a static budget."""
    t = cfg.trace
    if t.static_gpus is not None:
        return [], t.duration_s or STATIC_DURATION_S, f"static:{t.static_gpus}"
    from pearl.traces import load_trace

    trace = load_trace(t.trace)
    duration = min(t.duration_s or trace.duration_s, trace.duration_s)
    notice = trace.reclaim_notice_s if t.reclaim_notice_s is None else t.reclaim_notice_s
    acts = playback_actions(
        trace.gpu_events(),
        reclaim_notice_s=notice,
        max_gpus=cfg.cluster.max_preemptible_gpus,
        duration_s=duration,
    )
    return acts, duration, trace.name


def fixed_pool_size(cfg: SimConfig) -> int:
    """ROLL-Large's pool (paper §6.1): the reserved GPUs plus the time-weighted mean of the
    preemptible GPUs the trace's playback offers over the run (capped like the offers),
    rounded half up. A static budget is its own pool."""
    if cfg.trace.static_gpus is not None:
        return cfg.trace.static_gpus
    actions, duration, _ = trace_actions(cfg)
    mean = live_gpu_seconds(actions, duration) / duration
    return cfg.cluster.num_dedicated_gpus + math.floor(mean + 0.5)


# -- one policy ---------------------------------------------------------------------------------
@dataclass
class PolicyRun:
    """One policy's run: its summary and what outputs and plots need. `world` and
    `controller` are None for a run made in another process (`slim()`)."""

    name: str
    summary: dict[str, Any]
    log: DriverLog
    duration_s: float
    turns: list[Any]
    worker_steps: list[Any]
    decisions: list[dict[str, Any]]
    step_end_times_s: list[float]
    traj_done_times_s: list[float]
    world: World | None = None
    controller: Any = None

    def slim(self) -> PolicyRun:
        """A picklable copy without the live world and controller."""
        return dataclasses.replace(self, world=None, controller=None)


def _group_size(batch: int) -> int:
    for g in (8, 4, 2):
        if batch % g == 0:
            return g
    return 1


def build(
    cfg: SimConfig,
    name: str | Any,
    *,
    actions: list[TraceAction] | None = None,
    keep_history: bool = True,
) -> tuple[World, Any, Driver, float]:
    """A fresh world, controller and driver for policy `name` (a name or a Policy object),
    and the run's duration. `actions` replaces the config's trace timeline (tests script
    their own GPU changes).
    """
    policy = make_policy(name) if isinstance(name, str) else name
    if policy.pool == "trace_mean":  # ROLL-Large: a fixed pool for the trace's whole window
        _, window_s, _ = trace_actions(cfg)
        cfg = cfg.with_updates(
            **{
                "trace.static_gpus": fixed_pool_size(cfg),
                "trace.duration_s": window_s,
                "trace.borrowing": False,
            }
        )
        actions = None
    trace_acts, duration, _ = trace_actions(cfg)
    # The run's staleness bound reaches the controller (as `pearl run` does in
    # runtime/control_setup.py); the trainer and the bound read the same field.
    policy = dataclasses.replace(policy, max_staleness=cfg.trainer.max_staleness)
    static = cfg.trace.static_gpus is not None
    borrowing = not static if cfg.trace.borrowing is None else cfg.trace.borrowing
    world = World(cfg, trace_acts if actions is None else actions, borrowing=borrowing)
    controller = _controller_class(cfg.check_every)(
        policy,
        state=ClusterState(gpus=world.dedicated),
        batch_size=cfg.rollout.batch_size,
        group_size=_group_size(cfg.rollout.batch_size),
        gpus_per_worker=cfg.cluster.gpus_per_worker,
        training_gpus=world.training_gpus if borrowing else (),
        hardware=hardware_prior(cfg),
    )
    return world, controller, Driver(world, controller, keep_history=keep_history), duration


def run_policy(
    cfg: SimConfig,
    name: str,
    *,
    progress: Progress | None = None,
    keep_history: bool = True,
    actions: list[TraceAction] | None = None,
) -> PolicyRun:
    """Simulate policy `name` on the config's setting."""
    world, controller, driver, duration = build(
        cfg, name, actions=actions, keep_history=keep_history
    )
    label = name if isinstance(name, str) else getattr(name, "name", "policy")
    cb = None if progress is None else (lambda now: progress(label, now, duration))
    log = driver.run(duration, cb)
    world.finish(duration)
    summary = summarise(world, log, duration)
    return PolicyRun(
        label,
        summary,
        log,
        duration,
        world.finished_turns,
        world.finished_worker_steps,
        decision_docs(controller, log),
        list(world.step_end_times_s),
        list(world.traj_done_times_s),
        world,
        controller,
    )


def _controller_class(check_every: int) -> type:
    """The controller, adapted for long simulations (same decisions, less work per event):

    * its invariants are checked after every `check_every`-th event only (0: never; the
      tests use 1): the full check walks every trajectory and worker;
    * routing is skipped when no trajectory is queued (the router would return no route,
      but first recount every worker's load over all trajectories, which was the largest
      single cost of a simulated event).
    """
    from pearl.control.controller import Controller

    class SimController(Controller):
        _num_checks = 0

        def check(self, *args: Any, **kwargs: Any) -> None:
            self._num_checks += 1
            if check_every == 1 or (check_every and self._num_checks % check_every == 0):
                super().check(*args, **kwargs)

        def _route(self) -> Any:
            spend = getattr(self, "_spend_budget", None)
            if self.book.has_queued() or spend is None:
                return super()._route()
            spend([])  # what routing nothing does (a budgeted borrow may drain)
            return []

    return SimController


# -- all policies ------------------------------------------------------------------------------
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
        setting = (
            f"{c.cluster.model} on {c.cluster.gpu}, trace {self.trace_name}, "
            f"batch {c.rollout.batch_size}, max len {c.rollout.max_len_tokens}, seed {c.seed}"
        )
        return {
            "setting": setting,
            "model": c.cluster.model,
            "gpu": c.cluster.gpu,
            "trace": self.trace_name,
            "duration_s": self.duration_s,
            "batch_size": c.rollout.batch_size,
            "max_len_tokens": c.rollout.max_len_tokens,
            "seed": c.seed,
            "bound": None if self.bound is None else self.bound.to_json(),
            "policies": {r.name: rounded(r.summary) for r in self.runs},
        }

    def write(self, out_dir: Path) -> list[Path]:
        """Per policy: <out>/<policy>/{telemetry,decisions}.jsonl, summary.json, config.yaml;
        plus <out>/summary.json (all policies) and <out>/config.yaml."""
        out_dir.mkdir(parents=True, exist_ok=True)
        paths: list[Path] = []
        meta = TelemetryMeta(
            self.cfg.cluster.model, self.cfg.cluster.gpu, self.cfg.cluster.gpus_per_worker
        )
        cfg_yaml = dump_config(self.cfg)
        for r in self.runs:
            paths += write_outputs(
                out_dir / safe_name(r.name),
                turns=r.turns,
                worker_steps=r.worker_steps,
                meta=meta,
                decisions=r.decisions,
                summary=rounded(r.summary),
                config_yaml=cfg_yaml,
            )
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
    """
    actions, duration, name = trace_actions(cfg)
    plan = bound_plan(cfg, actions, duration) if with_bound else []
    plan = [t for t in plan if rate_key(cfg, *t) not in RATE_CACHE]
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
                    RATE_CACHE[key] = rate
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
