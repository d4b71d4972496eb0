"""Reading a telemetry file at the CLI's edge: one-line errors naming the file, the line
and the field (`pearl profile fit`, `pearl profile workload`)."""

from __future__ import annotations

from pathlib import Path

from pearl.control.telemetry import TelemetryError
from pearl.control.telemetry_jsonl import Telemetry, read_jsonl
from pearl.errors import InputError


def read_telemetry(path: Path, what: str) -> Telemetry:
    """A telemetry file with at least one turn record, to fit `what` from; a bad file is
    an `InputError` naming the file, the line and the field."""
    try:
        tel = read_jsonl(path)
    except TelemetryError as err:
        raise InputError(err.source, err.message, location=err.location, field=err.field) from None
    if not tel.turns:
        raise InputError(str(path), f"no turn records (kind: turn) to fit {what} from")
    return tel
