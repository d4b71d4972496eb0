"""One policy on one simulated setting: `build` a world and its controller, `run_policy`.

`run_policy(cfg, name)` builds a fresh world (same seed, same trace, same trajectories for
every policy), a controller with the named policy, and drives them to the end of the trace.
Policies side by side with the upper bound: `pearl.sim.compare.run_simulation`.

Policy names come from the one registry, `pearl.control.policies` (pearl, rlboost+, roll,
roll-large, the ablations, and the static `fixed:colocated` / `fixed:disagg:P:D` that
`--static-gpus` runs compare).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pearl.control.controller import Controller
from pearl.control.knobs import apply_knobs, decision_config
from pearl.control.policies import get_policy
from pearl.control.policies.base import Policy
from pearl.control.state import ClusterState
from pearl.errors import InputError
from pearl.sim.config import SimConfig
from pearl.sim.driver import Driver
from pearl.sim.playback import TraceAction, live_gpu_seconds, playback_actions
from pearl.sim.telemetry_out import decision_docs, summarise
from pearl.sim.world import SimWorld
from pearl.world.dispatch import DispatchLog

Progress = Callable[[str, float, float], None]
SETTING_SEP = " | "  # a progress label "<setting> | <run>" (`tagged`)


def tagged(progress: Progress | None, setting: str) -> Progress | None:
    """`progress` with each label prefixed by `setting` and `SETTING_SEP`, so runs of the
    same policy in different settings (an experiment's rows) report apart."""
    if progress is None:
        return None
    return lambda label, done, total: progress(f"{setting}{SETTING_SEP}{label}", done, total)


STATIC_DURATION_S = 7200.0


# -- policies ---------------------------------------------------------------------------------
def make_policy(name: str) -> Policy:
    """The policy called `name` from the one registry (`pearl.control.policies`); an unknown
    name is an input error on `--policies`."""
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
        usable_memory_fraction=cfg.engine.gpu_memory_utilization,
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
    log: DispatchLog
    duration_s: float
    turns: list[Any]
    worker_steps: list[Any]
    decisions: list[dict[str, Any]]
    step_end_times_s: list[float]
    traj_done_times_s: list[float]
    world: SimWorld | None = None
    controller: Controller | None = None
    # per-request run events (interrupt, resume): `SimWorld.request_events`
    request_events: list[tuple[float, str, str, dict[str, Any]]] = dataclasses.field(
        default_factory=list
    )
    # per rollout step: (start, end) as `pearl run` measures a batch, and the engine's
    # prediction at its start (`Driver.predicted_makespans_s`)
    step_spans_s: dict[int, tuple[float, float]] = dataclasses.field(default_factory=dict)
    step_predicted_s: dict[int, float | None] = dataclasses.field(default_factory=dict)

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
) -> tuple[SimWorld, Any, Driver, float]:
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
    # The run's staleness bound and the controller knobs reach the controller as in
    # `pearl run` (runtime/control_setup.py); the trainer and the bound read the same field.
    policy = apply_knobs(policy, cfg.controller, max_staleness=cfg.rollout.max_staleness)
    static = cfg.trace.static_gpus is not None
    borrowing = not static if cfg.trace.borrowing is None else cfg.trace.borrowing
    world = SimWorld(cfg, trace_acts if actions is None else actions, borrowing=borrowing)
    controller = Controller(
        policy,
        state=ClusterState(gpus=world.dedicated),
        batch_size=cfg.rollout.batch_size,
        group_size=_group_size(cfg.rollout.batch_size),
        gpus_per_worker=cfg.cluster.gpus_per_worker,
        training_gpus=world.training_gpus if borrowing else (),
        advisor=policy.make_advisor(
            hardware=hardware_prior(cfg),
            batch_size=cfg.rollout.batch_size,
            gpus_per_worker=cfg.cluster.gpus_per_worker,
            engine_config=decision_config(
                cfg.controller, gpus_per_worker=cfg.cluster.gpus_per_worker
            ),
        ),
        check_every=cfg.check_every,
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
    # as `pearl run` reports it: events that made no sense for the state they met (the
    # run directory's decisions.jsonl says which and why)
    summary["ignored_events"] = len(controller.ignored)
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
        request_events=list(world.request_events),
        step_spans_s=dict(world.step_spans_s),
        step_predicted_s=dict(driver.predicted_makespans_s),
    )
