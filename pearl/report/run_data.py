"""A run directory read back: states, decisions, events, steps and summary, plus the figures
derived from them (per-step throughput, makespan-prediction error, event counts).

Reads what `pearl.report.rundir.RunRecorder` writes, for `pearl run` and `pearl simulate`
alike (one format, no branch per world). Every file is optional and read leniently: a
malformed line (e.g. one cut short by a crash) is skipped and counted. Steps recorded twice (a resumed run redoes
the steps after its last checkpoint) count once: the last line of each step wins.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pearl.control.state import ClusterState, StateError

# Event kinds that change the cluster or the PD configuration: listed one by one with reasons.
RECONFIG_KINDS = ("preemption", "expansion", "borrow", "return", "pd_reconfig", "worker_failed")
# Event kinds that happen per request: only counted.
COUNTED_ONLY = ("interrupt", "resume")
# What a simulated run summary's "reconfigurations" counts (`pearl.sim.telemetry_out`), said
# wherever they are shown beside events.jsonl's counts of groups and decisions.
RECONFIGURATIONS_MEANING = (
    "expand and borrow count workers started, on preemptible GPUs after the start and on "
    "training GPUs; return counts hand-backs to training, reclaim the reclaims that hit a "
    "worker"
)


@dataclass
class RunData:
    """Everything read from a run directory (lists in file order, steps sorted by step)."""

    run_dir: Path
    config: dict[str, Any] = field(default_factory=dict)
    config_text: str = ""
    states: list[tuple[float, ClusterState]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    skipped_lines: dict[str, int] = field(default_factory=dict)
    has_events: bool = False  # events.jsonl exists (a run with no event has none)

    def end_s(self) -> float:
        """The latest time any record mentions (0 if none)."""
        times = [t for t, _ in self.states]
        for doc in (*self.decisions, *self.events, *self.steps):
            t = num(doc.get("t_s"))
            if t is not None:
                times.append(t)
        return max(times, default=0.0)


def num(x: Any) -> float | None:
    """`x` as a float if it is a finite number (not a bool), else None."""
    if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def _read_jsonl(path: Path, data: RunData) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    bad = 0
    with path.open() as fh:
        for line in fh:
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                doc = json.loads(text)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(doc, dict):
                out.append(doc)
            else:
                bad += 1
    if bad:
        data.skipped_lines[path.name] = data.skipped_lines.get(path.name, 0) + bad
    return out


def load_run(run_dir: Path) -> RunData:
    """Read a run directory leniently (see the module docstring)."""
    d = Path(run_dir)
    data = RunData(d)
    cfg = d / "config.yaml"
    if cfg.is_file():
        data.config_text = cfg.read_text()
        try:
            parsed = yaml.safe_load(data.config_text)
        except yaml.YAMLError:
            parsed = None
        data.config = parsed if isinstance(parsed, dict) else {}
    for doc in _read_jsonl(d / "states.jsonl", data):
        try:
            data.states.append((float(doc["t_s"]), ClusterState.from_json(doc["state"])))
        except (KeyError, TypeError, ValueError, StateError):
            data.skipped_lines["states.jsonl"] = data.skipped_lines.get("states.jsonl", 0) + 1
    data.states.sort(key=lambda ts: ts[0])
    data.decisions = _read_jsonl(d / "decisions.jsonl", data)
    data.has_events = (d / "events.jsonl").is_file()
    data.events = [
        e for e in _read_jsonl(d / "events.jsonl", data) if isinstance(e.get("kind"), str)
    ]
    steps = _read_jsonl(d / "steps.jsonl", data)
    last: dict[int, dict[str, Any]] = {}
    for s in steps:
        if isinstance(s.get("step"), int):
            last[s["step"]] = s  # a resumed run's redo of a step replaces the first try
    data.steps = [last[k] for k in sorted(last)]
    for name in ("metrics.json",):
        p = d / name
        if p.is_file() and not data.summary:
            try:
                doc = json.loads(p.read_text())
            except json.JSONDecodeError:
                continue
            if isinstance(doc, dict):
                inner = doc.get("summary")
                data.summary = inner if isinstance(inner, dict) else doc
    return data


# -- derived figures ----------------------------------------------------------------------


def throughput(step: dict[str, Any]) -> float | None:
    """Trajectories per second of a step's rollout (None if not measurable)."""
    n, m = num(step.get("trajectories")), num(step.get("rollout_makespan_s"))
    return n / m if n is not None and m is not None and m > 0 else None


def rel_error(step: dict[str, Any]) -> float | None:
    """(predicted - measured) / measured rollout makespan of a step (None if unknown)."""
    p, m = num(step.get("predicted_makespan_s")), num(step.get("rollout_makespan_s"))
    return (p - m) / m if p is not None and m is not None and m > 0 else None


def event_counts(events: list[dict[str, Any]]) -> dict[str, int]:
    """Events per kind, every known kind present (0 when none)."""
    counts = {k: 0 for k in (*RECONFIG_KINDS, *COUNTED_ONLY)}
    for e in events:
        counts[e["kind"]] = counts.get(e["kind"], 0) + 1
    return counts


def run_metrics(run: RunData) -> dict[str, Any]:
    """The per-step series, the event counts and the makespan-prediction error of a run."""
    keys = dict.fromkeys(k for s in run.steps for k, v in s.items() if num(v) is not None)
    series: dict[str, list[Any]] = {"step": [s["step"] for s in run.steps]}
    for k in keys:  # every numeric per-step metric, in first-seen order
        series.setdefault(k, [num(s.get(k)) for s in run.steps])
    series["trajectories_per_s"] = [throughput(s) for s in run.steps]
    series["makespan_rel_error"] = [rel_error(s) for s in run.steps]
    errs = [e for e in (rel_error(s) for s in run.steps) if e is not None]
    return {
        "num_steps": len(run.steps),
        "series": series,
        "event_counts": event_counts(run.events),
        "makespan_prediction": {
            "num_steps": len(errs),
            "median_abs_rel_error": statistics.median(abs(e) for e in errs) if errs else None,
            "median_rel_error": statistics.median(errs) if errs else None,
        },
    }
