"""The report of one run directory: report.md plus timeline, reward, throughput and makespan PNGs.

Reads the run directory through `pearl.report.run_data` (leniently: a crashed run or a
simulator output folder still gets a report) and writes report.md and the PNGs it links.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pearl.report.run_data import (
    COUNTED_ONLY,
    RECONFIG_KINDS,
    RECONFIGURATIONS_MEANING,
    RunData,
    load_run,
    num,
    rel_error,
    run_metrics,
    throughput,
)
from pearl.report.timeline import plot_series, plot_timeline, segments

__all__ = ["build_report", "load_run", "render_markdown", "run_metrics"]

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
        (
            "length limit / tokens a turn",
            _pair(get("rollout", "max_context_tokens"), get("rollout", "max_new_tokens")),
        ),
        ("training steps", get("trainer", "num_steps")),
        ("policy", get("controller", "policy")),
        ("engine backend", get("engine", "backend")),
        ("PD modes allowed", ", ".join(get("controller", "modes") or []) or None),
        ("KV transport", get("cluster", "kv_transport")),
        (
            "device slots (dedicated / training)",
            _pair(  # run dirs written before the shared names use the old ones
                get("cluster", "num_dedicated_gpus") or get("cluster", "num_dedicated"),
                get("cluster", "num_training_gpus") or get("cluster", "num_training"),
            ),
        ),
        ("trace", get("trace", "source")),
        ("cluster address", get("cluster", "address")),
    ]
    return [f"- {k}: {v}" for k, v in known if v is not None]


def _summary_line(k: str, v: Any) -> str:
    line = f"- {k}: {_summary_value(v)}"
    if k == "reconfigurations":  # a like name to the events' counts below, another unit
        line += f"; {RECONFIGURATIONS_MEANING} (the events below count groups and decisions)"
    return line


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
    (
        "cut by length",
        lambda s: _fmt(s.get("truncated_trajectories")),
        ("truncated_trajectories",),
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


def _note_text(d: dict[str, Any]) -> str:
    """A decisions.jsonl note as one line, "t=12.345: text" (`ControlNote.to_json`). Run
    directories written before 2026-12-07 held {"decision"|"ignored": "t=...: text"} from
    `pearl run` and {"kind", "value": "t=...: text"} from `pearl simulate`."""
    if isinstance(d.get("text"), str):
        return f"t={_fmt(d.get('t_s'), 3)}: {d['text']}"
    for key in ("decision", "ignored", "value"):
        if isinstance(d.get(key), str):
            return str(d[key])
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _note_kind(d: dict[str, Any]) -> str:
    """ "decision", "ignored" or "command" (see `_note_text` for the older lines)."""
    kind = d.get("kind")
    if kind in ("decision", "ignored", "command"):
        return str(kind)
    return "ignored" if "ignored" in d else "decision"


def _decision_lines(docs: list[dict[str, Any]], limit: int = 60) -> list[str]:
    decisions = [d for d in docs if _note_kind(d) == "decision"]
    ignored = [d for d in docs if _note_kind(d) == "ignored"]
    commands = len(docs) - len(decisions) - len(ignored)
    lines = [f"{len(decisions)} decision(s)."]
    if commands:
        lines[0] += f" ({commands} command(s) also in decisions.jsonl.)"
    if decisions:
        lines.append("")
    lines += [f"- {_note_text(d)}" for d in decisions[:limit]]
    if len(decisions) > limit:
        lines.append(f"- ... and {len(decisions) - limit} more in decisions.jsonl")
    if ignored:
        lines += [
            "",
            f"{len(ignored)} event(s) ignored by the controller (stale, duplicate or "
            "not for this policy), first ones:",
            "",
        ]
        lines += [f"- {_note_text(d)}" for d in ignored[:5]]
    return lines


def _nan_for_none(xs: list[float | None]) -> list[float]:
    return [math.nan if x is None else x for x in xs]


def _plots(run: RunData) -> dict[str, str]:
    """Draw the PNGs the data allows; returns {title: file name}."""
    out: dict[str, str] = {}
    d = run.run_dir
    if run.states:
        segs = segments(run.states, end_s=run.end_s())
        plot_timeline(segs, d / "timeline.png", title="devices: zone, role and status over time")
        out["Timeline of every device"] = "timeline.png"
    xs = [float(s["step"]) for s in run.steps]
    rewards = [num(s.get("reward_mean")) for s in run.steps]
    if any(r is not None for r in rewards):
        series: dict[str, Sequence[float]] = {"mean reward": _nan_for_none(rewards)}
        plot_series(xs, series, d / "reward.png", xlabel="step", title="reward")
        out["Reward per step"] = "reward.png"
    tput = [throughput(s) for s in run.steps]
    if any(t is not None for t in tput):
        series = {"trajectories/s": _nan_for_none(tput)}
        plot_series(xs, series, d / "throughput.png", xlabel="step", title="throughput")
        out["Rollout throughput per step"] = "throughput.png"
    meas = [num(s.get("rollout_makespan_s")) for s in run.steps]
    pred = [num(s.get("predicted_makespan_s")) for s in run.steps]
    if any(p is not None for p in pred) and any(m is not None for m in meas):
        series = {"measured": _nan_for_none(meas), "predicted": _nan_for_none(pred)}
        plot_series(xs, series, d / "makespan.png", xlabel="step", title="rollout makespan (s)")
        out["Rollout makespan, measured vs predicted"] = "makespan.png"
    return out


def _truncation_note(run: RunData) -> list[str]:
    """A paragraph when trajectories ended at the length limit before their task did."""
    cut = sum(int(s.get("truncated_trajectories") or 0) for s in run.steps)
    if not cut:
        return []
    total = sum(int(s.get("trajectories") or 0) for s in run.steps)
    limit = (run.config.get("rollout") or {}).get("max_context_tokens")
    at = f" ({limit} tokens)" if limit is not None else ""
    return [
        "",
        f"{cut} of {total} trajectories ended at the length limit, "
        f"`rollout.max_context_tokens`{at}, before their task did; each kept the reward "
        "it had earned by then. Raise the limit if the task needs longer contexts.",
    ]


def render_markdown(run: RunData, plots: dict[str, str]) -> str:
    """The text of report.md."""
    m = run_metrics(run)
    counts = m["event_counts"]
    lines = [f"# PEARL run report: {run.run_dir.name}", "", "## Configuration", ""]
    lines += _config_lines(run.config) or ["- (no config.yaml)"]
    shown = {k: v for k, v in run.summary.items() if isinstance(v, str | int | float | bool | dict)}
    if shown:
        lines += ["", "## Summary", ""] + [_summary_line(k, v) for k, v in shown.items()]
    lines += ["", "## Steps", ""]
    lines += _step_table(run.steps) if run.steps else ["No steps recorded."]
    lines += _truncation_note(run)
    mp = m["makespan_prediction"]
    lines += ["", "## Makespan prediction", ""]
    if mp["num_steps"]:
        lines.append(
            f"Median relative error of predicted vs measured rollout makespan: "
            f"{mp['median_abs_rel_error']:.1%} over {mp['num_steps']} step(s) "
            f"(median signed error {mp['median_rel_error']:+.1%}). The decision engine "
            f"predicts a batch alone on the configuration active at its start; a step that "
            f"shares the GPUs with the batch before it (staleness) or gains or loses workers "
            f"while it runs can differ by more (docs/simulator.md)."
        )
    else:
        lines.append("No step has both a predicted and a measured makespan.")
    lines += ["", "## Elasticity and reconfiguration", ""]
    if not run.has_events:
        lines += ["No events.jsonl in this directory (see the summary for any counters).", ""]
    else:
        lines += [
            f"- preemptions: {counts['preemption']}",
            f"- expansions (groups of workers admitted on preemptible GPUs): {counts['expansion']}",
            f"- borrows / returns (hand-overs of training GPUs): "
            f"{counts['borrow']} / {counts['return']}",
            f"- PD reconfigurations: {counts['pd_reconfig']}",
            f"- worker failures: {counts['worker_failed']}",
            f"- interrupted / resumed requests: {counts['interrupt']} / {counts['resume']}",
        ]
        other = {k: n for k, n in counts.items() if k not in (*RECONFIG_KINDS, *COUNTED_ONLY)}
        if other:
            lines.append("- other: " + ", ".join(f"{k}={n}" for k, n in sorted(other.items())))
        lines.append("")
    reconfig = [e for e in run.events if e["kind"] not in COUNTED_ONLY]
    if reconfig:
        lines += ["### Events", ""]
        for e in sorted(reconfig, key=lambda e: num(e.get("t_s")) or 0.0):
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


def build_report(run_dir: Path, run: RunData | None = None) -> Path:
    """Write report.md and the PNGs it links into `run_dir` (from `run`, what `load_run`
    read there, if given); returns report.md's path."""
    run = load_run(run_dir) if run is None else run
    plots = _plots(run)
    path = Path(run_dir) / "report.md"
    path.write_text(render_markdown(run, plots))
    return path


if __name__ == "__main__":  # python -m pearl.report.run_report RUN_DIR: rebuild a report
    import sys

    for arg in sys.argv[1:] or ["."]:
        print(build_report(Path(arg)))
