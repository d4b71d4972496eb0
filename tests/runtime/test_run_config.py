"""`pearl run` configs: a bad environment is refused when the file is read, naming the file
and the field, before Ray starts or a run directory is made."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pearl.errors import InputError
from pearl.runtime.run_config import load_run_config

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"


def _with_env(tmp_path: Path, **env: object) -> Path:
    doc = yaml.safe_load(DEMO.read_text())
    doc["env"] = {**doc["env"], **env}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_demo_config_loads() -> None:
    assert load_run_config(DEMO).env.name == "guess"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"name": "nosuch"}, "unknown environment 'nosuch'"),
        ({"kwargs": {"observation": "nonsense"}}, "observation must be one of"),
        ({"kwargs": {"observaton": "short"}}, "observaton"),
    ],
)
def test_a_bad_environment_names_the_file_and_the_field(
    tmp_path: Path, env: dict, needle: str
) -> None:
    path = _with_env(tmp_path, **env)
    with pytest.raises(InputError) as err:
        load_run_config(path)
    assert err.value.source == str(path) and err.value.field == "env"
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [({"hidden_sizee": 3}, "hidden_sizee"), ({"hidden_size": -3}, "tiny_overrides.hidden_size")],
)
def test_bad_tiny_model_overrides_name_the_file_and_the_field(
    tmp_path: Path, overrides: dict, needle: str
) -> None:
    doc = yaml.safe_load(DEMO.read_text())
    doc["model"] = {**doc["model"], "tiny_overrides": overrides}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as err:
        load_run_config(path)
    assert err.value.source == str(path) and err.value.field == "model"
    assert needle in str(err.value)


def test_a_negative_seed_names_the_file_and_the_field(tmp_path: Path) -> None:
    """numpy refuses negative seeds deep inside a run; the config refuses them first."""
    doc = yaml.safe_load(DEMO.read_text())
    doc["seed"] = -1
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as err:
        load_run_config(path)
    assert err.value.source == str(path) and err.value.field == "seed"
