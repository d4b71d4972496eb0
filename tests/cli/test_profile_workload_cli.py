"""`pearl profile workload`: a run's turns -> a config `pearl simulate --config` reads, and
a simulation of the fitted workload runs like the one it was fitted to."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pearl.cli.main import app
from pearl.envs.registry import make_env
from pearl.sim.config import config_from_dict, load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TELEMETRY = EXAMPLES / "telemetry.jsonl"
runner = CliRunner()


def _run(args: list[str], code: int = 0):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    return res


def _one_line_error(args: list[str]) -> str:
    res = _run(args, code=2)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def _simulate(args: list[str]) -> dict:
    return json.loads(_run(["simulate", *args, "--json"]).stdout)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory) -> Path:
    """One simulated hour of PEARL on 8 GPUs, written as a run directory."""
    out = tmp_path_factory.mktemp("simrun")
    _run(["simulate", "--static-gpus", "8", "--duration", "3600", "--policies", "pearl",
          "--no-bound", "--out", out])  # fmt: skip
    return out / "pearl"


def test_telemetry_file_prints_a_config_and_notes(tmp_path):
    res = _run(["profile", "workload", TELEMETRY])
    cfg = config_from_dict(yaml.safe_load(res.stdout), "<stdout>")
    assert cfg.rollout.workload["env_latency"]
    assert "length limit not given" in res.stderr and "turn cap not given" in res.stderr
    assert res.stdout.startswith("# rollout.workload fitted by `pearl profile workload`")


def test_json_and_out(tmp_path):
    out = tmp_path / "fitted.yaml"
    doc = json.loads(
        _run(
            ["profile", "workload", TELEMETRY, "--max-len", "40000", "--out", out, "--json"]
        ).stdout  # fmt: skip
    )
    assert set(doc) == {"config", "samples", "limit_ended", "notes"}
    assert 0.0 <= doc["limit_ended"] <= 1.0
    assert doc["config"]["rollout"]["max_context_tokens"] == 40000
    assert load_config(out).rollout.max_context_tokens == 40000
    table = _run(["profile", "workload", TELEMETRY, "--max-len", "40000", "--out", out])
    assert f"written to {out}" in table.stdout and "run_to_cap_fraction" in table.stdout
    assert "ended by the length limit" in table.stdout


def test_run_directory_gives_the_limits(sim_run):
    res = _run(["profile", "workload", sim_run, "--json"])
    doc = json.loads(res.stdout)
    assert doc["config"]["rollout"]["max_context_tokens"] == 32768
    assert doc["config"]["rollout"]["workload"]["max_turns"] == 50
    assert not any("not given" in n for n in doc["notes"])
    assert any("rollout batch: 64 trajectories" in n for n in doc["notes"])
    assert 0.4 < doc["limit_ended"] < 0.65  # about half the default trajectories on 32K
    assert doc["samples"]["trajectories"] > 300


def test_steps_fit_a_run_s_later_batches_only(sim_run):
    """--steps fits the trajectories of some rollout steps (an agent's change as it
    trains) and says which; steps the file lacks, or a malformed range, are one line."""
    whole = json.loads(_run(["profile", "workload", sim_run, "--json"]).stdout)
    later = json.loads(_run(["profile", "workload", sim_run, "--steps", "5:", "--json"]).stdout)
    per_step = json.loads(_run(["profile", "workload", sim_run, "--steps", "5", "--json"]).stdout)
    assert per_step["samples"]["trajectories"] == 64  # one batch
    assert per_step["notes"][0].startswith("fitted to rollout steps 5-5 (1 of the ")
    assert later["notes"][0].startswith("fitted to rollout steps 5-")
    assert (
        per_step["samples"]["trajectories"]
        < later["samples"]["trajectories"]
        < whole["samples"]["trajectories"]
    )
    assert not any(n.startswith("fitted to rollout steps") for n in whole["notes"])
    line = _one_line_error(["profile", "workload", sim_run, "--steps", "900:"])
    assert (
        "telemetry.jsonl" in line and "--steps" in line and "no turn in rollout steps 900:" in line
    )
    for bad in ("3:1", "x", "-2", "1:y"):
        assert "--steps" in _one_line_error(["profile", "workload", sim_run, "--steps", bad])


def test_the_fitted_workload_simulates_like_the_original(sim_run, tmp_path):
    """The whole loop a user runs: fit a run's turns, simulate the fit. Two simulated hours
    on the same seed: trajectories per hour within 5% of the world that wrote the turns
    (measured: within 1.8% on seeds 1-4, BENCHMARKS.md)."""
    fitted = tmp_path / "fitted.yaml"
    _run(["profile", "workload", sim_run, "--out", fitted])
    common = ["--static-gpus", "8", "--duration", "7200", "--policies", "pearl", "--no-bound",
              "--seed", "1"]  # fmt: skip
    mine, theirs = _simulate([*common, "--config", fitted]), _simulate(common)
    assert mine["policies"]["pearl"]["trajs_per_hour"] == pytest.approx(
        theirs["policies"]["pearl"]["trajs_per_hour"], rel=0.05
    )
    assert "field(s) set (rollout.workload)" in mine["setting"]  # says whose workload it is
    assert "rollout.workload" not in theirs["setting"]


def test_pearl_run_directory_takes_its_limits_from_config(tmp_path):
    """A pearl run directory: the length limit from its config (the demo's 768 tokens, below
    what the world runs: said, with the way out), the turn cap from its environment."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = _run(["run", EXAMPLES / "demo.yaml", "--show-config"]).stdout
    (run_dir / "config.yaml").write_text(cfg)
    (run_dir / "telemetry.jsonl").write_text(TELEMETRY.read_text())
    line = _one_line_error(["profile", "workload", run_dir])
    assert "768 tokens" in line and "--max-len" in line
    doc = json.loads(_run(["profile", "workload", run_dir, "--max-len", "40000", "--json"]).stdout)
    assert doc["config"]["rollout"]["max_context_tokens"] == 40000
    env = yaml.safe_load(cfg)["env"]
    assert doc["config"]["rollout"]["workload"]["max_turns"] == make_env(env["name"]).max_turns
    assert not any("turn cap not given" in n for n in doc["notes"])


def test_bad_inputs_are_one_line_errors(tmp_path):
    assert "nope.jsonl" in _one_line_error(["profile", "workload", tmp_path / "nope.jsonl"])
    assert "no telemetry.jsonl" in _one_line_error(["profile", "workload", tmp_path])
    for policy in ("pearl", "rlboost+"):  # pearl simulate --out's top: its runs are named
        (tmp_path / "sim" / policy).mkdir(parents=True)
        (tmp_path / "sim" / policy / "telemetry.jsonl").write_text("")
    line = _one_line_error(["profile", "workload", tmp_path / "sim"])
    assert "give one of its runs: pearl, rlboost+" in line
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "turn", "traj_id": "a"}\n')
    assert "bad.jsonl:line 1" in _one_line_error(["profile", "workload", bad])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "no turn records" in _one_line_error(["profile", "workload", empty])
    assert "--max-len" in _one_line_error(["profile", "workload", TELEMETRY, "--max-len", "0"])
