"""`pearl simulate`: one JSON document, outputs on disk, one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pearl.cli.main import app

runner = CliRunner()
SMALL = ["--static-gpus", "2", "--batch", "8", "--duration", "300", "--no-bound"]


def test_simulate_json_is_one_document_with_each_policy() -> None:
    """--json prints one JSON object with a summary per policy."""
    res = runner.invoke(
        app, ["simulate", *SMALL, "--policies", "fixed:colocated,fixed:disagg:1:1", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc["policies"]) == {"fixed:colocated", "fixed:disagg:1:1"}
    for s in doc["policies"].values():
        assert s["trajs_per_hour"] >= 0 and "reconfigurations" in s and "gpu_hours" in s
    assert doc["trace"] == "static:2" and doc["batch_size"] == 8


def test_bad_policy_is_one_line_exit_2() -> None:
    """An unknown policy names the option, on one line, exit code 2."""
    res = runner.invoke(app, ["simulate", *SMALL, "--policies", "nosuch"])
    assert res.exit_code == 2
    assert "--policies" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_bad_config_file_names_file_and_field(tmp_path: Path) -> None:
    """A config with a bad value names the file and the dotted field."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  batch_size: 0\n")
    res = runner.invoke(app, ["simulate", "--config", str(bad), "--json"])
    assert res.exit_code == 2
    assert str(bad) in res.stderr and "rollout.batch_size" in res.stderr


def test_bad_batch_option_exit_2() -> None:
    """A batch of 0 is refused before anything runs."""
    res = runner.invoke(app, ["simulate", "--batch", "0", "--json"])
    assert res.exit_code == 2 and "rollout.batch_size" in res.stderr


def test_a_renamed_set_key_names_the_new_one() -> None:
    """`--set trainer.max_staleness=0` (staleness moved to the shared rollout section) says
    where it went instead of simulating with the default."""
    res = runner.invoke(app, ["simulate", *SMALL, "--set", "trainer.max_staleness=0", "--json"])
    assert res.exit_code == 2
    assert "--set" in res.stderr and "rollout.max_staleness" in res.stderr


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


def test_simulate_on_a_trace_file(tmp_path: Path) -> None:
    """--trace accepts a trace file; its preemptible GPUs are counted as available."""
    from pearl.traces import periodic, save_json_trace

    path = tmp_path / "t.json"
    save_json_trace(periodic([2, 0], period_s=200.0, duration_s=400.0, reclaim_notice_s=20.0), path)
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(path),
            "--batch",
            "8",
            "--policies",
            "rlboost+",
            "--no-bound",
            "--jobs",
            "1",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["duration_s"] == 400.0
    assert doc["policies"]["rlboost+"]["available_preemptible_gpu_hours"] > 0


def test_missing_trace_file_exit_2() -> None:
    """A trace that is neither bundled nor a file is one line naming it, exit 2."""
    res = runner.invoke(app, ["simulate", "--trace", "no/such.json", "--json"])
    assert res.exit_code == 2 and "no/such.json" in res.stderr


def test_simulate_over_seeds_reports_each_policy_per_seed_and_on_the_means(
    tmp_path: Path,
) -> None:
    """--seeds runs once per seed: per-seed traj/h, mean, min, max, the first policy against
    each other one, each seed's own document and, with --out, one folder per seed."""
    res = runner.invoke(
        app,
        [
            "simulate",
            *SMALL,
            "--policies",
            "fixed:colocated,fixed:disagg:1:1",
            "--seeds",
            "0, 1,1",
            "--json",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["seeds"] == [0, 1] and "seed" not in doc["setting"]
    assert [r["seed"] for r in doc["runs"]] == [0, 1]
    for name, s in doc["policies"].items():
        per = [r["policies"][name]["trajs_per_hour"] for r in doc["runs"]]
        assert s["trajs_per_hour"] == per
        assert s["min"] <= s["mean"] <= s["max"] and s["mean"] == pytest.approx(sum(per) / 2)
        assert s["fraction_of_bound_mean"] is None  # --no-bound
    cmp = doc["policies"]["fixed:colocated"]["against"]["fixed:disagg:1:1"]
    assert 0 <= cmp["seeds_ahead"] <= 2
    assert (tmp_path / "out" / "seed-0" / "summary.json").is_file()
    assert (tmp_path / "out" / "seed-1" / "summary.json").is_file()
    # a line a seed done on stderr, the progress a log that is not a terminal shows
    assert "done: seed 0" in res.stderr and "done: seed 1" in res.stderr


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--seeds", "0,x"], "not an integer seed"),
        (["--seeds", "-1"], "seeds must be >= 0"),
        (["--seeds", " , "], "no seed given"),
        (["--seeds", "0,1", "--seed", "2"], "not both"),
    ],
)
def test_simulate_bad_seeds_name_the_option(extra: list[str], needle: str) -> None:
    res = runner.invoke(app, ["simulate", *SMALL, "--policies", "fixed:colocated", *extra])
    assert res.exit_code == 2
    assert needle in res.output and "--seeds" in res.output


@pytest.mark.parametrize(
    ("override", "needle"),
    [("prefix_reuse=turns", "prefix_reuse"), ("prompt_tokens_max=40000", "context_cap")],
)
def test_a_bad_workload_override_is_refused_before_anything_runs(
    override: str, needle: str
) -> None:
    """A workload field is checked when the config is read, with its name, not as a
    traceback once a world is built (the length limit is the workload's context cap)."""
    res = runner.invoke(app, ["simulate", *SMALL, "--set", f"rollout.workload.{override}"])
    assert res.exit_code == 2
    assert "rollout.workload" in res.stderr and needle in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--model", "nosuch"], ["cluster.model", "qwen3-8b"]),
        (["--set", "cluster.gpu=nosuch"], ["cluster.gpu", "h100-sxm"]),
        (
            ["--model", "qwen3-30b-a3b", "--set", "cluster.gpu=a100-40g"],
            ["gpus_per_worker", "gpus_per_worker=2 fits"],
        ),
        (
            ["--model", "qwen3-30b-a3b", "--set", "engine.gpu_memory_utilization=0.7"],
            ["engine.gpu_memory_utilization=0.7", "gpus_per_worker=2 fits"],
        ),
        (["--set", "engine.gpu_memory_utilization=1.5"], ["engine.gpu_memory_utilization"]),
        (["--set", "cluster.gpus_per_worker=4"], ["trace.static_gpus", "gpus_per_worker=4"]),
        (["--trace", "seg2"], ["--static-gpus", "--trace", "not both"]),
        (
            ["--static-gpus", "1", "--policies", "fixed:colocated,fixed:disagg:1:1"],
            ["fixed:disagg:1:1", "prefill and a decode worker", "trace.static_gpus=1"],
        ),
    ],
)
def test_a_cluster_that_cannot_hold_a_worker_is_refused_before_anything_runs(
    args: list[str], needles: list[str]
) -> None:
    """Unknown names, weights that leave no KV cache, a static pool smaller than a worker:
    one line naming the field, exit 2, never a traceback from a worker process nor a run
    that reports 0 trajectories/h."""
    res = runner.invoke(app, ["simulate", *SMALL, *args])
    assert res.exit_code == 2, res.output
    assert all(n in res.stderr for n in needles), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["simulate", *SMALL], ["experiment", "facts", "--quick"]])
def test_an_out_path_that_cannot_be_a_directory_fails_before_the_run(
    tmp_path: Path, command: list[str]
) -> None:
    """--out is created up front: a file in the way is one line naming --out, before any
    simulated work that would otherwise be lost at the end."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = runner.invoke(app, [*command, "--out", str(blocker / "results")])
    assert res.exit_code == 2, res.output
    assert "--out" in res.stderr and str(blocker) in res.stderr


def test_a_length_limit_below_the_prompts_names_the_limit() -> None:
    """The workload's context cap is rollout.max_context_tokens: the error says so."""
    res = runner.invoke(app, ["simulate", *SMALL, "--max-len", "2000"])
    assert res.exit_code == 2
    assert "prompt_tokens_max" in res.stderr and "rollout.max_context_tokens" in res.stderr


def test_a_run_too_short_for_a_batch_says_so() -> None:
    """500 trajectories on 2 GPUs finish no batch in 300 s: the table's zeros come with a
    line naming the policies and the cure, not silently."""
    res = runner.invoke(
        app,
        ["simulate", "--static-gpus", "2", "--batch", "500", "--duration", "300", "--no-bound"]
        + ["--policies", "pearl,roll"],
    )
    assert res.exit_code == 0, res.output
    assert "pearl, roll: no rollout batch finished in 300 simulated s" in " ".join(
        res.stdout.split()
    )
    short = runner.invoke(app, ["simulate", *SMALL, "--policies", "roll"])
    assert "no rollout batch finished" not in short.stdout
    empty = runner.invoke(
        app,
        ["simulate", "--trace", "seg1", "--duration", "300", "--no-bound", "--policies", "roll"]
        + ["--set", "cluster.num_dedicated_gpus=0"],
    )
    assert "roll: held no rollout GPU" in empty.stdout, empty.output


def test_splits_only_on_a_one_worker_pool_run_colocated() -> None:
    """`controller.modes: [disaggregated]` on one GPU: the engine has no split to score and
    runs colocated (it stopped the run with an IndexError)."""
    res = runner.invoke(
        app,
        ["simulate", "--static-gpus", "1", "--batch", "4", "--duration", "600", "--no-bound"]
        + ["--policies", "pearl", "--set", 'controller.modes=["disaggregated"]', "--json"],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["policies"]["pearl"]["trajectories"] > 0


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
    assert "interrupted after" in res.stderr and "1 setting(s) simulated" in res.stderr
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
