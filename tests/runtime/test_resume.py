"""`pearl run --resume` after the driver is killed mid-run: nothing lost, nothing twice."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CONFIG = {
    "seed": 5,
    "rollout": {"batch_size": 8, "group_size": 4, "max_new_tokens": 3, "max_context_tokens": 96},
    # far more steps than the run lives for: each takes a fraction of a second here, and a
    # run that had trained them all before the kill would test nothing (its resume is a
    # no-op); it is resumed with --steps to end two steps after the kill
    "trainer": {"num_steps": 1000, "lr": 0.01},
    "cluster": {"num_dedicated_gpus": 1, "num_training_gpus": 1},
}


def _pearl(*args: str) -> list[str]:
    return [sys.executable, "-m", "pearl.cli.main", *args]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_resume_after_kill_continues_without_loss_or_duplicates(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "run"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(
        _pearl("run", str(cfg), "--out", str(out), "--no-live"),
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpt = out / "checkpoint" / "driver.json"
    deadline = time.time() + 400
    try:
        while time.time() < deadline and proc.poll() is None:
            if ckpt.exists() and json.loads(ckpt.read_text())["trained_steps"] >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        assert ckpt.exists()
    finally:
        # a crash: the driver and the local Ray cluster it started (same process group) die
        # at once, with no clean shutdown of anything
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = json.loads(ckpt.read_text())["trained_steps"]
    assert 2 <= killed_at < CONFIG["trainer"]["num_steps"]
    total = killed_at + 2
    res = subprocess.run(
        _pearl("run", "--resume", str(out), "--steps", str(total), "--no-live", "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["final_version"] == total
    steps: dict[int, dict] = {}
    for row in _lines(out / "steps.jsonl"):
        steps[row["step"]] = row  # a step redone after the crash: the last record wins
    assert sorted(steps) == list(range(total))
    for step, row in steps.items():
        assert len(set(row["trajectory_ids"])) == 8
        assert all(t.startswith(f"s{step}-") for t in row["trajectory_ids"])
    ckpt = json.loads((out / "checkpoint" / "driver.json").read_text())
    assert ckpt["version"] == total and ckpt["trainer_file"] == f"trainer-{total}.pt"
    assert [p.name for p in (out / "checkpoint").glob("trainer*")] == [f"trainer-{total}.pt"]
    resumed = [e["reason"] for e in _lines(out / "events.jsonl") if e["kind"] == "resume"]
    assert resumed == [
        f"run resumed from its checkpoint after step {killed_at} (version {killed_at})"
    ]
