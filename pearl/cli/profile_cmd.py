"""`pearl profile fit`: telemetry JSONL -> workload profile JSON (paper §4.1.1, §4.3);
`pearl profile workload` (the simulated world's workload from the same records) lives in
`pearl.cli.workload_cmd`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from pearl.cli.output import console, err_console, guarded, print_json
from pearl.cli.telemetry_input import read_telemetry, telemetry_path
from pearl.control.profile import HardwarePrior, ProfileError, WorkloadProfile
from pearl.control.tracker import RuntimeTracker
from pearl.errors import InputError, read_json
from pearl.specs import get_gpu, get_model

profile_app = typer.Typer(
    help="Fit from telemetry: the decision engine's profile (fit) or the simulator's workload (workload).",
    no_args_is_help=True,
    add_completion=False,
)


def hardware_prior(model: str, gpu: str, gpus_per_worker: int) -> HardwarePrior:
    """The decision engine's hardware prior from the bundled specs (pydantic stays here)."""
    return HardwarePrior.from_specs(get_model(model), get_gpu(gpu), gpus_per_worker=gpus_per_worker)


def load_profile(path: Path) -> WorkloadProfile:
    """Read and validate a profile JSON file; errors name the file and the field."""
    doc = read_json(path)
    try:
        return WorkloadProfile.from_json(doc, str(path))
    except ProfileError as err:
        raise InputError(str(path), err.message, location=err.location, field=err.field) from None


def fit_profile(
    path: Path,
    *,
    model: str | None = None,
    gpu: str | None = None,
    gpus_per_worker: int | None = None,
    alpha: float = 0.5,
) -> WorkloadProfile:
    """Fold every rollout step of a telemetry file, in order, into a fresh tracker."""
    path = telemetry_path(path)
    tel = read_telemetry(path, "a profile")
    model = model or tel.meta.model
    gpu = gpu or tel.meta.gpu
    if model is None or gpu is None:
        model, gpu = model or "qwen3-8b", gpu or "h100-sxm"
        err_console.print(
            f"[yellow]note:[/yellow] {path} names no model or GPU (no meta line): fitted "
            f"around the {model} on {gpu} prior; pass --model and --gpu for another. A "
            "`pearl run` directory keeps the profile its engine fitted in profile.json "
            "(`pearl decide --profile RUN/profile.json`).",
            highlight=False,
            soft_wrap=True,
        )
    hw = hardware_prior(model, gpu, gpus_per_worker or tel.meta.gpus_per_worker)
    tracker = RuntimeTracker(hw, alpha=alpha)
    for _, turns, steps in tel.by_step():
        tracker.observe_step(turns, steps)
    return tracker.profile


def _table(doc: dict[str, Any]) -> Table:
    table = Table(title="workload profile", show_lines=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    for key, value in doc.items():
        if isinstance(value, dict):
            for k, v in value.items():
                table.add_row(f"{key}.{k}", _fmt(v))
        else:
            table.add_row(key, _fmt(value))
    return table


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):  # the trajectory sample: its size, the rows are in --json
        return f"{len(v)} finished trajectories (--json lists them)"
    return str(v)


@profile_app.command("fit")
@guarded
def fit(
    telemetry: Path = typer.Argument(
        ...,
        metavar="RUN_DIR|TELEMETRY.jsonl",
        help="Telemetry JSONL (see docs/telemetry.md) or a run directory holding one.",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Model name or an HF config.json (default: the file's meta line, else qwen3-8b).",
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="GPU name or a GPU file (default: the file's meta line, else h100-sxm)."
    ),
    gpus_per_worker: int | None = typer.Option(
        None, "--gpus-per-worker", help="GPUs per worker the telemetry was measured on."
    ),
    alpha: float = typer.Option(0.5, "--alpha", help="EMA weight of each new rollout step."),
    out: Path | None = typer.Option(None, "--out", help="Also write the profile JSON here."),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as one JSON document."),
) -> None:
    """Fit a workload profile from telemetry (the input of `pearl decide --profile`)."""
    if gpus_per_worker is not None and gpus_per_worker < 1:
        raise InputError(
            "<argument>", f"must be >= 1, got {gpus_per_worker}", field="--gpus-per-worker"
        )
    if not 0 < alpha <= 1:
        raise InputError("<argument>", f"must be in (0, 1], got {alpha}", field="--alpha")
    profile = fit_profile(
        telemetry, model=model, gpu=gpu, gpus_per_worker=gpus_per_worker, alpha=alpha
    )
    doc = profile.to_json()
    if out is not None:
        out.write_text(json.dumps(doc, indent=2) + "\n")
    if as_json:
        print_json(doc)
        return
    console.print(_table(doc))
    where = f" (written to {out})" if out is not None else ""
    console.print(f"{profile.num_steps} rollout step(s), {profile.num_turns} turn(s){where}")


def register(app: typer.Typer) -> None:
    from pearl.cli import workload_cmd

    workload_cmd.register(profile_app)
    app.add_typer(profile_app, name="profile")
