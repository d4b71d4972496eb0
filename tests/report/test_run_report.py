"""The run report: report.md content and the PNGs, from synthetic run directories."""

import statistics
from pathlib import Path

from pearl.control import commands as cmd
from pearl.control.notes import ControlNote
from pearl.control.plan import PDConfig, apply, plan_transition
from pearl.control.state import ClusterState, Gpu, Role, Status, Zone
from pearl.report.run_report import build_report, load_run, render_markdown, run_metrics
from pearl.report.rundir import RunRecorder

PNG = b"\x89PNG\r\n\x1a\n"
CONFIG = """seed: 7
env: {name: guess}
rollout: {batch_size: 8, group_size: 4}
trainer: {num_steps: 4}
controller: {policy: pearl}
"""
# (step, reward, measured makespan, predicted makespan, trajectories)
STEPS = [(0, 0.10, 10.0, 13.0, 8), (1, 0.20, 12.0, 11.0, 8), (2, 0.40, 9.0, 9.9, 8)]
EVENTS = [
    (3.0, "expansion", "predicted gain 4.0 s > cost 1.5 s", {"gpus": ["p0"]}),
    (4.0, "borrow", "training idle for 20 s", {"gpus": ["o0"]}),
    (6.0, "interrupt", "kept 5 generated tokens", {"traj_id": "t3"}),
    (6.5, "preemption", "reclaim notice, deadline 8.0 s", {"gpus": ["p0"]}),
    (7.0, "resume", "full prefill elsewhere", {"traj_id": "t3"}),
    (9.0, "return", "training wants its GPUs", {"gpus": ["o0"]}),
    (9.5, "offer", "trace: preemptible p1 joined", {}),
    (
        11.0,
        "pd_reconfig",
        "disaggregated:1:1 predicted 18% faster",
        {"config": "disaggregated:1:1"},
    ),
]


def _history() -> list[tuple[float, ClusterState]]:
    gpus = (Gpu("d0", Zone.DEDICATED), Gpu("d1", Zone.DEDICATED), Gpu("o0", Zone.OVERLAP))
    s0 = ClusterState(gpus=gpus)
    s1 = apply(s0, plan_transition(s0, PDConfig.colocated(2), ["d0", "d1"]))
    s2 = s1.update_worker("w0", status=Status.ACTIVE).update_worker("w1", status=Status.ACTIVE)
    s3 = s2.with_gpus([Gpu("p0", Zone.PREEMPTIBLE)])
    s4 = s3.without_gpus(["p0"])
    return [(0.0, s0), (1.0, s1), (2.0, s2), (3.0, s3), (7.0, s4)]


def _run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    with RunRecorder(out, CONFIG) as rec:
        for t, s in _history():
            rec.record_state(t, s)
        for t, kind, reason, detail in EVENTS:
            rec.record_event(t, kind, reason, **detail)
        rec.record_note(ControlNote(1.0, "decision", "initial: -> colocated:2 (2 ops)"))
        rec.record_command(1.0, cmd.InitWorker("w0", ("d0",), Role.COLOCATED, "initial-1"))
        rec.record_note(ControlNote(4.0, "decision", "borrow ['o0']: -> colocated:3 (gain 3 s)"))
        rec.record_note(ControlNote(5.0, "ignored", "GPUs gone that were not held: ['p9']"))
        rec.record_note(ControlNote(11.0, "decision", "pd: -> disaggregated:1:1 (saves 18%)"))
        # a line as pearl run wrote it before 2026-12-07
        rec.record_decision({"t_s": 12.0, "decision": "t=12.000: return ['o0'] to training"})
        for step, reward, meas, pred, n in STEPS:
            rec.record_step(
                step,
                {"reward_mean": reward, "rollout_makespan_s": meas, "predicted_makespan_s": pred,
                 "trajectories": n, "version": step, "t_s": 4.0 * (step + 1)},
            )  # fmt: skip
    return out


def test_report_has_config_steps_counts_reasons_error_and_plots(tmp_path):
    out = _run_dir(tmp_path)
    path = build_report(out)
    text = path.read_text()
    assert path == out / "report.md"
    assert "- seed: 7" in text and "- environment: guess" in text and "8 / 4" in text
    # one table row per step, with measured, predicted and throughput
    for step, reward, meas, pred, n in STEPS:
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| {step} |"))
        assert f"{reward:.3f}" in row and f"{meas:.2f}" in row and f"{pred:.2f}" in row
        assert f"{n / meas:.2f}" in row
    assert "- preemptions: 1" in text
    assert "- expansions (groups of workers admitted on preemptible GPUs): 1" in text
    assert "- borrows / returns (hand-overs of training GPUs): 1 / 1" in text
    assert "- PD reconfigurations: 1" in text
    assert "- interrupted / resumed requests: 1 / 1" in text and "- other: offer=1" in text
    for _, kind, reason, _ in EVENTS:
        if kind in ("interrupt", "resume"):
            assert reason not in text  # per-request events are counted, not listed
        else:
            assert f"**{kind}**: {reason}" in text
    median = statistics.median(abs(p - m) / m for _, _, m, p, _ in STEPS)
    assert f"{median:.1%} over 3 step(s)" in text
    assert "- t=11.000: pd: -> disaggregated:1:1 (saves 18%)" in text
    assert "- t=4.000: borrow ['o0']: -> colocated:3 (gain 3 s)" in text
    assert "- t=12.000: return ['o0'] to training" in text
    assert "4 decision(s). (1 command(s) also in decisions.jsonl.)" in text
    assert "1 event(s) ignored by the controller" in text
    assert "- t=5.000: GPUs gone that were not held: ['p9']" in text
    for png in ("timeline.png", "reward.png", "throughput.png", "makespan.png"):
        assert f"({png})" in text
        assert (out / png).read_bytes()[:8] == PNG


def test_reconfiguration_events_are_listed_in_time_order(tmp_path):
    out = _run_dir(tmp_path)
    text = render_markdown(load_run(out), {})
    listed = [ln for ln in text.splitlines() if ln.startswith("- t=") and "**" in ln]
    times = [float(ln.split("=")[1].split(" ")[0]) for ln in listed]
    assert len(listed) == 6 and times == sorted(times)


def test_a_step_redone_after_resume_counts_once(tmp_path):
    out = _run_dir(tmp_path)
    rec = RunRecorder.open_existing(out)
    rec.record_step(2, {"reward_mean": 0.5, "rollout_makespan_s": 10.0, "trajectories": 8})
    rec.close()
    run = load_run(out)
    assert [s["step"] for s in run.steps] == [0, 1, 2]
    assert run.steps[-1]["reward_mean"] == 0.5
    assert run_metrics(run)["series"]["reward_mean"] == [0.1, 0.2, 0.5]


def test_torn_and_bad_lines_are_skipped_and_reported(tmp_path):
    out = _run_dir(tmp_path)
    with (out / "events.jsonl").open("a") as fh:
        fh.write('{"t_s": 12.0, "kind": "borr')
    with (out / "states.jsonl").open("a") as fh:
        fh.write('{"t_s": 13.0, "state": {"gpus": [{"gpu_id": "x", "zone": "moon"}]}}\n')
    run = load_run(out)
    assert run.skipped_lines == {"events.jsonl": 1, "states.jsonl": 1}
    assert "Skipped unreadable lines: events.jsonl: 1, states.jsonl: 1" in render_markdown(run, {})


def test_empty_directory_still_gives_a_report(tmp_path):
    path = build_report(tmp_path)
    text = path.read_text()
    assert "No steps recorded." in text and "No events.jsonl" in text
    assert not list(tmp_path.glob("*.png"))


def test_trajectories_cut_by_the_length_limit_are_counted_and_explained(tmp_path):
    out = tmp_path / "run"
    limited = CONFIG.replace(
        "rollout: {batch_size: 8, group_size: 4}",
        "rollout: {batch_size: 8, group_size: 4, max_context_tokens: 768, max_new_tokens: 3}",
    )
    with RunRecorder(out, limited) as rec:
        for step, cut in ((0, 3), (1, 0)):
            rec.record_step(
                step, {"reward_mean": 0.1, "trajectories": 8, "truncated_trajectories": cut}
            )
    text = render_markdown(load_run(out), {})
    assert "| cut by length |" in text.splitlines()[text.splitlines().index("## Steps") + 2]
    assert "3 of 16 trajectories ended at the length limit" in text
    assert "`rollout.max_context_tokens` (768 tokens)" in text
    assert "- length limit / tokens a turn: 768 / 3" in text
    # a run with none cut says nothing of it
    none = tmp_path / "none"
    with RunRecorder(none, CONFIG) as rec:
        rec.record_step(0, {"reward_mean": 0.1, "trajectories": 8, "truncated_trajectories": 0})
    assert "length limit" not in render_markdown(load_run(none), {})
