"""`pearl experiment` and `pearl validate`: the simulator's experiments and the decision
engine's check, their tables and files, one-line errors with exit 2, and Ctrl-C."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pearl.cli.main import app

runner = CliRunner()


@pytest.mark.slow
def test_experiment_quick_writes_table_and_plots(tmp_path: Path) -> None:
    """`pearl experiment ratio --quick` writes a markdown table, JSON and a PNG."""
    res = runner.invoke(app, ["experiment", "ratio", "--quick", "--out", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["experiment"] == "ratio" and doc["rows"]
    assert (tmp_path / "results.md").read_text().startswith("# ")
    assert (tmp_path / "ratio.png").stat().st_size > 0


@pytest.mark.slow
def test_experiment_runs_from_a_config_and_sets(tmp_path: Path) -> None:
    """`pearl experiment --config F --set K=V` starts every run from that config with the
    override (here a prefill-only budget the table can show), and --out writes the config
    it ran (the experiment reruns from it)."""
    cfg = tmp_path / "in.yaml"
    cfg.write_text("seed: 3\nengine:\n  max_batched_tokens: 4096\n")
    out = tmp_path / "out"
    args = ["experiment", "ratio", "--quick", "--config", str(cfg)]
    res = runner.invoke(app, [*args, "--set", "engine.max_num_seqs=64", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ran = yaml.safe_load((out / "config.yaml").read_text())
    assert ran["seed"] == 3
    assert ran["engine"]["max_batched_tokens"] == 4096 and ran["engine"]["max_num_seqs"] == 64
    again = runner.invoke(
        app, ["experiment", "ratio", "--quick", "--config", str(out / "config.yaml"), "--json"]
    )
    assert again.exit_code == 0, again.output
    assert (
        json.loads(again.stdout)["rows"] == json.loads((out / "results.json").read_text())["rows"]
    )


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--set", "engine.nosuch=1"], ["engine", "nosuch"]),
        (["--set", "rollout.workload.prefix_reuse=turns"], ["prefix_reuse"]),
        (["--set", "novalue"], ["--set", "KEY=VALUE"]),
    ],
)
def test_experiment_bad_set_is_one_line_exit_2(extra: list[str], needles: list[str]) -> None:
    """A bad override of an experiment is refused before any run, naming the field."""
    res = runner.invoke(app, ["experiment", "facts", "--quick", *extra])
    assert res.exit_code == 2, res.output
    assert all(n in res.stderr for n in needles), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_facts_reports_a_split_that_finishes_no_batch() -> None:
    """A configuration slower than the run is long (a short --quick run on an A100, where
    one P:D split finishes no batch in 400 simulated seconds) is reported as such and
    loses every comparison; the experiment does not fail at its end. The §3.2 rows run on
    the configured card too."""
    res = runner.invoke(
        app, ["experiment", "facts", "--quick", "--set", "cluster.gpu=a100-80g", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    notes = " ".join(doc["notes"])
    assert "no batch finished" in notes and "--duration" in notes
    h100 = json.loads(runner.invoke(app, ["experiment", "facts", "--quick", "--json"]).stdout)
    share = [
        r["simulated"] for r in doc["rows"] if r["fact"].startswith("§3.2 prefill share of time")
    ]
    share_h100 = [
        r["simulated"] for r in h100["rows"] if r["fact"].startswith("§3.2 prefill share of time")
    ]
    assert share and share != share_h100


def test_e2e_rows_run_their_trace_whatever_the_config_static_pool() -> None:
    """e2e (and the ladder) set each row's trace: a static pool in the config or a --set
    does not turn the rows labelled seg1 into static runs."""
    args = ["experiment", "e2e", "--quick", "--json"]
    plain = json.loads(runner.invoke(app, args).stdout)
    res = runner.invoke(app, [*args, "--set", "trace.static_gpus=4"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["rows"] == plain["rows"]


@pytest.mark.parametrize("name", ["facts", "ladder", "e2e"])
def test_experiment_refuses_a_card_one_of_its_models_does_not_fit(name: str) -> None:
    """An experiment runs models of its own (facts: Qwen3-30B-A3B for §3.2 even with
    --quick); a card that cannot hold one is one line naming the model and the field,
    exit 2, before any run, never a traceback from a worker."""
    res = runner.invoke(app, ["experiment", name, "--set", "cluster.gpu=a100-40g"])
    assert res.exit_code == 2, res.output
    assert "qwen3-30b-a3b" in res.stderr and "gpus_per_worker=2 fits" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_unknown_experiment_exit_2() -> None:
    """An unknown experiment name is one line on stderr, exit 2."""
    res = runner.invoke(app, ["experiment", "nosuch"])
    assert res.exit_code == 2 and "NAME" in res.stderr


@pytest.mark.slow
def test_validate_json_reports_errors_and_choices() -> None:
    """`pearl validate --json` on a tiny grid reports error quantiles and choice checks."""
    res = runner.invoke(
        app,
        "validate --budgets 2 --batches 8 --steps 1 --profile-steps 1 --json".split(),
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["num_points"] == 2  # colocated:2 and disaggregated:1:1
    assert 0.0 <= doc["median_rel_error"] <= doc["p90_rel_error"]
    assert doc["choice_within_1pct"] in (0.0, 1.0)
    assert doc["choice_within_1pct_or_noise"] >= doc["choice_within_1pct"]
    assert all(len(p["simulated_steps_s"]) == 1 for p in doc["points"])


def test_validate_on_a_one_gpu_budget() -> None:
    """A grid whose smallest budget is one GPU learns its profile's disaggregated run on
    two (a split needs a prefill and a decode worker) instead of failing with a
    traceback; its only point is colocation."""
    res = runner.invoke(
        app, "validate --budgets 1 --batches 8 --steps 1 --profile-steps 1 --json".split()
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["num_points"] == 1 and doc["points"][0]["config"].startswith("colocated")


def test_validate_takes_a_config_and_sets(tmp_path: Path) -> None:
    """`pearl validate --config F --set K=V` runs its grid from that config (here another
    workload, which changes the simulated makespans), and a bad override is one line."""
    tiny = "validate --budgets 2 --batches 8 --steps 1 --profile-steps 1 --json".split()
    base = json.loads(runner.invoke(app, tiny).stdout)
    cfg = tmp_path / "v.yaml"
    cfg.write_text("rollout:\n  workload:\n    prefix_reuse: context\n")
    res = runner.invoke(app, [*tiny, "--config", str(cfg), "--set", "seed=0"])
    assert res.exit_code == 0, res.output
    other = json.loads(res.stdout)
    assert [p["simulated_s"] for p in other["points"]] != [p["simulated_s"] for p in base["points"]]
    bad = runner.invoke(app, [*tiny, "--set", "rollout.nosuch=1"])
    assert bad.exit_code == 2 and "nosuch" in bad.stderr


def test_an_interrupted_experiment_keeps_its_settings_for_a_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in `pearl experiment --out DIR`: exit 130 and a line saying what is kept;
    the same command again reads the finished settings back instead of simulating them."""
    from pearl.sim import compare
    from pearl.sim.compare import run_simulation
    from pearl.sim.experiments import EXPERIMENTS
    from pearl.sim.experiments.result import ExperimentResult

    calls: list[str] = []

    def two_settings(cfg, *, progress=None):  # an experiment of two settings
        rows = []
        for seed in (0, 1):
            c = cfg.with_updates(
                seed=seed,
                **{"trace.static_gpus": 2, "trace.duration_s": 300.0, "policies": ["pearl"]},
            )
            res = run_simulation(c, progress=progress, with_bound=False)
            rows.append({"seed": seed, "traj/h": res.runs[0].summary["trajs_per_hour"]})
            if not calls:
                calls.append("interrupted")
                raise KeyboardInterrupt
        return ExperimentResult("e2e", "two settings", ["seed", "traj/h"], rows)

    monkeypatch.setitem(EXPERIMENTS, "e2e", two_settings)
    out = tmp_path / "out"
    args = ["experiment", "e2e", "--batch", "8", "--out", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 130, res.output
    assert "interrupted after" in res.stderr and "1 simulation(s) finished" in res.stderr
    assert "run the same command again" in res.stderr
    assert len(list((out / "runs").glob("*.pkl"))) == 1

    simulated: list[int] = []
    real = compare._simulate

    def counted(cfg, **kwargs):
        simulated.append(cfg.seed)
        return real(cfg, **kwargs)

    monkeypatch.setattr(compare, "_simulate", counted)
    again = runner.invoke(app, [*args, "--json"])
    assert again.exit_code == 0, again.output
    assert simulated == [1]  # seed 0 was read back
    assert "1 stored simulation(s)" in again.stderr
    assert [r["seed"] for r in json.loads(again.stdout)["rows"]] == [0, 1]
    assert "done: qwen3-8b static:2 batch 8 len 32K seed 0" in again.stderr


def test_an_interrupted_validate_says_how_far_it_got(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in `pearl validate`: exit 130 and one line with the grid points done."""
    import pearl.sim.validate as validate_mod

    def stopped(cfg, *, progress=None, **kwargs):
        progress("grid", 3, 10)
        raise KeyboardInterrupt

    monkeypatch.setattr(validate_mod, "validate", stopped)
    res = runner.invoke(app, ["validate", "--budgets", "4", "--batches", "8"])
    assert res.exit_code == 130, res.output
    assert "interrupted after 3 of 10 grid points" in res.stderr


def test_an_interrupted_validate_with_out_goes_on_from_its_finished_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pearl validate --out DIR`, interrupted on its last grid point, keeps the learned
    profile and the finished point in DIR/runs; the same command again simulates only the
    point that was cut, and reports what an uninterrupted run does."""
    import pearl.sim.validate as validate_mod

    tiny = "validate --budgets 2 --batches 8 --steps 1 --profile-steps 1 --json".split()
    whole = runner.invoke(app, tiny)
    assert whole.exit_code == 0, whole.output

    real = validate_mod.simulate_makespans
    calls: list[str] = []

    def cut_on_the_fourth(cfg, config, **kwargs):  # profile x2, then the grid's 2 points
        calls.append(str(config))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(cfg, config, **kwargs)

    monkeypatch.setattr(validate_mod, "simulate_makespans", cut_on_the_fourth)
    out = tmp_path / "v"
    res = runner.invoke(app, [*tiny, "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert "interrupted after 1 of 2 grid points" in res.stderr
    assert "the 2 simulation(s) finished in this run are kept" in res.stderr
    assert not (out / "validate.json").exists()

    calls.clear()
    monkeypatch.setattr(validate_mod, "simulate_makespans", real)
    counted: list[str] = []
    monkeypatch.setattr(
        validate_mod,
        "simulate_makespans",
        lambda cfg, config, **kw: counted.append(str(config)) or real(cfg, config, **kw),
    )
    again = runner.invoke(app, [*tiny, "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert counted == ["disaggregated:1:1"]  # the profile and colocation were read back
    assert "2 stored simulation(s)" in again.stderr
    assert json.loads(again.stdout) == json.loads(whole.stdout)
    assert json.loads((out / "validate.json").read_text()) == json.loads(whole.stdout)
    assert (out / "config.yaml").is_file()


def test_models_option_runs_the_given_models(tmp_path: Path) -> None:
    """--models sets the rows of e2e (a config.json of a model of your own included); an
    experiment of one model takes exactly one; a bad file is one line naming it."""
    from model_files import write_hf_config

    mine = write_hf_config(tmp_path / "mine", "qwen3-8b")
    res = runner.invoke(app, ["experiment", "e2e", "--quick", "--models", str(mine), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # rows say the model's name (its folder), a note the file behind it
    assert doc["rows"] and {r["model"] for r in doc["rows"]} == {"mine"}
    assert f"model files: mine = {mine}" in doc["notes"]
    res = runner.invoke(app, ["experiment", "ablation", "--quick", "--models", "a,b"])
    assert res.exit_code == 2 and "--models" in res.stderr and "one model" in res.stderr
    res = runner.invoke(app, ["experiment", "e2e", "--quick", "--models", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "x.json" in res.stderr and "file not found" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
