"""The config sections both worlds share (`pearl.world.sections`): one name, type,
constraint and help text for each shared knob, and a pointed error for the old names."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl.errors import InputError
from pearl.runtime.run_config import RunConfig, load_run_config
from pearl.sim.config import SimConfig, load_config
from pearl.world.sections import RENAMED, ClusterShape, RolloutShape, TraceShape


@pytest.mark.parametrize(
    ("section", "shape"),
    [("cluster", ClusterShape), ("rollout", RolloutShape), ("trace", TraceShape)],
)
def test_both_worlds_build_their_sections_from_one_shape(section: str, shape: type) -> None:
    sim = SimConfig.model_fields[section].annotation
    run = RunConfig.model_fields[section].annotation
    for cls in (sim, run):
        assert issubclass(cls, shape)
        for name, base in shape.model_fields.items():
            got = cls.model_fields[name]
            assert got.annotation == base.annotation, (cls, name)
            assert got.description == base.description, (cls, name)
            assert got.metadata == base.metadata, (cls, name)


def test_each_world_keeps_its_own_defaults() -> None:
    sim, run = SimConfig(), RunConfig()
    assert (sim.cluster.num_training_gpus, sim.cluster.num_dedicated_gpus) == (16, 4)
    assert (sim.rollout.batch_size, sim.rollout.max_context_tokens) == (64, 32768)
    assert (run.cluster.num_training_gpus, run.cluster.num_dedicated_gpus) == (2, 2)
    assert (run.rollout.batch_size, run.rollout.max_context_tokens) == (16, 256)
    assert sim.rollout.max_staleness == run.rollout.max_staleness == 1


@pytest.mark.parametrize("old", sorted(RENAMED))
@pytest.mark.parametrize("load", [load_config, load_run_config], ids=["simulate", "run"])
def test_an_old_name_says_the_new_one(tmp_path: Path, old: str, load) -> None:
    section, name = old.split(".")
    path = tmp_path / "old.yaml"
    path.write_text(f"{section}:\n  {name}: 1\n")
    with pytest.raises(InputError) as err:
        load(path)
    assert err.value.source == str(path) and err.value.field == old
    assert RENAMED[old] in str(err.value)


def test_a_run_needs_one_reserved_slot(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("cluster:\n  num_dedicated_gpus: 0\n")
    with pytest.raises(InputError) as err:
        load_run_config(path)
    assert err.value.field == "cluster" and "num_dedicated_gpus" in str(err.value)
