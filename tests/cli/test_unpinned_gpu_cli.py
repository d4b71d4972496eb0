"""Simulating commands name a GPU the calibration does not pin (`GpuSpec.unpinned`)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pearl.cli.main import app

runner = CliRunner()
SMALL = ["--static-gpus", "2", "--batch", "8", "--duration", "300", "--no-bound"]


def test_a_card_the_calibration_does_not_pin_is_named_on_stderr() -> None:
    """Simulating on an H20 (whose one published run is ~2x slower than the world) says so
    on stderr, leaving --json's one document on stdout; a pinned card says nothing."""
    args = ["simulate", *SMALL, "--policies", "fixed:colocated", "--json"]
    res = runner.invoke(app, [*args, "--gpu", "h20"])
    assert res.exit_code == 0, res.output
    assert "h20: not calibrated" in res.stderr and "twice as long" in res.stderr
    json.loads(res.stdout)
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and "not calibrated" not in res.stderr
    from pearl.specs import get_gpu

    assert not get_gpu("h100-sxm").unpinned and not get_gpu("a100-80g").unpinned
    assert get_gpu("h200").unpinned and get_gpu("h800").unpinned
