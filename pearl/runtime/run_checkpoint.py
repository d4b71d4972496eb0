"""The driver's checkpoint document (`pearl run --resume`): written atomically each step.

It holds the trained step count, weight version, clock, per-step metrics and the finished
trajectories of batches not yet trained, and names the file beside it where the trainer
wrote its weights and optimiser state for that version (`trainer-<version>.pt`; run
directories written before 2026-12-07 have one `trainer.pt`). The driver writes the document
only once that file is whole, and removes older trainer files after, so a crash at any
moment leaves a document whose trainer file is complete and of its version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pearl.errors import InputError

DRIVER_FILE = "driver.json"
LEGACY_TRAINER_FILE = "trainer.pt"


def trainer_file_name(version: int) -> str:
    """The trainer's checkpoint file of weight version `version`."""
    return f"trainer-{version}.pt"


def write_checkpoint(directory: Path, doc: dict[str, Any]) -> None:
    """Replace `directory/driver.json` atomically (a crash leaves the old one whole)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (DRIVER_FILE + ".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(directory / DRIVER_FILE)


def read_checkpoint(directory: Path) -> dict[str, Any] | None:
    """The last checkpoint, None if there is none; a corrupt one is an `InputError`."""
    path = directory / DRIVER_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(
            str(path), f"corrupt checkpoint: {err.msg}", location=f"line {err.lineno}"
        ) from None
    _check_entries(doc, str(path))
    name = doc.setdefault("trainer_file", LEGACY_TRAINER_FILE)
    if not isinstance(name, str) or Path(name).name != name or not name:
        raise InputError(str(path), f"not a file name: {name!r}", field="trainer_file")
    if not (directory / name).is_file():
        raise InputError(
            str(directory / name), "the trainer checkpoint driver.json names is missing"
        )
    return doc


def _check_entries(doc: Any, source: str) -> None:
    """Every entry the driver reads back, of its type: a hand-edited or torn document is
    refused here, naming the entry, before Ray starts, not as a ValueError mid-start."""
    if not isinstance(doc, dict):
        raise InputError(source, "corrupt checkpoint: expected a JSON object")
    for key, kinds in (
        ("trained_steps", (int,)),
        ("version", (int,)),
        ("time_s", (int, float)),
        ("expected_rollout_s", (int, float)),
        ("step_metrics", (list,)),
        ("done_trajectories", (list,)),
    ):
        if key not in doc:
            raise InputError(source, "missing entry", field=key)
        value = doc[key]
        if isinstance(value, bool) or not isinstance(value, kinds):
            what = {int: "an integer", float: "a number", list: "a list"}[kinds[-1]]
            raise InputError(source, f"must be {what}, got {value!r:.60}", field=key)
        if isinstance(value, int) and value < 0:
            raise InputError(source, f"must be >= 0, got {value}", field=key)
    for key in ("step_metrics", "done_trajectories"):
        for i, row in enumerate(doc[key]):
            if not isinstance(row, dict):
                raise InputError(source, "expected a JSON object", location=f"{key}[{i}]")
    _check_trajectories(doc["done_trajectories"], source)


def _check_trajectories(rows: list[dict[str, Any]], source: str) -> None:
    """Each finished trajectory has the fields of a `RuntimeTrajectory`, no others."""
    from dataclasses import MISSING, fields

    from pearl.runtime.trajectory import RuntimeTrajectory

    every = fields(RuntimeTrajectory)
    known = {f.name for f in every}
    required = {f.name for f in every if f.default is MISSING and f.default_factory is MISSING}
    for i, row in enumerate(rows):
        where = f"done_trajectories[{i}]"
        missing, unknown = sorted(required - row.keys()), sorted(row.keys() - known)
        if missing:
            raise InputError(source, "missing entry", location=where, field=missing[0])
        if unknown:
            raise InputError(source, "not a trajectory field", location=where, field=unknown[0])
        if not isinstance(row["traj_id"], str):
            raise InputError(source, "must be a string", location=where, field="traj_id")


def prune_trainer_files(directory: Path, version: int) -> None:
    """Remove the trainer checkpoint files of versions older than `version` (a newer one
    may already be written, for a checkpoint not yet committed)."""
    old = [directory / LEGACY_TRAINER_FILE]
    for path in directory.glob("trainer-*.pt"):
        v = path.name[len("trainer-") : -len(".pt")]
        if v.isdigit() and int(v) < version:
            old.append(path)
    for path in old:
        if path.is_file():
            path.unlink()
