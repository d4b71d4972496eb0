"""`pearl simulate --out`: one run directory per policy, in `pearl run`'s format."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from rundir_checks import assert_decision_lines, assert_event_lines
from typer.testing import CliRunner

from pearl.cli.main import app

runner = CliRunner()
SMALL = ["--static-gpus", "2", "--batch", "8", "--duration", "300", "--no-bound"]


def test_simulate_out_writes_telemetry_decisions_summary_config(tmp_path: Path) -> None:
    """--out writes, per policy, a run directory (the shared telemetry schema, decisions,
    states, steps, metrics and report), plus the summary and the config used."""
    out = tmp_path / "run"
    res = runner.invoke(
        app, ["simulate", *SMALL, "--policies", "fixed:colocated", "--out", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    from pearl.control.telemetry_jsonl import read_jsonl
    from pearl.sim.config import load_config

    tel = read_jsonl(out / "fixed_colocated" / "telemetry.jsonl")
    assert tel.turns and tel.worker_steps and tel.meta.model == "qwen3-8b"
    lines = (out / "fixed_colocated" / "decisions.jsonl").read_text().splitlines()
    assert_decision_lines([json.loads(line) for line in lines])
    assert json.loads((out / "summary.json").read_text())["policies"]
    cfg = load_config(out / "config.yaml")
    assert cfg.rollout.batch_size == 8 and cfg.trace.static_gpus == 2
    assert yaml.safe_load((out / "config.yaml").read_text())["seed"] == 0
    # Each policy's folder is a run directory in `pearl run`'s format, with its report.
    from pearl.report.run_data import load_run
    from pearl.report.rundir import is_run_dir

    pol = out / "fixed_colocated"
    assert is_run_dir(pol) and (pol / "report.md").is_file() and (pol / "metrics.json").is_file()
    run = load_run(pol)
    assert run.states and run.steps and run.summary["policy"] == "fixed:colocated"
    assert all(s["rollout_makespan_s"] > 0 and s["trajectories"] == 8 for s in run.steps)
    report = (pol / "report.md").read_text()
    assert "## Makespan prediction" in report
    # the summary's worker counts say what they count, beside the events' groups and decisions
    line = next(ln for ln in report.splitlines() if ln.startswith("- reconfigurations: "))
    assert "expand=0" in line and "expand and borrow count workers started" in line
    # Writing again into the same --out replaces the earlier simulation's folders.
    res = runner.invoke(
        app, ["simulate", *SMALL, "--policies", "fixed:colocated", "--out", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output


def test_simulated_decisions_include_ignored_events_in_time_order(tmp_path: Path) -> None:
    """decisions.jsonl holds what the controller ignored, with why (ROLL neither borrows the
    trainer's idle GPUs nor takes preemptible ones: those events are ignored), and is
    ordered by time."""
    out = tmp_path / "run"
    res = runner.invoke(
        app,
        ["simulate", "--trace", "seg1", "--duration", "900", "--no-bound", "--policies", "roll"]
        + ["--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    docs = [json.loads(x) for x in (out / "roll" / "decisions.jsonl").read_text().splitlines()]
    ignored = [d for d in docs if d["kind"] == "ignored"]
    assert any("policy roll does not borrow" in d["text"] for d in ignored)
    assert any("policy roll is not elastic" in d["text"] for d in ignored)
    summary = json.loads((out / "summary.json").read_text())["policies"]["roll"]
    assert summary["ignored_events"] == len(ignored)  # as pearl run's summary counts them
    assert_decision_lines(docs)  # time order included
    report = (out / "roll" / "report.md").read_text()
    assert f"{len(ignored)} event(s) ignored by the controller" in report
    # ignored events are not counted as decisions
    decisions = [d for d in docs if d["kind"] == "decision"]
    assert f"{len(decisions)} decision(s)" in report


def test_simulated_events_read_as_pearl_run_writes_them(tmp_path: Path) -> None:
    """events.jsonl of a simulation: the detail fields `pearl run` gives each kind, each
    borrow, return, reclaim and expansion with the controller's decision that made it, one
    interrupt event per request cut short, and one resume per interruption at most."""
    out = tmp_path / "run"
    res = runner.invoke(
        app,
        ["simulate", "--trace", "seg2", "--duration", "1500", "--no-bound", "--policies"]
        + ["pearl", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    docs = [json.loads(x) for x in (out / "pearl" / "events.jsonl").read_text().splitlines()]
    assert_event_lines(docs)
    kinds = {d["kind"] for d in docs}
    assert {"borrow", "return", "expansion", "preemption", "interrupt", "resume"} <= kinds
    assert [d["t_s"] for d in docs] == sorted(d["t_s"] for d in docs)
    for d in docs:
        if d["kind"] == "return":
            assert d["reason"].split(": ", 1)[1].startswith("return"), d
        if d["kind"] == "expansion":
            assert f"admit {d['group_id']} " in d["reason"], d
    interrupts = [d for d in docs if d["kind"] == "interrupt"]
    resumes = [d for d in docs if d["kind"] == "resume"]
    assert 0 < len(resumes) <= len(interrupts)
    assert {d["traj_id"] for d in resumes} <= {d["traj_id"] for d in interrupts}
    # steps.jsonl carries the engine's prediction at each batch's start, as pearl run's does,
    # so the report measures it
    steps = [json.loads(x) for x in (out / "pearl" / "steps.jsonl").read_text().splitlines()]
    predicted = [d for d in steps if d["predicted_makespan_s"] is not None]
    assert predicted and all(d["predicted_makespan_s"] > 0 for d in predicted)
    report = (out / "pearl" / "report.md").read_text()
    assert "Median relative error of predicted vs measured" in report
    assert "predicts a batch alone on the configuration active at its start" in report
