"""Reading a telemetry file at the CLI's edge: one-line errors naming the file, the line
and the field (`pearl profile fit`, `pearl profile workload`). Either command takes the
file, or a run directory holding one (`pearl run`'s, or one policy's of `pearl simulate
--out`)."""

from __future__ import annotations

from pathlib import Path

from pearl.control.telemetry import TelemetryError
from pearl.control.telemetry_jsonl import Telemetry, read_jsonl
from pearl.errors import InputError
from pearl.report.rundir import TELEMETRY_FILE


def telemetry_path(source: Path) -> Path:
    """`source` itself, or a run directory's telemetry.jsonl; a directory without one is an
    `InputError` that names the runs inside it (`pearl simulate --out`'s top directory)."""
    if not source.is_dir():
        return source
    path = source / TELEMETRY_FILE
    if not path.is_file():
        inside = sorted(p.parent.name for p in source.glob(f"*/{TELEMETRY_FILE}"))
        hint = f" (give one of its runs: {', '.join(inside)})" if inside else ""
        raise InputError(str(source), f"no {TELEMETRY_FILE} in this directory{hint}")
    return path


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
