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
    for key in (
        "trained_steps",
        "version",
        "time_s",
        "expected_rollout_s",
        "step_metrics",
        "done_trajectories",
    ):
        if key not in doc:
            raise InputError(str(path), "missing entry", field=key)
    name = doc.setdefault("trainer_file", LEGACY_TRAINER_FILE)
    if not isinstance(name, str) or Path(name).name != name or not name:
        raise InputError(str(path), f"not a file name: {name!r}", field="trainer_file")
    if not (directory / name).is_file():
        raise InputError(
            str(directory / name), "the trainer checkpoint driver.json names is missing"
        )
    return doc


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
