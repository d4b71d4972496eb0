"""`pearl run` with a stand-in driver: config errors, overrides, --resume, --json, run dirs."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import pearl.runtime
from pearl.cli.main import app
from pearl.report.rundir import RunRecorder
from pearl.runtime.live import LiveView
from pearl.runtime.run_config import RunConfig, dump_run_config, load_run_config

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
FINISH = {"on": False}


@pytest.fixture
def calls(monkeypatch):
    """Replace pearl.runtime.driver with a stand-in that records its calls and writes a run."""
    seen: list[dict] = []

    def run(cfg, *, out_dir, resume, live):
        seen.append({"cfg": cfg, "out_dir": Path(out_dir), "resume": resume, "live": live})
        rec = (
            RunRecorder.open_existing(out_dir)
            if resume
            else RunRecorder(out_dir, dump_run_config(cfg))
        )
        with LiveView(enabled=live) as view:
            for step in range(cfg.trainer.num_steps):
                rec.record_step(step, {"reward_mean": 0.1 * step, "trajectories": 4})
                view.update(
                    step=step + 1, num_steps=cfg.trainer.num_steps, reward=0.1 * step,
                    trajectories_done=4, batch_size=4, gpus_by_zone_role={}, last_decision="-",
                    events=[],
                )  # fmt: skip
        if not FINISH["on"]:  # the report's plots cost seconds: one test draws them
            rec.close()
            return {"steps": cfg.trainer.num_steps, "switch_costs_s": {"activation": 0.25}}
        report = rec.finish({"steps": cfg.trainer.num_steps})
        return {"steps": cfg.trainer.num_steps, "report": str(report)}

    fake = types.ModuleType("pearl.runtime.driver")
    fake.run = run
    monkeypatch.setitem(sys.modules, "pearl.runtime.driver", fake)
    monkeypatch.setattr(pearl.runtime, "driver", fake, raising=False)
    return seen


def _config(tmp_path: Path, text: str = "trainer: {num_steps: 2}\n") -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


def _fails(args: list[str]) -> str:
    res = runner.invoke(app, ["run", *args])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    return res.output


def test_config_errors_name_file_and_field(tmp_path, calls):
    out = _fails([str(_config(tmp_path, "rollout: {batch_size: 6, group_size: 4}\n"))])
    assert "cfg.yaml" in out and "rollout" in out and "multiple of group_size" in out
    out = _fails([str(_config(tmp_path, "trainer: {num_steps: 0}\n"))])
    assert "cfg.yaml" in out and "'trainer.num_steps'" in out
    out = _fails([str(_config(tmp_path, "cluster: {bogus: 1}\n"))])
    assert "'cluster.bogus'" in out
    out = _fails([str(_config(tmp_path, "seed: [1\n"))])
    assert "cfg.yaml:line" in out
    text = "controller: {mode_switch_threshold: 0.02, ratio_switch_threshold: 0.05}\n"
    out = _fails([str(_config(tmp_path, text))])
    assert "'controller'" in out and "ratio_switch_threshold must be <=" in out
    out = _fails([str(_config(tmp_path, "controller: {mode_switch_threshold: 1.5}\n"))])
    assert "'controller.mode_switch_threshold'" in out
    out = _fails([str(_config(tmp_path, "controller: {modes: [split]}\n"))])
    assert "'controller'" in out and "modes must be" in out
    out = _fails([str(_config(tmp_path, "controller: {policy: roll-large}\n"))])
    assert "'controller'" in out and "simulation baseline" in out
    out = _fails([str(_config(tmp_path, "controller: {policy: nope}\n"))])
    assert "'controller'" in out and "unknown policy 'nope'" in out
    out = _fails([str(tmp_path / "missing.yaml")])
    assert "missing.yaml" in out and "not found" in out
    assert calls == []


def test_bad_arguments_exit_2(tmp_path, calls):
    cfg = str(_config(tmp_path))
    assert "--steps" in _fails([cfg, "--steps", "0", "--out", str(tmp_path / "a")])
    assert "CONFIG" in _fails([])
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "x").write_text("")
    assert "not empty" in _fails([cfg, "--out", str(junk)])
    assert "not a run directory" in _fails(["--resume", str(junk)])
    assert "--resume" in _fails([cfg, "--resume", str(junk)])
    assert calls == []


def test_runs_with_overrides_and_prints_one_json_document(tmp_path, calls, monkeypatch):
    monkeypatch.setitem(FINISH, "on", True)
    out = tmp_path / "run"
    args = [str(_config(tmp_path)), "--out", str(out), "--address", "auto", "--steps", "3"]
    res = runner.invoke(app, ["run", *args, "--no-live", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (call,) = calls
    assert isinstance(call["cfg"], RunConfig)
    assert call["cfg"].cluster.address == "auto" and call["cfg"].trainer.num_steps == 3
    assert call["out_dir"] == out and call["resume"] is False and call["live"] is False
    assert doc["out_dir"] == str(out) and Path(doc["report"]) == out / "report.md"
    assert (out / "report.md").is_file() and doc["steps"] == 3


def test_plain_summary_prints_dict_fields_on_one_line(tmp_path, calls):
    res = runner.invoke(app, ["run", str(_config(tmp_path)), "--out", str(tmp_path / "r"),
                              "--no-live"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "steps: 2" in res.output and "switch_costs_s: activation=0.25" in res.output


def test_resume_continues_in_the_run_directory_with_its_config(tmp_path, calls):
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(_config(tmp_path)), "--out", str(out), "--no-live"])
    assert res.exit_code == 0, res.output
    assert str(out / "report.md") in res.stdout
    res = runner.invoke(app, ["run", "--resume", str(out), "--steps", "4", "--no-live", "--json"])
    assert res.exit_code == 0, res.output
    assert [c["resume"] for c in calls] == [False, True]
    assert calls[1]["out_dir"] == out and calls[1]["cfg"].trainer.num_steps == 4
    assert json.loads(res.stdout)["steps"] == 4


def test_default_out_dir_is_a_timestamp_under_runs(tmp_path, calls, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = str(_config(tmp_path))
    for _ in range(2):
        res = runner.invoke(app, ["run", cfg, "--no-live", "--json"])
        assert res.exit_code == 0, res.output
    dirs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(dirs) == 2 and all(d[:8].isdigit() and d[8] == "-" for d in dirs)
    assert [c["out_dir"].parent for c in calls] == [Path("runs"), Path("runs")]


def test_pearl_help_does_not_import_ray():
    code = "import sys, pearl.cli.main; print('ray' in sys.modules)"
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and res.stdout.strip() == "False", res.stderr


def test_ctrl_c_says_how_to_resume(tmp_path, monkeypatch):
    def run(cfg, *, out_dir, resume, live):
        RunRecorder(out_dir, dump_run_config(cfg)).close()
        raise KeyboardInterrupt

    fake = types.ModuleType("pearl.runtime.driver")
    fake.run = run
    monkeypatch.setitem(sys.modules, "pearl.runtime.driver", fake)
    monkeypatch.setattr(pearl.runtime, "driver", fake, raising=False)
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(_config(tmp_path)), "--out", str(out)])
    assert res.exit_code == 130 and f"pearl run --resume {out}" in res.output


def test_trace_and_checkpoint_paths_resolve_against_the_config_file(tmp_path, calls, monkeypatch):
    """A trace file next to the config is found from any directory, and stays found on
    --resume (the run's config.yaml holds the absolute path); trace names stay names."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "t.json").write_text("{}")
    (conf / "ckpt").mkdir()
    cfg = conf / "run.yaml"
    cfg.write_text("trace: {source: t.json}\nmodel: {checkpoint_dir: ckpt}\n")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["run", str(cfg), "--out", "run", "--no-live", "--json"])
    assert res.exit_code == 0, res.output
    got = calls[0]["cfg"]
    assert got.trace.source == str((conf / "t.json").resolve())
    assert got.model.checkpoint_dir == str((conf / "ckpt").resolve())
    res = runner.invoke(app, ["run", "--resume", "run", "--no-live", "--json"])
    assert res.exit_code == 0, res.output
    assert calls[1]["cfg"].trace.source == got.trace.source
    cfg.write_text("trace: {source: seg2}\n")
    res = runner.invoke(app, ["run", str(cfg), "--out", "run2", "--no-live", "--json"])
    assert res.exit_code == 0 and calls[2]["cfg"].trace.source == "seg2"


def test_a_trace_found_nowhere_is_refused_before_the_run(tmp_path, calls, monkeypatch):
    """A trace that is neither a file (from here or beside the config) nor a bundled name:
    one line naming the config, trace.source and both places looked in, and no run
    directory; the driver is never called."""
    cfg = _config(tmp_path, "trace: {source: lost.json}\n")
    monkeypatch.chdir(tmp_path)
    out = _fails([str(cfg), "--out", "run", "--no-live"])
    assert "trace.source" in out and "lost.json" in out and str(tmp_path) in out
    assert not calls and not (tmp_path / "run").exists()


def test_run_config_accepts_every_registry_policy_but_simulation_pools(tmp_path):
    """`pearl run` and `pearl simulate` share one registry: the static `fixed:*` baselines
    and the ablations are accepted; only a fixed pool at the trace's mean is refused."""
    from pearl.runtime.run_config import load_run_config

    for name in ("fixed:colocated", "fixed:disagg:2:1", "pearl-no-borrow", "rlboost+"):
        cfg = load_run_config(_config(tmp_path, f'controller: {{policy: "{name}"}}\n'))
        assert cfg.controller.policy == name


def test_set_overrides_any_field_and_wins_over_the_options(tmp_path, calls):
    out = tmp_path / "run"
    args = [str(_config(tmp_path)), "--out", str(out), "--steps", "3", "--no-live", "--json"]
    sets = ["--set", "trainer.num_steps=5", "--set", "rollout.max_new_tokens=6"]
    res = runner.invoke(app, ["run", *args, *sets])
    assert res.exit_code == 0, res.output
    (call,) = calls
    assert call["cfg"].trainer.num_steps == 5 and call["cfg"].rollout.max_new_tokens == 6
    # the run directory's config is the one that ran, so --resume runs it again
    assert "max_new_tokens: 6" in (out / "config.yaml").read_text()


def test_bad_set_pairs_name_the_field(tmp_path, calls):
    cfg = str(_config(tmp_path))
    assert "'trainer.num_steps'" in _fails([cfg, "--set", "trainer.num_steps=x"])
    assert "no config section 'seed'" in _fails([cfg, "--set", "seed.x=1"])
    assert "no config section 'nope'" in _fails([cfg, "--set", "nope.x=1"])
    assert "'env'" in _fails([cfg, "--set", "env.name=nope"])
    assert "renamed: use rollout.max_staleness" in _fails([cfg, "--set", "trainer.max_staleness=2"])
    assert "KEY=VALUE" in _fails([cfg, "--set", "trainer.num_steps"])
    out = tmp_path / "run"
    assert runner.invoke(app, ["run", cfg, "--out", str(out), "--no-live"]).exit_code == 0
    assert "no --set" in _fails(["--resume", str(out), "--set", "seed=1"])
    assert len(calls) == 1


def test_show_config_prints_what_would_run_and_runs_nothing(tmp_path, calls):
    res = runner.invoke(app, ["run", "--show-config"])
    assert res.exit_code == 0, res.output
    assert yaml.safe_load(res.stdout) == RunConfig().model_dump(mode="json")
    args = [str(_config(tmp_path)), "--steps", "7", "--set", "env.num_hosts=3", "--show-config"]
    res = runner.invoke(app, ["run", *args])
    assert res.exit_code == 0, res.output
    saved = tmp_path / "shown.yaml"
    saved.write_text(res.stdout)
    again = load_run_config(saved)
    assert again.trainer.num_steps == 7 and again.env.num_hosts == 3
    assert calls == []
    # a run directory's: the config --resume would continue with
    out = tmp_path / "run"
    assert runner.invoke(app, ["run", str(saved), "--out", str(out), "--no-live"]).exit_code == 0
    res = runner.invoke(app, ["run", "--resume", str(out), "--show-config"])
    assert res.exit_code == 0 and load_run_config(out / "config.yaml").env.num_hosts == 3
    assert yaml.safe_load(res.stdout)["env"]["num_hosts"] == 3


def test_a_crash_mid_run_says_what_is_kept_and_how_to_go_on(tmp_path, monkeypatch):
    """An actor's death or a bug mid-run: one message with the resume command (exit 1);
    `pearl --debug` raises it with its traceback."""
    from pearl.cli import output

    def crash(cfg, *, out_dir, resume, live):
        raise RuntimeError("ray::TrainerActor.train() (pid=1)\n  File ...")

    fake = types.ModuleType("pearl.runtime.driver")
    fake.run = crash
    monkeypatch.setitem(sys.modules, "pearl.runtime.driver", fake)
    monkeypatch.setattr(pearl.runtime, "driver", fake, raising=False)
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(_config(tmp_path)), "--out", str(out), "--no-live"])
    assert res.exit_code == 1
    assert "the run stopped: RuntimeError: ray::TrainerActor.train() (pid=1)" in res.stderr
    assert f"pearl run --resume {out}" in res.stderr and "File ..." not in res.stderr
    monkeypatch.setitem(output.DEBUG, "on", False)  # restored after the --debug call
    args = ["--debug", "run", str(_config(tmp_path)), "--out", str(tmp_path / "b")]
    assert isinstance(runner.invoke(app, args).exception, RuntimeError)
