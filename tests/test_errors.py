"""User-facing errors keep what they say when they cross a process boundary (a simulation
run in a worker process raises them there; `pearl simulate` prints them here)."""

from __future__ import annotations

import pickle

from pearl.control.state import StateError
from pearl.errors import InputError, PathError
from pearl.traces.availability import TraceError


def test_input_error_survives_pickling_with_every_field() -> None:
    err = InputError("cfg.yaml", "must be >= 1", location="line 3", field="rollout.batch_size")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is InputError and str(back) == str(err)
    assert (back.source, back.message, back.location, back.field) == (
        "cfg.yaml",
        "must be >= 1",
        "line 3",
        "rollout.batch_size",
    )


def test_path_errors_survive_pickling_as_their_own_class() -> None:
    for cls in (PathError, TraceError, StateError):
        err = cls("must increase", "changes[3].time_s", field="time_s")
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is cls and str(back) == str(err)
        assert (back.message, back.path, back.field) == (
            "must increase",
            "changes[3].time_s",
            "time_s",
        )


def test_an_input_error_raised_in_a_ray_actor_is_one_line() -> None:
    """Ray re-raises an actor's exception as an instance of its class whose text carries
    the remote traceback, the original in `.cause`; the CLI prints the original's line."""
    import typer
    from typer.testing import CliRunner

    from pearl.cli.output import guarded

    cause = InputError("/runs/r/checkpoint/trainer-3.pt", "trainer checkpoint not found")

    class RemoteError(InputError):
        def __init__(self) -> None:
            super().__init__("ray::TrainerActor.load()", 'File "actor.py", line 95\n  ...')
            self.cause = cause

    app = typer.Typer()

    @app.command()
    @guarded
    def load() -> None:
        raise RemoteError()

    res = CliRunner().invoke(app, [])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {cause}"


def test_a_missing_field_beside_an_unknown_one_names_the_unknown_one(tmp_path) -> None:
    """A misspelt required field was reported as missing alone: the user saw 'Field
    required' for the field they believed they had written."""
    import pytest

    from pearl.specs import get_gpu

    card = tmp_path / "card.yaml"
    card.write_text(
        "name: x\nbf16_tflops: 900\nhbm_gb: 80\nnvlink_gb_s_per_dir: 450\nhbm_tbps: 3\n"
    )
    with pytest.raises(InputError) as err:
        get_gpu(str(card))
    assert err.value.field == "hbm_tb_s" and "'hbm_tbps'" in err.value.message
    card.write_text("name: x\nbf16_tflops: 900\nhbm_gb: 80\nnvlink_gb_s_per_dir: 450\n")
    with pytest.raises(InputError) as err:
        get_gpu(str(card))
    assert err.value.field == "hbm_tb_s" and "misspelling" not in err.value.message
