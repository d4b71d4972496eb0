"""The report of one run directory: report.md plus timeline, reward, throughput and makespan PNGs.

Reads what `pearl.runtime.rundir.RunRecorder` writes (config.yaml, states.jsonl,
decisions.jsonl, events.jsonl, steps.jsonl, telemetry.jsonl, metrics.json). Every file is
optional and read leniently: a malformed line (e.g. cut short by a crash) is skipped and
counted, so the report of a crashed or simulated run still comes out. A simulator run
directory (telemetry.jsonl, decisions.jsonl, summary.json, config.yaml) gets per-step
makespans derived from its telemetry.

Steps recorded twice (a resumed run redoes the steps after its last checkpoint) count once:
the last line of each step wins.
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
from pearl.report.timeline import plot_series, plot_timeline, segments

# Event kinds that change the cluster or the PD configuration: listed one by one with reasons.
RECONFIG_KINDS = ("preemption", "expansion", "borrow", "return", "pd_reconfig", "worker_failed")
# Event kinds that happen per request: only counted.
COUNTED_ONLY = ("interrupt", "resume")


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

    def end_s(self) -> float:
        """The latest time any record mentions (0 if none)."""
        times = [t for t, _ in self.states]
        for doc in (*self.decisions, *self.events, *self.steps):
            t = doc.get("t_s")
            if _num(t):
                times.append(float(t))
        return max(times, default=0.0)


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


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


def _steps_from_telemetry(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rollout step: measured makespan (first queue to last turn end) and trajectories."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for t in turns:
        if t.get("kind") == "turn" and isinstance(t.get("step"), int):
            by_step.setdefault(t["step"], []).append(t)
    out = []
    for step, ts in sorted(by_step.items()):
        starts = [t["t_queued_s"] for t in ts if _num(t.get("t_queued_s"))]
        ends = [
            t["t_env_end_s"] if _num(t.get("t_env_end_s")) else t.get("t_decode_end_s") for t in ts
        ]
        ends = [e for e in ends if _num(e)]
        doc: dict[str, Any] = {"step": step, "trajectories": len({t.get("traj_id") for t in ts})}
        if starts and ends:
            doc["rollout_makespan_s"] = max(ends) - min(starts)
            doc["t_s"] = max(ends)
        out.append(doc)
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
    data.events = [
        e for e in _read_jsonl(d / "events.jsonl", data) if isinstance(e.get("kind"), str)
    ]
    steps = _read_jsonl(d / "steps.jsonl", data)
    if not steps and (d / "telemetry.jsonl").is_file():
        steps = _steps_from_telemetry(_read_jsonl(d / "telemetry.jsonl", data))
    last: dict[int, dict[str, Any]] = {}
    for s in steps:
        if isinstance(s.get("step"), int):
            last[s["step"]] = s  # a resumed run's redo of a step replaces the first try
    data.steps = [last[k] for k in sorted(last)]
    for name in ("metrics.json", "summary.json"):
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
    n, m = step.get("trajectories"), step.get("rollout_makespan_s")
    return n / m if _num(n) and _num(m) and m > 0 else None


def rel_error(step: dict[str, Any]) -> float | None:
    """(predicted - measured) / measured rollout makespan of a step (None if unknown)."""
    p, m = step.get("predicted_makespan_s"), step.get("rollout_makespan_s")
    return (p - m) / m if _num(p) and _num(m) and m > 0 else None


def event_counts(events: list[dict[str, Any]]) -> dict[str, int]:
    """Events per kind, every known kind present (0 when none)."""
    counts = {k: 0 for k in (*RECONFIG_KINDS, *COUNTED_ONLY)}
    for e in events:
        counts[e["kind"]] = counts.get(e["kind"], 0) + 1
    return counts


def run_metrics(run: RunData) -> dict[str, Any]:
    """The per-step series, the event counts and the makespan-prediction error of a run."""
    keys = ("reward_mean", "version", "rollout_makespan_s", "predicted_makespan_s")
    series: dict[str, list[Any]] = {"step": [s["step"] for s in run.steps]}
    for k in (*keys, "trajectories", "tokens", "t_s", "wall_s"):
        if any(k in s for s in run.steps):
            series[k] = [s.get(k) for s in run.steps]
    series["trajectories_per_s"] = [throughput(s) for s in run.steps]
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


# -- the report ---------------------------------------------------------------------------


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}" if math.isfinite(x) else "-"
    return str(x)


def _config_lines(cfg: dict[str, Any]) -> list[str]:
    def get(*path: str) -> Any:
        node: Any = cfg
        for p in path:
            node = node.get(p) if isinstance(node, dict) else None
        return node

    known = [
        ("seed", get("seed")),
        ("model", get("model", "checkpoint_dir") or ("tiny" if get("model") else None)),
        ("environment", get("env", "name")),
        ("batch (B) / group", _pair(get("rollout", "batch_size"), get("rollout", "group_size"))),
        ("training steps", get("trainer", "num_steps")),
        ("policy", get("controller", "policy")),
        (
            "device slots (dedicated / training)",
            _pair(get("cluster", "num_dedicated"), get("cluster", "num_training")),
        ),
        ("trace", get("trace", "source")),
        ("cluster address", get("cluster", "address")),
    ]
    return [f"- {k}: {v}" for k, v in known if v is not None]


def _summary_value(v: Any) -> str:
    if isinstance(v, dict):
        flat = ", ".join(
            f"{k}={_fmt(x, 3)}" for k, x in v.items() if not isinstance(x, dict | list)
        )
        return flat or "-"
    return _fmt(v, 3)


def _pair(a: Any, b: Any) -> str | None:
    return None if a is None and b is None else f"{_fmt(a)} / {_fmt(b)}"


def _tokens(s: dict[str, Any]) -> Any:
    return s.get("tokens", s.get("generated_tokens"))


def _error_cell(s: dict[str, Any]) -> str:
    err = rel_error(s)
    return "-" if err is None else f"{err:+.0%}"


# (header, cell, shown only when some step has one of these keys; () = always)
_STEP_COLUMNS: tuple[tuple[str, Any, tuple[str, ...]], ...] = (
    ("step", lambda s: _fmt(s["step"]), ()),
    ("version", lambda s: _fmt(s.get("version")), ("version",)),
    ("config", lambda s: _fmt(s.get("config")), ("config",)),
    ("reward", lambda s: _fmt(s.get("reward_mean"), 3), ()),
    ("trajectories", lambda s: _fmt(s.get("trajectories")), ()),
    ("makespan (s)", lambda s: _fmt(s.get("rollout_makespan_s")), ()),
    ("predicted (s)", lambda s: _fmt(s.get("predicted_makespan_s")), ()),
    ("error", _error_cell, ()),
    ("traj/s", lambda s: _fmt(throughput(s)), ()),
    ("tokens", lambda s: _fmt(_tokens(s)), ("tokens", "generated_tokens")),
    (
        "interrupted",
        lambda s: _fmt(s.get("interrupted_trajectories")),
        ("interrupted_trajectories",),
    ),
    ("train (s)", lambda s: _fmt(s.get("train_time_s")), ("train_time_s",)),
    ("wall (s)", lambda s: _fmt(s.get("wall_s")), ("wall_s",)),
)


def _step_table(steps: list[dict[str, Any]]) -> list[str]:
    cols = [c for c in _STEP_COLUMNS if not c[2] or any(k in s for s in steps for k in c[2])]
    lines = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for s in steps:
        lines.append("| " + " | ".join(c[1](s) for c in cols) + " |")
    return lines


def _detail(e: dict[str, Any]) -> str:
    rest = {k: v for k, v in e.items() if k not in ("t_s", "kind", "reason")}
    if not rest:
        return ""
    text = ", ".join(
        f"{k}={v if not isinstance(v, list) else ','.join(map(str, v))}" for k, v in rest.items()
    )
    return f" ({text})"


def _decision_text(d: dict[str, Any]) -> str:
    """One line per decision doc: a controller narrative string or a decision engine doc."""
    if isinstance(d.get("decision"), str):
        return d["decision"]
    when = f"t={_fmt(d.get('t_s'), 3)}: "
    if "chosen" in d:
        verb = f"{d.get('current')} -> {d['chosen']}" if d.get("switch") else f"keep {d['chosen']}"
        forced = " (forced)" if d.get("forced") else ""
        return f"{when}{verb}{forced}: {d.get('reason', '')}"
    rest = {k: v for k, v in d.items() if k not in ("t_s", "candidates")}
    return when + ", ".join(f"{k}={v}" for k, v in rest.items())


def _decision_lines(decisions: list[dict[str, Any]], limit: int = 60) -> list[str]:
    switches = sum(1 for d in decisions if d.get("switch"))
    lines = [f"{len(decisions)} decision(s)" + (f", {switches} switch(es)." if switches else ".")]
    if decisions:
        lines.append("")
    lines += [f"- {_decision_text(d)}" for d in decisions[:limit]]
    if len(decisions) > limit:
        lines.append(f"- ... and {len(decisions) - limit} more in decisions.jsonl")
    return lines


def _plots(run: RunData) -> dict[str, str]:
    """Draw the PNGs the data allows; returns {title: file name}."""
    out: dict[str, str] = {}
    d = run.run_dir
    if run.states:
        segs = segments(run.states, end_s=run.end_s())
        plot_timeline(segs, d / "timeline.png", title="devices: zone, role and status over time")
        out["Timeline of every device"] = "timeline.png"
    xs = [float(s["step"]) for s in run.steps]
    rewards = [s.get("reward_mean") for s in run.steps]
    if any(_num(r) for r in rewards):
        vals = [float(r) if _num(r) else math.nan for r in rewards]
        plot_series(xs, {"mean reward": vals}, d / "reward.png", xlabel="step", title="reward")
        out["Reward per step"] = "reward.png"
    tput = [throughput(s) for s in run.steps]
    if any(t is not None for t in tput):
        vals = [math.nan if t is None else t for t in tput]
        plot_series(
            xs, {"trajectories/s": vals}, d / "throughput.png", xlabel="step", title="throughput"
        )
        out["Rollout throughput per step"] = "throughput.png"
    meas = [s.get("rollout_makespan_s") for s in run.steps]
    pred = [s.get("predicted_makespan_s") for s in run.steps]
    if any(_num(p) for p in pred) and any(_num(m) for m in meas):
        series = {
            "measured": [float(m) if _num(m) else math.nan for m in meas],
            "predicted": [float(p) if _num(p) else math.nan for p in pred],
        }
        plot_series(xs, series, d / "makespan.png", xlabel="step", title="rollout makespan (s)")
        out["Rollout makespan, measured vs predicted"] = "makespan.png"
    return out


def render_markdown(run: RunData, plots: dict[str, str]) -> str:
    """The text of report.md."""
    m = run_metrics(run)
    counts = m["event_counts"]
    lines = [f"# PEARL run report: {run.run_dir.name}", "", "## Configuration", ""]
    lines += _config_lines(run.config) or ["- (no config.yaml)"]
    shown = {k: v for k, v in run.summary.items() if isinstance(v, str | int | float | bool | dict)}
    if shown:
        lines += ["", "## Summary", ""] + [f"- {k}: {_summary_value(v)}" for k, v in shown.items()]
    lines += ["", "## Steps", ""]
    lines += _step_table(run.steps) if run.steps else ["No steps recorded."]
    mp = m["makespan_prediction"]
    lines += ["", "## Makespan prediction", ""]
    if mp["num_steps"]:
        lines.append(
            f"Median relative error of predicted vs measured rollout makespan: "
            f"{mp['median_abs_rel_error']:.1%} over {mp['num_steps']} step(s) "
            f"(median signed error {mp['median_rel_error']:+.1%})."
        )
    else:
        lines.append("No step has both a predicted and a measured makespan.")
    lines += [
        "",
        "## Elasticity and reconfiguration",
        "",
        f"- preemptions: {counts['preemption']}",
        f"- expansions: {counts['expansion']}",
        f"- borrows / returns: {counts['borrow']} / {counts['return']}",
        f"- PD reconfigurations: {counts['pd_reconfig']}",
        f"- worker failures: {counts['worker_failed']}",
        f"- interrupted / resumed requests: {counts['interrupt']} / {counts['resume']}",
        "",
    ]
    reconfig = [e for e in run.events if e["kind"] not in COUNTED_ONLY]
    if reconfig:
        lines += ["### Events", ""]
        for e in sorted(reconfig, key=lambda e: e.get("t_s") if _num(e.get("t_s")) else 0.0):
            lines.append(
                f"- t={_fmt(e.get('t_s'), 1)} s **{e['kind']}**: "
                f"{e.get('reason') or '(no reason given)'}{_detail(e)}"
            )
        lines.append("")
    lines += ["## Controller decisions", ""] + _decision_lines(run.decisions) + [""]
    if plots:
        lines += ["## Plots", ""]
        for title, name in plots.items():
            lines += [f"### {title}", "", f"![{title}]({name})", ""]
    if run.skipped_lines:
        skipped = ", ".join(f"{k}: {v}" for k, v in sorted(run.skipped_lines.items()))
        lines += [f"_Skipped unreadable lines: {skipped}._", ""]
    if run.config_text:
        lines += ["<details><summary>config.yaml</summary>", "", "```yaml"]
        lines += [run.config_text.rstrip(), "```", "", "</details>", ""]
    return "\n".join(lines)


def build_report(run_dir: Path) -> Path:
    """Write report.md and the PNGs it links into `run_dir`; returns report.md's path."""
    run = load_run(run_dir)
    plots = _plots(run)
    path = Path(run_dir) / "report.md"
    path.write_text(render_markdown(run, plots))
    return path
