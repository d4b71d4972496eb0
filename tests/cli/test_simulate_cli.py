"""`pearl simulate`: one JSON document, outputs on disk, one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
        (["--seed", "-1"], ["seed", "greater than or equal to 0"]),
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


def test_simulate_over_seeds_goes_on_from_the_seeds_an_interrupted_run_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--seeds ... --out DIR`, stopped after its first seed: exit 130 and a line naming
    the folder written; the same command again reads that seed back and simulates only the
    other, with the document an uninterrupted run prints. A seed folder of another config
    is simulated again."""
    from pearl.sim import compare

    args = ["simulate", *SMALL, "--policies", "fixed:colocated", "--seeds", "0,1", "--json"]
    whole = runner.invoke(app, args)
    assert whole.exit_code == 0, whole.output
    real = compare.run_simulation
    simulated: list[int] = []

    def stop_on_the_second(cfg, **kwargs):
        if simulated:
            raise KeyboardInterrupt
        simulated.append(cfg.seed)
        return real(cfg, **kwargs)

    monkeypatch.setattr(compare, "run_simulation", stop_on_the_second)
    out = tmp_path / "out"
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert "seed-0" in res.stderr and "the same command again goes on" in res.stderr

    simulated.clear()

    def counted(cfg, **kwargs):
        simulated.append(cfg.seed)
        return real(cfg, **kwargs)

    monkeypatch.setattr(compare, "run_simulation", counted)
    again = runner.invoke(app, [*args, "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert simulated == [1]
    assert "done: seed 0 (read back" in again.stderr
    assert json.loads(again.stdout) == json.loads(whole.stdout)
    assert (out / "seed-1" / "summary.json").is_file()

    cfg_file = out / "seed-0" / "config.yaml"
    cfg_file.write_text(cfg_file.read_text().replace("seed: 0", "seed: 7"))
    simulated.clear()
    third = runner.invoke(app, [*args, "--out", str(out)])
    assert third.exit_code == 0, third.output
    assert simulated == [0]  # its folder was another config's: simulated and rewritten
    assert json.loads(third.stdout) == json.loads(whole.stdout)
