"""`python -m bench.sim_validate --keep DIR`: a second run reads every grid point back."""

from __future__ import annotations

import json
from pathlib import Path

from bench_run import run_bench


def _bench(*args: str) -> None:
    run_bench("sim_validate", "--quick", *args)


def test_a_second_run_reads_the_kept_grid_back(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    _bench("--keep", str(keep), "--json", str(first))
    mtimes = {p.name: p.stat().st_mtime_ns for p in keep.iterdir()}
    assert mtimes  # the profile and the grid point's makespans
    _bench("--keep", str(keep), "--json", str(second))
    assert {p.name: p.stat().st_mtime_ns for p in keep.iterdir()} == mtimes  # none rewritten
    assert json.loads(second.read_text()) == json.loads(first.read_text())
