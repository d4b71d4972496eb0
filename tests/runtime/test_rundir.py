"""RunRecorder: the run directory's files, crash safety, resume and the refusal rules."""

import json
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.control import commands as cmd
from pearl.control.notes import ControlNote
from pearl.control.plan import PDConfig, apply, plan_transition
from pearl.control.state import ClusterState, Gpu, Status, Zone
from pearl.control.telemetry import TurnRecord, WorkerStepRecord
from pearl.control.telemetry_jsonl import read_jsonl
from pearl.errors import InputError
from pearl.report.rundir import RunRecorder, check_out_dir

ROOT = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _states() -> list[ClusterState]:
    s0 = ClusterState(gpus=(Gpu("d0", Zone.DEDICATED), Gpu("p0", Zone.PREEMPTIBLE)))
    s1 = apply(s0, plan_transition(s0, PDConfig.colocated(2), ["d0", "p0"]))
    s2 = s1.update_worker("w0", status=Status.ACTIVE).update_worker("w1", status=Status.ACTIVE)
    return [s0, s1, s2]


def _turn(traj: str, step: int) -> TurnRecord:
    return TurnRecord(
        traj_id=traj, turn=0, step=step, weight_version=0, prefill_worker="w0",
        decode_worker=None, roles=("colocated",), new_prefill_tokens=5, cached_prefix_tokens=0,
        decode_tokens=3, context_tokens=5, t_queued_s=0.0, t_prefill_start_s=0.1,
        t_prefill_end_s=0.2, t_kv_start_s=None, t_kv_end_s=None, t_decode_start_s=0.2,
        t_decode_end_s=0.5, t_env_start_s=0.5, t_env_end_s=0.6,
    )  # fmt: skip


def test_new_run_writes_config_and_one_line_per_record(tmp_path):
    """Each record_* call appends exactly one strict-JSON line with its t_s."""
    out = tmp_path / "run"
    rec = RunRecorder(out, "seed: 3\n")
    assert (out / "config.yaml").read_text() == "seed: 3\n"
    rec.record_note(ControlNote(1.5, "decision", "initial: -> colocated:2 (2 ops)"))
    rec.record_command(1.5, cmd.Route("t1", "w0", "w1"))
    rec.record_event(2.0, "preemption", "reclaim notice", gpu_ids=["p0"], deadline_s=3.0)
    rec.record_step(0, {"reward_mean": 0.25, "predicted_makespan_s": float("nan")})
    assert _lines(out / "decisions.jsonl") == [
        {"t_s": 1.5, "kind": "decision", "text": "initial: -> colocated:2 (2 ops)"},
        {"t_s": 1.5, "kind": "command", "command": "Route", "traj_id": "t1",
         "prefill_worker_id": "w0", "decode_worker_id": "w1", "full_prefill": False},
    ]  # fmt: skip
    assert _lines(out / "events.jsonl") == [
        {"t_s": 2.0, "kind": "preemption", "reason": "reclaim notice", "gpu_ids": ["p0"],
         "deadline_s": 3.0}
    ]  # fmt: skip
    payload = {"traj_id": "t1", "reason": "reclaim", "kind": "x"}  # a world's own payload
    rec.record_event(2.5, "interrupt", payload.get("reason"), **payload)
    rec.record_event(2.6, "resume", None, traj_id="t1")
    docs = _lines(out / "events.jsonl")[1:]
    assert docs == [
        {"t_s": 2.5, "kind": "interrupt", "reason": "reclaim", "traj_id": "t1"},
        {"t_s": 2.6, "kind": "resume", "reason": "resume", "traj_id": "t1"},
    ]
    (step,) = _lines(out / "steps.jsonl")
    assert step["step"] == 0 and step["predicted_makespan_s"] is None  # NaN -> null
    rec.close()


def test_states_recorded_only_when_changed_and_parse_back(tmp_path):
    rec = RunRecorder(tmp_path / "r", "")
    s0, s1, s2 = _states()
    written = [rec.record_state(t, s) for t, s in [(0, s0), (1, s0), (2, s1), (3, s2), (4, s2)]]
    assert written == [True, False, True, True, False]
    docs = _lines(tmp_path / "r" / "states.jsonl")
    assert [d["t_s"] for d in docs] == [0.0, 2.0, 3.0]
    assert [ClusterState.from_json(d["state"]) for d in docs] == [s0, s1, s2]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=12))
def test_state_file_has_no_consecutive_duplicates(tmp_path_factory, picks):
    """Whatever the sequence, states.jsonl holds it with consecutive repeats collapsed."""
    states = _states()
    out = tmp_path_factory.mktemp("h") / "run"
    with RunRecorder(out, "") as rec:
        for t, i in enumerate(picks):
            rec.record_state(float(t), states[i])
    expected = [p for k, p in enumerate(picks) if k == 0 or picks[k - 1] != p]
    got = [ClusterState.from_json(d["state"]) for d in _lines(out / "states.jsonl")]
    assert got == [states[i] for i in expected]


def test_telemetry_lines_keep_the_shared_schema(tmp_path):
    """telemetry.jsonl reads back with the telemetry reader (so `pearl profile fit` works)."""
    rec = RunRecorder(tmp_path / "r", "")
    ws = WorkerStepRecord("w0", "colocated", 0, 0.3, 2, 10, 2, 12, 0.05)
    assert rec.record_telemetry([_turn("t0", 0), ws, {"traj_id": "x"} | _turn("t1", 0).to_json()])
    rec.close()
    tel = read_jsonl(tmp_path / "r" / "telemetry.jsonl")
    assert [t.traj_id for t in tel.turns] == ["t0", "t1"] and tel.worker_steps == (ws,)


def test_refuses_non_empty_dirs_unless_resuming_a_run(tmp_path):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="not empty"):
        RunRecorder(junk, "")
    with pytest.raises(InputError, match="not a run directory"):
        RunRecorder(junk, "", resume=True)
    # a run that stopped before writing anything but its config left nothing to lose
    RunRecorder(tmp_path / "run", "a: 1\n").close()
    RunRecorder(tmp_path / "run", "a: 2\n").close()
    assert (tmp_path / "run" / "config.yaml").read_text() == "a: 2\n"
    with RunRecorder(tmp_path / "run", "a: 3\n") as rec:
        rec.record_step(0, {"t_s": 1.0})
    with pytest.raises(InputError, match="--resume"):
        RunRecorder(tmp_path / "run", "")
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="not a directory"):
        check_out_dir(tmp_path / "file", resume=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    RunRecorder(empty, "").close()  # an existing empty dir is fine


def test_resume_appends_keeps_history_and_drops_a_torn_line(tmp_path):
    out = tmp_path / "run"
    s0, s1, _ = _states()
    with RunRecorder(out, "seed: 1\n") as rec:
        rec.record_state(0.0, s0)
        rec.record_step(0, {"t_s": 7.5})
    with (out / "steps.jsonl").open("a") as fh:
        fh.write('{"step": 1, "rew')  # the process died mid-line
    rec = RunRecorder.open_existing(out)
    assert (out / "config.yaml").read_text() == "seed: 1\n"
    assert rec.last_t_s == 7.5
    assert not rec.record_state(8.0, s0)  # same as the last state before the crash
    assert rec.record_state(9.0, s1)
    rec.record_step(1, {"t_s": 12.0})
    rec.close()
    assert [d["step"] for d in _lines(out / "steps.jsonl")] == [0, 1]
    assert [d["t_s"] for d in _lines(out / "states.jsonl")] == [0.0, 9.0]


def test_records_survive_a_hard_crash(tmp_path):
    """Lines are flushed as written: os._exit without close loses nothing recorded."""
    out = tmp_path / "run"
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from pearl.report.rundir import RunRecorder\n"
        "r = RunRecorder(Path(sys.argv[1]), 'x: 1\\n')\n"
        "for i in range(5):\n"
        "    r.record_step(i, {'reward_mean': i / 10})\n"
        "    r.record_event(float(i), 'interrupt', 'test')\n"
        "os._exit(3)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, timeout=120)
    assert res.returncode == 3
    assert [d["step"] for d in _lines(out / "steps.jsonl")] == [0, 1, 2, 3, 4]
    assert len(_lines(out / "events.jsonl")) == 5


def test_concurrent_writers_never_interleave_lines(tmp_path):
    rec = RunRecorder(tmp_path / "r", "")

    def work(k: int) -> None:
        for i in range(200):
            rec.record_event(float(i), "interrupt", "x" * 300, writer=k, i=i)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    docs = _lines(tmp_path / "r" / "events.jsonl")
    assert len(docs) == 800
    assert sorted((d["writer"], d["i"]) for d in docs) == [
        (k, i) for k in range(4) for i in range(200)
    ]


def test_finish_writes_metrics_and_report(tmp_path):
    out = tmp_path / "run"
    rec = RunRecorder(out, "rollout:\n  batch_size: 8\n")
    for i, (meas, pred) in enumerate([(10.0, 12.0), (20.0, 19.0), (8.0, 8.0)]):
        rec.record_step(
            i, {"reward_mean": 0.1 * i, "rollout_makespan_s": meas, "predicted_makespan_s": pred,
                "trajectories": 8, "t_s": 10.0 * (i + 1)}
        )  # fmt: skip
    rec.record_event(5.0, "borrow", "idle training GPUs")
    report = rec.finish({"wall_s": 30.0, "ok": True})
    assert report == out / "report.md" and report.is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["summary"] == {"wall_s": 30.0, "ok": True}
    assert metrics["series"]["rollout_makespan_s"] == [10.0, 20.0, 8.0]
    assert metrics["event_counts"]["borrow"] == 1
    errs = sorted(abs(p - m) / m for m, p in [(10.0, 12.0), (20.0, 19.0), (8.0, 8.0)])
    assert math.isclose(metrics["makespan_prediction"]["median_abs_rel_error"], errs[1])
