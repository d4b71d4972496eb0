"""The telemetry file format: records as JSON lines, with an optional `"kind": "meta"`
header naming the model and GPU (`model`, `gpu`, `gpus_per_worker`) so a fitter can pick
the hardware prior. The records and their schema: `pearl.control.telemetry`;
field-by-field documentation: docs/telemetry.md.

Errors are `TelemetryError` with the file (`source`), the line (`location`) and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from pearl.control.telemetry import Record, TelemetryError, TurnRecord, WorkerStepRecord


@dataclass(frozen=True, slots=True)
class TelemetryMeta:
    """Optional header naming the hardware the telemetry was measured on."""

    model: str | None = None
    gpu: str | None = None
    gpus_per_worker: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"kind": "meta", **asdict(self)}


@dataclass(frozen=True, slots=True)
class Telemetry:
    """Everything read from one telemetry file."""

    turns: tuple[TurnRecord, ...]
    worker_steps: tuple[WorkerStepRecord, ...]
    meta: TelemetryMeta = TelemetryMeta()

    def steps(self) -> list[int]:
        """Rollout steps present, ascending."""
        return sorted({t.step for t in self.turns} | {w.step for w in self.worker_steps})

    def by_step(self) -> Iterator[tuple[int, tuple[TurnRecord, ...], tuple[WorkerStepRecord, ...]]]:
        for s in self.steps():
            yield (
                s,
                tuple(t for t in self.turns if t.step == s),
                tuple(w for w in self.worker_steps if w.step == s),
            )


def parse_jsonl(lines: Iterable[str], source: str = "<telemetry>") -> Telemetry:
    """Parse JSONL telemetry; blank lines and lines starting with '#' are skipped."""
    turns: list[TurnRecord] = []
    steps: list[WorkerStepRecord] = []
    meta = TelemetryMeta()
    for lineno, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        loc = f"line {lineno}"
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise TelemetryError(source, f"not valid JSON: {err.msg}", location=loc) from None
        if not isinstance(doc, dict):
            raise TelemetryError(source, "expected a JSON object", location=loc)
        kind = doc.get("kind")
        if kind == "turn":
            turns.append(TurnRecord.from_json(doc, source, loc))
        elif kind == "worker_step":
            steps.append(WorkerStepRecord.from_json(doc, source, loc))
        elif kind == "meta":
            gpw = doc.get("gpus_per_worker", 1)
            if isinstance(gpw, bool) or not isinstance(gpw, int) or gpw < 1:
                raise TelemetryError(
                    source, "must be an integer >= 1", location=loc, field="gpus_per_worker"
                )
            meta = TelemetryMeta(doc.get("model"), doc.get("gpu"), gpw)
        else:
            raise TelemetryError(
                source,
                f"unknown kind {kind!r} (use turn, worker_step, meta)",
                location=loc,
                field="kind",
            )
    return Telemetry(tuple(turns), tuple(steps), meta)


def read_jsonl(path: str | Path) -> Telemetry:
    """Read a telemetry file. Errors name the file, the line and the field."""
    p = Path(path)
    try:
        with p.open() as fh:
            return parse_jsonl(fh, str(p))
    except FileNotFoundError:
        raise TelemetryError(str(p), "file not found") from None
    except OSError as err:
        raise TelemetryError(str(p), f"cannot read: {err.strerror}") from None


def write_jsonl(
    out: TextIO,
    records: Iterable[Record],
    meta: TelemetryMeta | None = None,
) -> int:
    """Write records (and an optional meta header) one per line; returns lines written."""
    n = 0
    if meta is not None:
        out.write(json.dumps(meta.to_json(), separators=(",", ":")) + "\n")
        n += 1
    for rec in records:
        out.write(json.dumps(rec.to_json(), separators=(",", ":")) + "\n")
        n += 1
    return n
