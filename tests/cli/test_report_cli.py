"""`pearl report RUN_DIR`: rebuild a run directory's report; refuse what is not one."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pearl.cli.main import app

runner = CliRunner()
SMALL = ["--static-gpus", "2", "--batch", "8", "--duration", "300", "--no-bound"]


def test_report_rebuilds_a_simulated_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    res = runner.invoke(
        app, ["simulate", *SMALL, "--policies", "fixed:colocated", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    run = out / "fixed_colocated"
    (run / "report.md").unlink()
    for png in run.glob("*.png"):
        png.unlink()
    # a line cut short by a crash is skipped and said, not fatal
    with (run / "events.jsonl").open("a") as fh:
        fh.write('{"t_s": 9')
    res = runner.invoke(app, ["report", str(run), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert Path(doc["report"]) == run / "report.md" and (run / "report.md").is_file()
    assert doc["steps"] > 0 and doc["skipped_lines"] == {"events.jsonl": 1}
    assert "## Controller decisions" in (run / "report.md").read_text()
    assert list(run.glob("*.png"))


def test_report_refuses_what_is_not_a_run_directory(tmp_path: Path) -> None:
    res = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such directory" in res.output
    (tmp_path / "f.txt").write_text("x")
    res = runner.invoke(app, ["report", str(tmp_path / "f.txt")])
    assert res.exit_code == 2 and "not a directory" in res.output
    # the --out of `pearl simulate` holds one run directory per policy: named in the error
    # (it has a config.yaml of its own, and nothing recorded)
    (tmp_path / "a" / "pearl").mkdir(parents=True)
    (tmp_path / "a" / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "a" / "pearl" / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "a" / "pearl" / "steps.jsonl").write_text("")
    res = runner.invoke(app, ["report", str(tmp_path / "a")])
    assert res.exit_code == 2
    assert "holds one run directory per policy (pearl): name one" in res.output
    assert not (tmp_path / "a" / "report.md").exists()
    # a run that stopped before recording anything but its config
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config.yaml").write_text("seed: 0\n")
    res = runner.invoke(app, ["report", str(tmp_path / "b")])
    assert res.exit_code == 2 and "nothing recorded yet" in res.output
    (tmp_path / "c").mkdir()
    res = runner.invoke(app, ["report", str(tmp_path / "c")])
    assert res.exit_code == 2 and "not a run directory (no config.yaml)" in res.output
