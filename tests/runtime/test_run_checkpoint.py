"""The driver's checkpoint and the trainer file it names (`pearl run --resume`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pearl.errors import InputError
from pearl.runtime.run_checkpoint import (
    prune_trainer_files,
    read_checkpoint,
    trainer_file_name,
    write_checkpoint,
)

DOC = {
    "trained_steps": 3,
    "version": 3,
    "time_s": 12.5,
    "expected_rollout_s": 4.0,
    "step_metrics": [],
    "done_trajectories": [],
}


def test_the_document_names_its_trainer_file(tmp_path: Path) -> None:
    (tmp_path / trainer_file_name(3)).write_bytes(b"w")
    write_checkpoint(tmp_path, {**DOC, "trainer_file": trainer_file_name(3)})
    assert read_checkpoint(tmp_path)["trainer_file"] == "trainer-3.pt"


def test_a_run_directory_of_the_old_layout_reads_trainer_pt(tmp_path: Path) -> None:
    (tmp_path / "trainer.pt").write_bytes(b"w")
    write_checkpoint(tmp_path, DOC)
    assert read_checkpoint(tmp_path)["trainer_file"] == "trainer.pt"


def test_a_missing_or_odd_trainer_file_is_named(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, {**DOC, "trainer_file": trainer_file_name(3)})
    with pytest.raises(InputError, match="trainer-3.pt.*missing"):
        read_checkpoint(tmp_path)
    (tmp_path / "driver.json").write_text(json.dumps({**DOC, "trainer_file": "../x.pt"}))
    with pytest.raises(InputError, match="trainer_file"):
        read_checkpoint(tmp_path)


def test_pruning_removes_only_older_versions(tmp_path: Path) -> None:
    """A newer file may already be written for a checkpoint not yet committed: it stays."""
    names = ("trainer.pt", *(trainer_file_name(v) for v in (1, 2, 3, 10)), "driver.json")
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    prune_trainer_files(tmp_path, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "driver.json",
        "trainer-10.pt",
        "trainer-3.pt",
    ]


def test_a_corrupt_model_checkpoint_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """Before, the trainer actor died reading it: a traceback, and a run directory."""
    from pearl.runtime import driver
    from pearl.runtime.engine import LLMEngine, ModelConfig
    from pearl.runtime.engine.checkpoint import save_checkpoint
    from pearl.runtime.run_config import RunConfig

    tiny = ModelConfig.tiny()
    ckpt = save_checkpoint(tmp_path / "ckpt", tiny, LLMEngine(tiny).state_dict())
    (ckpt / "model.safetensors").write_bytes(b"not a safetensors file")
    cfg = RunConfig.model_validate({"model": {"checkpoint_dir": str(ckpt)}})
    with pytest.raises(InputError, match="model.safetensors"):
        driver.run(cfg, out_dir=tmp_path / "run", live=False)
    assert not (tmp_path / "run").exists()


def test_resuming_a_finished_run_returns_its_summary_and_touches_nothing(tmp_path: Path) -> None:
    """It would start Ray, train nothing, and overwrite the run's summary and report with
    an empty one; its own summary is the answer. (A run killed after its last step, before
    its summary was written, does go on: the resume test meets that case when its kill
    comes late.)"""
    from pearl.runtime import driver
    from pearl.runtime.run_config import RunConfig

    out = tmp_path / "run"
    ckpt = out / "checkpoint"
    ckpt.mkdir(parents=True)
    metrics = json.dumps({"summary": {"steps": 3, "final_version": 3}})
    (out / "metrics.json").write_text(metrics)
    (ckpt / trainer_file_name(3)).write_bytes(b"w")
    write_checkpoint(ckpt, {**DOC, "trainer_file": trainer_file_name(3)})
    cfg = RunConfig.model_validate({"trainer": {"num_steps": 3}})
    summary = driver.run(cfg, out_dir=out, resume=True, live=False)
    assert summary["final_version"] == 3 and "already trained all 3 steps" in summary["note"]
    assert (out / "metrics.json").read_text() == metrics
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "metrics.json"]


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"version": "x"}, "version"),
        ({"trained_steps": -1}, "trained_steps"),
        ({"trained_steps": True}, "trained_steps"),
        ({"time_s": None}, "time_s"),
        ({"step_metrics": {}}, "step_metrics"),
        ({"step_metrics": [3]}, r"step_metrics\[0\]"),
        ({"done_trajectories": [{"traj_id": "a", "step": 0, "group": 0}]}, "task_id"),
        (
            {"done_trajectories": [{"traj_id": "a", "step": 0, "group": 0, "task_id": 1, "x": 1}]},
            r"done_trajectories\[0\].*x",
        ),
    ],
)
def test_an_entry_of_the_wrong_type_is_named(tmp_path: Path, change: dict, where: str) -> None:
    """Before, a hand-edited document passed and the driver failed once Ray had started
    (`ValueError: invalid literal for int()`), or a trajectory failed to rebuild."""
    (tmp_path / trainer_file_name(3)).write_bytes(b"w")
    write_checkpoint(tmp_path, {**DOC, "trainer_file": trainer_file_name(3), **change})
    with pytest.raises(InputError, match=where) as err:
        read_checkpoint(tmp_path)
    assert "driver.json" in str(err.value)


def test_a_document_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    (tmp_path / "driver.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="expected a JSON object"):
        read_checkpoint(tmp_path)


def test_a_written_trajectory_reads_back(tmp_path: Path) -> None:
    from pearl.runtime.trajectory import RuntimeTrajectory

    t = RuntimeTrajectory("s0-g0-0", step=0, group=0, task_id=7, token_ids=[1, 2], reward=1.0)
    (tmp_path / trainer_file_name(3)).write_bytes(b"w")
    doc = {**DOC, "trainer_file": trainer_file_name(3), "done_trajectories": [t.to_json()]}
    write_checkpoint(tmp_path, doc)
    back = read_checkpoint(tmp_path)["done_trajectories"][0]
    assert RuntimeTrajectory.from_json(back) == t
