"""`--show-config` of the simulating commands: the config a command starts from, as YAML."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pearl.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("command", [["simulate"], ["experiment", "facts"], ["validate"]])
def test_show_config_prints_the_config_a_command_starts_from(
    tmp_path: Path, command: list[str]
) -> None:
    """--show-config prints the defaults with the options and --set applied, as YAML that
    --config reads back to the same config, and simulates nothing."""
    args = [*command, "--seed", "3", "--set", "engine.gpu_memory_utilization=0.85"]
    res = runner.invoke(app, [*args, "--show-config"])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(res.stdout)
    assert doc["seed"] == 3 and doc["engine"]["gpu_memory_utilization"] == 0.85
    assert {"cluster", "engine", "trainer", "costs", "trace", "rollout"} <= set(doc)
    saved = tmp_path / "config.yaml"
    saved.write_text(res.stdout)
    again = runner.invoke(app, [*command, "--config", str(saved), "--show-config"])
    assert again.exit_code == 0 and again.stdout == res.stdout
