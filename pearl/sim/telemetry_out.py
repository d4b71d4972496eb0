"""Telemetry of a simulated run in the shared schema (`pearl.control.telemetry`).

The simulator fills the same `TurnRecord` / `WorkerStepRecord` the real runtime writes, so
the runtime tracker learns from simulated runs exactly as from real ones.
`TurnTiming` collects a turn's timestamps while it moves through prefill, KV transfer and
decode; `turn_record` freezes it. Worker iteration statistics come from the inference
model as interval aggregates (`StepStats`); `worker_step_record` turns one interval into
its *mean iteration* (batch size, tokens and time per iteration), a representative sample.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pearl.control.state import ClusterState
from pearl.control.telemetry import TurnRecord, WorkerStepRecord
from pearl.control.telemetry import turn_record as make_turn_record
from pearl.control.telemetry_jsonl import TelemetryMeta, write_jsonl
from pearl.report.rundir import TELEMETRY_FILE, RunRecorder, command_doc, is_run_dir
from pearl.sim.physics.inference_types import StepStats
from pearl.sim.run_events import run_events


@dataclass(slots=True)
class TurnTiming:
    """Mutable timestamps and counts of one turn in flight."""

    t_queued_s: float
    weight_version: int = 0
    prefill_worker: str = ""
    decode_worker: str | None = None
    roles: tuple[str, ...] = ()
    new_prefill_tokens: int = 0
    cached_prefix_tokens: int = 0
    context_tokens: int = 0
    t_prefill_start_s: float | None = None
    t_prefill_end_s: float | None = None
    t_kv_start_s: float | None = None
    t_kv_end_s: float | None = None
    t_decode_start_s: float | None = None
    interrupted: bool = False
    resumed: bool = False


def turn_record(
    timing: TurnTiming,
    *,
    traj_id: str,
    turn: int,
    step: int,
    decode_tokens: int,
    t_decode_end_s: float,
    t_env_start_s: float | None,
    t_env_end_s: float | None,
) -> TurnRecord:
    """Freeze a finished turn through the one `TurnRecord` constructor
    (`pearl.control.telemetry.turn_record`)."""
    return make_turn_record(
        traj_id=traj_id,
        turn=turn,
        step=step,
        weight_version=timing.weight_version,
        prefill_worker=timing.prefill_worker,
        decode_worker=timing.decode_worker,
        roles=timing.roles,
        context_tokens=timing.context_tokens,
        new_prefill_tokens=timing.new_prefill_tokens,
        cached_prefix_tokens=timing.cached_prefix_tokens,
        decode_tokens=decode_tokens,
        t_queued_s=timing.t_queued_s,
        t_prefill_start_s=timing.t_prefill_start_s,
        t_prefill_end_s=timing.t_prefill_end_s,
        t_kv_start_s=timing.t_kv_start_s,
        t_kv_end_s=timing.t_kv_end_s,
        t_decode_start_s=timing.t_decode_start_s,
        t_decode_end_s=t_decode_end_s,
        t_env_start_s=t_env_start_s,
        t_env_end_s=t_env_end_s,
        interrupted=timing.interrupted,
        resumed=timing.resumed,
    )


def worker_step_record(
    stats: StepStats, step: int, kv_capacity_tokens: int | None = None
) -> WorkerStepRecord | None:
    """The mean iteration of a worker over an interval (None if it ran no iteration);
    `kv_capacity_tokens` is the worker's KV pool, reported as a real engine logs it."""
    n = stats.num_iterations
    if n <= 0:
        return None
    return WorkerStepRecord(
        worker_id=stats.worker_id,
        role=stats.role,
        step=step,
        t_s=stats.t_end_s,
        batch_size=max(1, round(stats.decode_seq_steps / n)),
        prefill_tokens=round(stats.prefill_tokens / n),
        decode_tokens=round(stats.decode_tokens / n),
        context_tokens=round(stats.decode_context_steps / n),
        step_time_s=stats.busy_s / n,
        kv_capacity_tokens=kv_capacity_tokens,
    )


def write_run_dir(
    out_dir: Path,
    *,
    turns: Iterable[TurnRecord],
    worker_steps: Iterable[WorkerStepRecord],
    meta: TelemetryMeta,
    history: Iterable[tuple[float, ClusterState]],
    commands: Iterable[tuple[float, Any]],
    decisions: Iterable[dict[str, Any]],
    summary: dict[str, Any],
    config_yaml: str,
    request_events: Iterable[tuple[float, str, str, dict[str, Any]]] = (),
    step_spans_s: dict[int, tuple[float, float]] | None = None,
    step_predicted_s: dict[int, float | None] | None = None,
) -> Path:
    """One policy's simulation as a run directory in the format `pearl run` writes
    (`pearl.report.rundir`): config, states, decisions, events, telemetry, per-rollout-step
    metrics, then metrics.json and the report. Returns the report's path.

    A directory holding an earlier simulation's run directory is replaced; any other
    non-empty directory is refused (`InputError`), as `pearl run` does."""
    if out_dir.exists() and is_run_dir(out_dir) and (out_dir / SIM_MARK).is_file():
        shutil.rmtree(out_dir)
    turns, history, decisions = list(turns), list(history), list(decisions)
    rec = RunRecorder(out_dir, config_yaml)
    (out_dir / SIM_MARK).write_text("written by pearl simulate\n")
    for t, state in history:
        rec.record_state(t, state)
    for d in decisions:
        rec.record_decision(d)
    for t, kind, reason, detail in run_events(history, commands, decisions, request_events):
        rec.record_event(t, kind, reason, **detail)
    with (out_dir / TELEMETRY_FILE).open("w") as fh:
        write_jsonl(fh, [*turns, *worker_steps], meta)
    for doc in rollout_steps(turns, step_spans_s, step_predicted_s):
        rec.record_step(doc.pop("step"), doc)
    return rec.finish(summary)


SIM_MARK = ".pearl-simulate"  # marks a run directory `pearl simulate` may replace


def rollout_steps(
    turns: Iterable[TurnRecord],
    spans_s: dict[int, tuple[float, float]] | None = None,
    predicted_s: dict[int, float | None] | None = None,
) -> list[dict[str, Any]]:
    """Per rollout step: its trajectories, generated tokens, interrupted trajectories and
    measured makespan, the series the report plots. The makespan is the world's span of the step where `spans_s` has it (from its
    StartRolloutBatch to its last trajectory done, as `pearl run` measures a batch), else
    from the first turn queued to the last turn's end, environment step included.
    `predicted_s`: the decision engine's makespan at the step's start (`pearl run` records
    it too), for the report's prediction error."""
    spans_s = spans_s or {}
    predicted_s = predicted_s or {}
    by_step: dict[int, list[TurnRecord]] = {}
    for t in turns:
        by_step.setdefault(t.step, []).append(t)
    out = []
    for step, ts in sorted(by_step.items()):
        start = min(t.t_queued_s for t in ts)
        end = max(t.t_env_end_s if t.t_env_end_s is not None else t.t_decode_end_s for t in ts)
        if step in spans_s:
            start, end = spans_s[step]
        out.append(
            {
                "step": step,
                "trajectories": len({t.traj_id for t in ts}),
                "rollout_makespan_s": end - start,
                "predicted_makespan_s": predicted_s.get(step),
                "t_s": end,
                # as `pearl run` records them: generated tokens, and the trajectories a
                # reclaim or a return of borrowed GPUs interrupted
                "generated_tokens": sum(t.decode_tokens for t in ts),
                "interrupted_trajectories": len({t.traj_id for t in ts if t.interrupted}),
            }
        )
    return out


# -- run summaries and decision logs ---------------------------------------------------------
# what each counts: pearl.report.run_data.RECONFIGURATIONS_MEANING
_RECONF_KEYS = ("expand", "borrow", "return", "reclaim", "role_change", "init_failed")


def summarise(world: Any, log: Any, duration_s: float) -> dict[str, Any]:
    """Per-policy figures: throughput, makespan, reconfigurations by kind, GPU-hours."""
    st = world.stats
    hours = duration_s / 3600.0
    reconf: Counter[str] = Counter({k: 0 for k in _RECONF_KEYS})
    for t, c in log.command_log:
        kind = type(c).__name__
        if kind == "InitWorker":
            on_training = any(g in world.trainer.gpu_ids for g in c.gpu_ids)
            if on_training:
                reconf["borrow"] += 1
            elif t > 0.0:  # rollout workers made at time 0 are the initial pool
                reconf["expand"] += 1
        elif kind == "ReleaseGpus" and c.to == "training":
            reconf["return"] += 1
        elif kind == "ChangeRole":
            reconf["role_change"] += 1
    reconf["reclaim"] = st.reclaims
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
        "bounced_routes": st.bounced_routes,
        "prefix_cache_hit_rate": st.cached_prefix_tokens / prefill_total if prefill_total else 0.0,
        "prefill_token_share": (
            st.prefill_tokens / (st.prefill_tokens + st.decode_tokens)
            if st.prefill_tokens + st.decode_tokens
            else 0.0
        ),
        "training_wait_for_gpus_s": world.trainer.wait_for_gpus_s,
        "training_busy_gpu_hours": world.trainer.busy_s(duration_s)
        * len(world.trainer.gpu_ids)
        / 3600.0,
        "transition_gpu_hours": _transition_gpu_s(log.history, duration_s) / 3600.0
        if log.history
        else None,
        "gpu_hours": {
            **{z: s / 3600.0 for z, s in sorted(gpu_s.items())},
            "total": sum(gpu_s.values()) / 3600.0,
        },
        "available_preemptible_gpu_hours": st.gpu_s_by_zone.get("preemptible", 0.0) / 3600.0,
        "num_events": log.num_events,
        "num_commands": log.num_commands,
    }


def _transition_gpu_s(history: list[tuple[float, Any]], until_s: float) -> float:
    """GPU-seconds held by workers that serve nothing (initialising, draining, inactive),
    from the controller's state after each change."""
    total = 0.0
    for (t0, state), nxt in zip(history, [*history[1:], (until_s, None)], strict=True):
        dt = max(0.0, min(nxt[0], until_s) - t0)
        if dt:
            total += dt * sum(len(w.gpu_ids) for w in state.workers if w.status.value != "active")
    return total


def safe_name(policy: str) -> str:
    return policy.replace("+", "plus").replace(":", "_").replace("/", "_")


def decision_docs(controller: Any, log: Any) -> list[dict[str, Any]]:
    """The lines of decisions.jsonl: the controller's notes (decisions and the events it
    ignored, with why) and every command but Route, in time order (stable: at one instant,
    notes first), in the format `pearl run` writes (`pearl.report.rundir`)."""
    docs = [n.to_json() for n in controller.notes]
    docs += [command_doc(t, c) for t, c in log.command_log]
    return sorted(docs, key=lambda d: float(d["t_s"]))


def rounded(doc: Any) -> Any:
    if isinstance(doc, float):
        return round(doc, 4)
    if isinstance(doc, dict):
        return {k: rounded(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [rounded(v) for v in doc]
    return doc
