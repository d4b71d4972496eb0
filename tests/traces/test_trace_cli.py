"""`pearl trace list/show` end to end: one JSON document; bad input -> one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pearl.cli.main import app
from pearl.traces import load_event_csv, scale

DATA = Path(__file__).resolve().parent / "data"
SHARED_P3 = Path(__file__).resolve().parents[3] / "shared/data/traces/parcae-p3/p3trace.csv"
KEYS = {"duration_s", "min_gpus", "mean_gpus", "max_gpus", "num_changes", "name", "source"}
runner = CliRunner()


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_show_seg1_json() -> None:
    doc = _json(["trace", "show", "seg1", "--json"])
    assert KEYS <= doc.keys() and doc["duration_s"] == 7200 and doc["name"] == "seg1"
    assert doc["min_gpus"] <= doc["mean_gpus"] <= doc["max_gpus"] <= 12


def test_list_json_has_the_three_segments() -> None:
    doc = _json(["trace", "list", "--json"])
    assert [t["name"] for t in doc["traces"]] == ["seg1", "seg2", "seg3"]
    assert all(KEYS <= t.keys() for t in doc["traces"])


def test_show_csv_with_scale_and_window() -> None:
    """Stats on a file equal the library's; the window starts with the count at START."""
    path = DATA / "p3trace_head.csv"
    doc = _json(["trace", "show", str(path), "--scale", "12/32", "--json"])
    lib = scale(load_event_csv(path), 12, 32)
    assert doc["mean_gpus"] == round(lib.stats().mean_gpus, 4)
    assert doc["num_changes"] == lib.stats().num_changes
    doc = _json(["trace", "show", str(path), "--scale", "12/32", "--window", "600:2400", "--json"])
    assert doc["duration_s"] == 1800 and doc["levels"][0]["num_gpus"] == lib.count_at(600)


def test_show_real_parcae_file() -> None:
    if not SHARED_P3.exists():
        pytest.skip("shared real traces not present")
    doc = _json(["trace", "show", str(SHARED_P3), "--scale", "12/32", "--json"])
    assert doc["max_gpus"] == 12 and doc["duration_s"] > 7200 and doc["num_changes"] > 0


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "seg3.png"
    doc = _json(["trace", "show", "seg3", "--plot", str(out), "--json"])
    assert doc["plot"] == str(out) and out.read_bytes()[:4] == b"\x89PNG"


def _bad(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and res.stdout == ""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("0,add,a\n1000,jump,a\n", ["bad.csv:line 2", "'op'"]),
        ("0,add,a\n2000,add,b\n1000,remove,a\n", ["bad.csv:line 3", "'time_ms'", "backwards"]),
        ("0,add,a\n1000,remove,b\n", ["bad.csv:line 2", "'node_id'", "not there"]),
        ("0,add,a\n1000;add;b\n", ["bad.csv:line 2", "'row'"]),
    ],
)
def test_bad_csv_through_the_cli(tmp_path: Path, text: str, expect: list[str]) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(text)
    line = _bad(["trace", "show", str(f), "--json"])
    assert all(e in line for e in expect), line


def test_bad_json_through_the_cli(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text(
        json.dumps({"name": "t", "duration_s": 10, "changes": [{"time_s": 1, "num_gpus": -2}]})
    )
    line = _bad(["trace", "show", str(f)])
    assert "t.json:changes[0].num_gpus" in line and "'num_gpus'" in line and "negative" in line


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--scale", "12/0"], "'--scale'"),
        (["--window", "9000:100"], "'--window'"),
        (["--window", "0:99999"], "'--window'"),
        (["--cap", "-1"], "'--cap'"),
    ],
)
def test_bad_arguments(args: list[str], expect: str) -> None:
    assert expect in _bad(["trace", "show", "seg1", *args])


def test_unknown_name() -> None:
    assert "not a bundled trace" in _bad(["trace", "show", "seg9"])
