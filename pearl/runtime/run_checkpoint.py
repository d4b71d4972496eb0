"""The driver's checkpoint document (`pearl run --resume`): written atomically each step.

It holds the trained step count, weight version, clock, per-step metrics and the finished
trajectories of batches not yet trained; the trainer writes its own weights and optimiser
state beside it (`trainer.pt`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pearl.errors import InputError

DRIVER_FILE = "driver.json"


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
    return doc
