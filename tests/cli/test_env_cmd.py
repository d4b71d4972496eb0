"""`pearl env`: list and play, JSON output and one-line errors with exit code 2."""

import json

from typer.testing import CliRunner

from pearl.cli.main import app

runner = CliRunner()


def test_env_list_json():
    """Both environments are listed with their task counts; the sandbox level is named."""
    res = runner.invoke(app, ["env", "list", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    names = {e["name"]: e for e in doc["environments"]}
    assert names["guess"]["num_tasks"] == 1000 and names["code_repair"]["num_tasks"] == 5
    assert doc["sandbox_isolation"] in ("full", "userns", "none")


def test_env_play_json_stops_at_done():
    """Actions are applied in order until the episode ends; the return is their sum."""
    from pearl.envs.learnable import GuessEnv

    secret = GuessEnv().secret_of(4)
    args = ["env", "play", "guess", "--task", "4", "--json"]
    for a in ("x", str(secret), "1"):
        args += ["-a", a]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc["steps"]) == 2 and doc["steps"][-1]["done"]
    assert doc["return"] == sum(s["reward"] for s in doc["steps"]) and doc["return"] > 0.8


def test_env_play_bad_input_exit_2():
    """Unknown names and out-of-range tasks give one error line and exit code 2."""
    res = runner.invoke(app, ["env", "play", "nope"])
    assert res.exit_code == 2 and "unknown environment" in res.output
    res = runner.invoke(app, ["env", "play", "code_repair", "--task", "9"])
    assert res.exit_code == 2 and "--task" in res.output and "out of range" in res.output
