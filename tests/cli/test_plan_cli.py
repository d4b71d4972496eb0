"""`pearl plan` end to end: JSON output and one-line errors with exit code 2."""

import json
from pathlib import Path

from typer.testing import CliRunner

from pearl.cli.main import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "state.json"
runner = CliRunner()


def test_plan_json_on_example_state():
    """The shipped example plans to disaggregated:3:5 and colocated:8 with minimal ops."""
    res = runner.invoke(
        app, ["plan", "--from", str(EXAMPLE), "--to", "disaggregated:3:5", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["target"] == "disaggregated:3:5" and doc["current"] == "colocated:6"
    assert doc["num_ops"] == 8 and doc["num_adds"] == 2
    res = runner.invoke(app, ["plan", "--from", str(EXAMPLE), "--to", "colocated:8", "--json"])
    assert json.loads(res.stdout)["num_ops"] == 2


def test_plan_excluding_reclaimed_gpus():
    res = runner.invoke(
        app, ["plan", "--from", str(EXAMPLE), "--to", "colocated:6", "--exclude", "p0,p1", "--json"]
    )
    doc = json.loads(res.stdout)
    assert doc["num_removes"] == 2 and doc["num_adds"] == 2


def test_excluding_a_gpu_the_state_does_not_have_is_an_error():
    """A typo in --exclude would leave the GPU it meant usable: refused, naming it."""
    res = runner.invoke(
        app, ["plan", "--from", str(EXAMPLE), "--to", "colocated:6", "--exclude", "p0,px9"]
    )
    assert res.exit_code == 2
    assert "--exclude" in res.stderr and "px9" in res.stderr and "p0" not in res.stderr


def _bad(tmp_path: Path, doc: object) -> str:
    f = tmp_path / "state.json"
    f.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    res = runner.invoke(app, ["plan", "--from", str(f), "--to", "colocated:1"])
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    return res.output


def test_bad_state_files_name_file_path_and_field(tmp_path):
    out = _bad(tmp_path, {"gpus": [{"gpu_id": "g0", "zone": "moon"}]})
    assert "state.json:gpus[0].zone" in out and "'zone'" in out
    out = _bad(
        tmp_path,
        {
            "gpus": [{"gpu_id": "g0", "zone": "dedicated"}],
            "workers": [
                {"worker_id": "a", "gpu_ids": ["g0"], "role": "decode"},
                {"worker_id": "b", "gpu_ids": ["g0"], "role": "decode"},
            ],
        },
    )
    assert "workers[1]" in out and "bound twice" in out
    out = _bad(tmp_path, "{not json")
    assert "line 1" in out
    res = runner.invoke(
        app, ["plan", "--from", str(tmp_path / "missing.json"), "--to", "colocated:1"]
    )
    assert res.exit_code == 2 and "not found" in res.output


def test_infeasible_target_is_a_clear_error():
    res = runner.invoke(app, ["plan", "--from", str(EXAMPLE), "--to", "colocated:50"])
    assert res.exit_code == 2 and "needs" in res.output
