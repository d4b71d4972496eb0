"""Run policies on one simulated setting and summarise them side by side (issue 5, item 7).

`run_policy(cfg, name)` builds a fresh world (same seed, same trace, same trajectories for
every policy), a controller with the named policy, and drives them to the end of the trace.
`run_simulation(cfg)` does that for every policy of the config, adds the upper bound
(`pearl.sim.bound`) and returns a `SimulationResult` that prints as one JSON document and
writes its outputs (`--out DIR`).

Policy names come from `pearl.control.policies` (pearl, rlboost+, roll, ablations), plus
static ones for `--static-gpus` runs: `fixed:colocated` and `fixed:disagg:P:D`.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pearl.control.state import ClusterState
from pearl.control.telemetry import TelemetryMeta
from pearl.errors import InputError
from pearl.sim.bound import Bound, StaticRate, compute_bound
from pearl.sim.config import SimConfig, dump_config
from pearl.sim.driver import Driver, DriverLog
from pearl.sim.playback import TraceAction, live_gpu_seconds, playback_actions
from pearl.sim.telemetry_out import write_outputs
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
    trace_acts, duration, _ = trace_actions(cfg)
    policy = make_policy(name) if isinstance(name, str) else name
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
    cb = None if progress is None else (lambda now: progress(label, now, duration))
    label = name if isinstance(name, str) else getattr(name, "name", "policy")
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
        world,
        controller,
    )


def _controller_class(check_every: int) -> type:
    """The controller, checking its invariants after every `check_every`-th event only
    (0: never). Its full check walks every trajectory and worker; after every one of the
    ~10^5 events of a two-hour run it would dominate the simulation's time."""
    from pearl.control.controller import Controller

    if check_every == 1:
        return Controller

    class SampledChecks(Controller):  # type: ignore[misc, valid-type]
        _num_checks = 0

        def check(self) -> None:
            self._num_checks += 1
            if check_every and self._num_checks % check_every == 0:
                super().check()

    return SampledChecks


_RECONF_KEYS = ("expand", "borrow", "return", "reclaim", "role_change", "init_failed")


def summarise(world: World, log: DriverLog, duration_s: float) -> dict[str, Any]:
    """Per-policy figures: throughput, makespan, reconfigurations by kind, GPU-hours."""
    st = world.stats
    hours = duration_s / 3600.0
    reconf: Counter[str] = Counter({k: 0 for k in _RECONF_KEYS})
    for t, c in log.command_log:
        kind = type(c).__name__
        if kind == "InitWorker" and t > 0.0:  # workers made at time 0 are the initial pool
            on_training = any(g in world.trainer.gpu_ids for g in c.gpu_ids)
            reconf["borrow" if on_training else "expand"] += 1
        elif kind == "ReleaseGpus" and c.to == "training":
            reconf["return"] += 1
        elif kind == "ChangeRole":
            reconf["role_change"] += 1
    reconf["reclaim"] = log.events_by_kind.get("ReclaimNotice", 0)
    reconf["init_failed"] = st.init_failures
    makespans = st.makespans_s
    gpu_s = dict(st.worker_gpu_s_by_zone)
    prefill_total = st.prefill_tokens + st.cached_prefix_tokens
    return {
        "trajectories": st.trajectories_done,
        "trajs_per_hour": st.trajectories_done / hours,
        "tokens_per_s": st.trajectory_tokens / duration_s,
        "decode_tokens_per_s": st.decode_tokens / duration_s,
        "train_steps": len(world.trainer.steps),
        "train_steps_per_hour": len(world.trainer.steps) / hours,
        "rollout_steps": len(makespans),
        "mean_makespan_s": sum(makespans) / len(makespans) if makespans else None,
        "fraction_of_bound": None,
        "reconfigurations": dict(reconf),
        "interrupted_requests": st.interrupted_requests,
        "prefix_cache_hit_rate": st.cached_prefix_tokens / prefill_total if prefill_total else 0.0,
        "prefill_token_share": (
            st.prefill_tokens / (st.prefill_tokens + st.decode_tokens)
            if st.prefill_tokens + st.decode_tokens
            else 0.0
        ),
        "training_wait_for_gpus_s": world.trainer.wait_for_gpus_s,
        "gpu_hours": {
            **{z: s / 3600.0 for z, s in sorted(gpu_s.items())},
            "total": sum(gpu_s.values()) / 3600.0,
        },
        "available_preemptible_gpu_hours": st.gpu_s_by_zone.get("preemptible", 0.0) / 3600.0,
        "num_events": log.num_events,
        "num_commands": log.num_commands,
    }


# -- static rates and the bound -------------------------------------------------------------
_RATE_CACHE: dict[str, StaticRate] = {}
BOUND_RUN_S = 1800.0  # simulated seconds of each static run behind the bound


def _rate_key(cfg: SimConfig, num_gpus: int, policy: str, duration_s: float) -> str:
    scfg = cfg.with_updates(**{"trace.static_gpus": num_gpus, "trace.duration_s": duration_s})
    return dump_config(scfg.model_copy(update={"policies": ()})) + policy


def static_rate(cfg: SimConfig, num_gpus: int, policy: str, duration_s: float) -> StaticRate:
    """Steady-state trajectories per second of a static configuration (cached per setting).

    Measured between the first and the last finished rollout step, so the start-up of the
    pipeline does not dilute it.
    """
    scfg = cfg.with_updates(**{"trace.static_gpus": num_gpus, "trace.duration_s": duration_s})
    key = _rate_key(cfg, num_gpus, policy, duration_s)
    if key not in _RATE_CACHE:
        run = run_policy(scfg, policy, keep_history=False)
        times = run.step_end_times_s
        if len(times) >= 2:
            rate = (len(times) - 1) * cfg.rollout.batch_size / (times[-1] - times[0])
        else:
            rate = run.summary["trajectories"] / duration_s
        _RATE_CACHE[key] = StaticRate(policy.removeprefix("fixed:"), num_gpus, rate)
    return _RATE_CACHE[key]


def bound_plan(
    cfg: SimConfig, actions: list[TraceAction], duration_s: float
) -> list[tuple[int, str, float]]:
    """The static runs the bound needs: (GPUs, policy, seconds) at the reserved and the
    mean budget, colocated and two P:D splits each."""
    dedicated = cfg.trace.static_gpus or cfg.cluster.num_dedicated_gpus
    rollout_gpu_s = dedicated * duration_s + live_gpu_seconds(actions, duration_s)
    mean_gpus = max(1, round(rollout_gpu_s / duration_s))
    bound_s = min(duration_s, BOUND_RUN_S)
    plan = []
    for n in sorted({dedicated, mean_gpus}):
        names = ["fixed:colocated"]
        if n >= 2:
            names += sorted({f"fixed:disagg:{p}:{n - p}" for p in (max(1, n // 4), n // 2)})
        plan += [(n, name, bound_s) for name in names]
    return plan


def bound_for(cfg: SimConfig, actions: list[TraceAction], duration_s: float) -> Bound:
    """The upper bound of a setting (see pearl.sim.bound and `bound_plan`)."""
    static = cfg.trace.static_gpus is not None
    dedicated = cfg.trace.static_gpus or cfg.cluster.num_dedicated_gpus
    rollout_gpu_s = dedicated * duration_s + live_gpu_seconds(actions, duration_s)
    rates = [static_rate(cfg, n, name, d) for n, name, d in bound_plan(cfg, actions, duration_s)]
    return compute_bound(
        rates,
        duration_s=duration_s,
        rollout_gpu_s=rollout_gpu_s,
        num_training_gpus=cfg.cluster.num_training_gpus,
        train_step_s=_train_step_s(cfg),
        batch_size=cfg.rollout.batch_size,
        borrowing=(not static) if cfg.trace.borrowing is None else cfg.trace.borrowing,
        max_staleness=cfg.trainer.max_staleness,
    )


def _train_step_s(cfg: SimConfig) -> float:
    """Training step time of a mean batch of the configured workload."""
    from pearl.sim.trainer import step_time_s
    from pearl.sim.world import mean_trajectory_tokens
    from pearl.specs import get_gpu, get_model

    m, g = get_model(cfg.cluster.model), get_gpu(cfg.cluster.gpu)
    tokens = mean_trajectory_tokens(cfg) * cfg.rollout.batch_size
    return step_time_s(
        cfg.trainer,
        num_tokens=round(tokens),
        active_params=float(m.active_params),
        num_gpus=cfg.cluster.num_training_gpus,
        peak_flops_per_s=g.flops_per_s,
    )


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
            "policies": {r.name: _rounded(r.summary) for r in self.runs},
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
                summary=_rounded(r.summary),
                config_yaml=cfg_yaml,
            )
        import json

        top = out_dir / "summary.json"
        top.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        (out_dir / "config.yaml").write_text(cfg_yaml)
        return [*paths, top, out_dir / "config.yaml"]


def safe_name(policy: str) -> str:
    return policy.replace("+", "plus").replace(":", "_").replace("/", "_")


def decision_docs(controller: Any, log: DriverLog) -> list[dict[str, Any]]:
    """The controller's decisions and every non-route command, in time order."""
    docs: list[dict[str, Any]] = []
    for d in getattr(controller, "decisions", []) or []:
        docs.append({"kind": "decision", **_as_doc(d)})
    for t, c in log.command_log:
        docs.append(
            {"kind": "command", "t_s": round(t, 3), "command": type(c).__name__, **_as_doc(c)}
        )
    return docs


def _as_doc(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "to_json"):
        doc = obj.to_json()
        return doc if isinstance(doc, dict) else {"value": doc}
    if isinstance(obj, dict):
        return obj
    fields = getattr(obj, "__dataclass_fields__", None)
    if fields:
        return {k: _plain(getattr(obj, k)) for k in fields}
    return {"value": str(obj)}


def _plain(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return str(v)


def _rounded(doc: Any) -> Any:
    if isinstance(doc, float):
        return round(doc, 4)
    if isinstance(doc, dict):
        return {k: _rounded(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_rounded(v) for v in doc]
    return doc


def _policy_task(cfg: SimConfig, name: str) -> PolicyRun:
    return run_policy(cfg, name).slim()


def _rate_task(cfg: SimConfig, n: int, name: str, duration_s: float) -> tuple[str, StaticRate]:
    return _rate_key(cfg, n, name, duration_s), static_rate(cfg, n, name, duration_s)


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
    plan = [t for t in plan if _rate_key(cfg, *t) not in _RATE_CACHE]
    runs: dict[str, PolicyRun] = {}
    if jobs > 1 and len(cfg.policies) + len(plan) > 1:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futures = {pool.submit(_policy_task, cfg, p): ("policy", p) for p in cfg.policies}
            futures.update({pool.submit(_rate_task, cfg, *t): ("rate", t) for t in plan})
            for fut in as_completed(futures):
                kind, what = futures[fut]
                if kind == "policy":
                    runs[what] = fut.result()
                else:
                    key, rate = fut.result()
                    _RATE_CACHE[key] = rate
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
