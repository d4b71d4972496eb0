"""`pearl profile fit` and `pearl decide` end to end: one JSON document, one-line errors, exit 2."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pearl.cli.main import app
from pearl.control.profile import WorkloadProfile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROFILE = EXAMPLES / "profile.json"
TELEMETRY = EXAMPLES / "telemetry.jsonl"
runner = CliRunner()


def _ok(args: list[str]) -> dict:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _bad(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.fixture(scope="module")
def fitted() -> dict:
    return _ok(["profile", "fit", str(TELEMETRY), "--json"])


def test_profile_fit_json_feeds_decide(tmp_path, fitted):
    doc = fitted
    prof = WorkloadProfile.from_json(doc)
    assert prof.num_steps == 2 and prof.step_fit.num_samples > 0
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    out = _ok(["decide", "--profile", str(f), "--gpus", "8", "--json"])
    assert out["num_workers"] == 8 and out["batch"] == round(prof.batch_size)


def test_profile_fit_takes_a_run_directory(tmp_path, fitted):
    """A run directory fits its telemetry.jsonl; pearl simulate --out's top directory, which
    holds one run a policy, is one line naming them."""
    run = tmp_path / "sim" / "pearl"
    run.mkdir(parents=True)
    (run / "telemetry.jsonl").write_text(TELEMETRY.read_text())
    assert _ok(["profile", "fit", str(run), "--json"]) == fitted
    line = _bad(["profile", "fit", str(tmp_path / "sim")])
    assert "no telemetry.jsonl in this directory (give one of its runs: pearl)" in line


def _close(a: object, b: object, path: str = "") -> None:
    """Equal documents, floats to 1e-9 relative: a least-squares fit's last digits depend
    on the CPU's vector instructions (BLAS picks its kernels per machine)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-300), path
    else:
        assert a == b, path


def test_shipped_profile_matches_shipped_telemetry(fitted):
    """examples/profile.json is what `pearl profile fit examples/telemetry.jsonl` prints."""
    shipped = json.loads(PROFILE.read_text())
    _close(
        WorkloadProfile.from_json(shipped).to_json(), WorkloadProfile.from_json(fitted).to_json()
    )


def test_decide_json_has_every_candidate():
    doc = _ok(["decide", "--profile", str(PROFILE), "--gpus", "8", "--current",
               "disaggregated:3:5", "--batch", "64", "--json"])  # fmt: skip
    assert doc["current"] == "disaggregated:3:5" and doc["batch"] == 64
    configs = [c["config"] for c in doc["candidates"]]
    assert configs[0] == "colocated:8" and len(configs) == 8 and doc["chosen"] in configs
    chosen = next(c for c in doc["candidates"] if c["config"] == doc["chosen"])
    assert chosen["feasible"] and chosen["makespan_s"] == doc["predicted_makespan_s"]
    assert {"throughput_bound_s", "critical_path_s"} <= set(chosen["breakdown"])


def test_decide_table_and_tensor_parallel():
    res = runner.invoke(app, ["decide", "--profile", str(PROFILE), "--gpus", "8", "--top", "3"])
    assert res.exit_code == 0 and "makespan" in res.stdout and "colocated:8" in res.stdout
    doc = _ok(["decide", "--profile", str(PROFILE), "--gpus", "8", "--gpus-per-worker", "2",
               "--json"])  # fmt: skip
    assert doc["num_workers"] == 4 and len(doc["candidates"]) == 4


def test_a_large_budget_shows_the_best_candidates_and_json_has_all():
    """A table row per split is unreadable at scale: by default the best 32 (+ the chosen),
    --top 0 every one, --json every one."""
    res = runner.invoke(app, ["decide", "--profile", str(PROFILE), "--gpus", "256"],
                        terminal_width=200)  # fmt: skip
    assert res.exit_code == 0 and "32 of 256 shown" in res.stdout
    doc = _ok(["decide", "--profile", str(PROFILE), "--gpus", "256", "--json"])
    assert len(doc["candidates"]) == 256


def test_profile_table_summarises_the_trajectory_sample(fitted):
    """The table names the sample's size; its rows are only in --json."""
    res = runner.invoke(app, ["profile", "fit", str(TELEMETRY)])
    assert res.exit_code == 0
    n = len(fitted["trajectory_sample"])
    assert n > 0 and f"{n} finished trajectories" in res.stdout
    assert str(fitted["trajectory_sample"][0][1]) not in res.stdout


def test_profile_missing_field(tmp_path):
    doc = json.loads(PROFILE.read_text())
    del doc["perf"]["decode_s_per_seq"]
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    line = _bad(["decide", "--profile", str(f), "--gpus", "8"])
    assert str(f) in line and "perf.decode_s_per_seq" in line and "missing" in line


def test_profile_negative_number(tmp_path):
    doc = json.loads(PROFILE.read_text())
    doc["decode_tokens_per_turn"] = -3
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    line = _bad(["decide", "--profile", str(f), "--gpus", "8"])
    assert str(f) in line and "decode_tokens_per_turn" in line


def test_telemetry_negative_tokens(tmp_path):
    lines = TELEMETRY.read_text().splitlines()
    rec = json.loads(lines[3])
    rec["new_prefill_tokens"] = -10
    lines[3] = json.dumps(rec)
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(lines) + "\n")
    line = _bad(["profile", "fit", str(f)])
    assert f"{f}:line 4" in line and "new_prefill_tokens" in line


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--gpus", "0"], "--gpus"),
        (["--gpus", "1", "--gpus-per-worker", "2"], "--gpus"),
        (["--gpus", "8", "--batch", "0"], "--batch"),
        (["--gpus", "8", "--current", "pipelined:3"], "--current"),
        (["--gpus", "8", "--modes", "colocated,magic"], "--modes"),
        (
            ["--gpus", "8", "--mode-threshold", "0.01", "--ratio-threshold", "0.2"],
            "--mode-threshold",
        ),
    ],
)
def test_bad_arguments(args, field):
    line = _bad(["decide", "--profile", str(PROFILE), *args])
    assert f"field '{field}'" in line


@pytest.mark.parametrize(
    ("args", "field"),
    [(["--gpus-per-worker", "0"], "--gpus-per-worker"), (["--alpha", "0"], "--alpha"),
     (["--model", "gpt-9"], "model")],
)  # fmt: skip
def test_bad_fit_arguments(args, field):
    line = _bad(["profile", "fit", str(TELEMETRY), *args])
    assert f"field '{field}'" in line


def test_missing_files(tmp_path):
    assert "file not found" in _bad(
        ["decide", "--profile", str(tmp_path / "x.json"), "--gpus", "2"]
    )
    assert "file not found" in _bad(["profile", "fit", str(tmp_path / "x.jsonl")])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "no turn records" in _bad(["profile", "fit", str(empty)])


def test_fit_says_which_prior_a_file_without_a_meta_line_gets(tmp_path):
    """A telemetry file that names no model or GPU (`pearl run`'s) is fitted around the
    default prior, and stderr says so; --model and --gpu silence it."""
    lines = TELEMETRY.read_text().splitlines()
    bare = tmp_path / "bare.jsonl"
    bare.write_text("\n".join(ln for ln in lines if '"kind":"meta"' not in ln.replace(" ", "")))
    res = runner.invoke(app, ["profile", "fit", str(bare), "--json"])
    assert res.exit_code == 0, res.output
    assert "no meta line" in res.stderr and "qwen3-8b on h100-sxm" in res.stderr
    json.loads(res.stdout)
    res = runner.invoke(app, ["profile", "fit", str(TELEMETRY), "--json"])
    assert res.exit_code == 0 and "no meta line" not in res.stderr
    res = runner.invoke(
        app, ["profile", "fit", str(bare), "--model", "qwen3-8b", "--gpu", "h100-sxm"]
    )
    assert res.exit_code == 0 and "no meta line" not in res.stderr
