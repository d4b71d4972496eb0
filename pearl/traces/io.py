"""Trace files: our own JSON format and the real traces' event CSV.

Every bad file raises `pearl.errors.InputError` naming the file, the line (CSV, or JSON
syntax) or JSON path (JSON structure), and the field. The formats are documented in
docs/traces.md.

Our format (`pearl-trace/1`)::

    {"format": "pearl-trace/1", "name": "seg1", "duration_s": 7200,
     "reclaim_notice_s": 120, "source": "free text",
     "changes": [{"time_s": 0, "num_gpus": 10}, {"time_s": 600, "num_gpus": 8}]}

or with explicit GPU ids: `{"time_s": 0, "add": ["a", "b"]}`, `{"time_s": 60, "remove":
["a"]}`.

Event CSV (Parcae, SpotServe): no header, one row per event `time_ms,add|remove,nodeID`,
in time order; blank lines and lines starting with `#` are skipped. It loads as a count
trace of alive nodes (one GPU per node until scaled) whose duration is the last event's
time; a node removed may be added again later.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pearl.errors import InputError, read_json, read_text
from pearl.traces.availability import AvailabilityTrace, Change, TraceError

FORMAT = "pearl-trace/1"
# AWS spot instances get a two-minute interruption notice; both real traces are AWS.
CSV_RECLAIM_NOTICE_S = 120.0


def read_trace_file(path: Path) -> AvailabilityTrace:
    """Load a `.json` trace (our format) or a `.csv` event trace (any other suffix: CSV)."""
    if path.suffix.lower() == ".json":
        return load_json_trace(path)
    return load_event_csv(path)


def load_json_trace(path: Path) -> AvailabilityTrace:
    doc = read_json(path)
    try:
        return trace_from_json(doc)
    except TraceError as err:
        raise InputError(
            str(path), err.message, location=err.path or None, field=err.field
        ) from None


def save_json_trace(trace: AvailabilityTrace, path: Path) -> None:
    """Write our format, one change per line so diffs stay readable."""
    doc = trace.to_json()
    changes = doc.pop("changes")
    head = json.dumps(doc, indent=2)[:-2]
    rows = ",\n".join("    " + json.dumps(c) for c in changes)
    path.write_text(f'{head},\n  "changes": [\n{rows}\n  ]\n}}\n')


def trace_from_json(doc: Any) -> AvailabilityTrace:
    """Validate a parsed document of our format; raises `TraceError` with a JSON path."""
    if not isinstance(doc, dict):
        raise TraceError("the document must be a JSON object", "", None)
    known = {"format", "name", "duration_s", "reclaim_notice_s", "source", "changes"}
    for key in doc:
        if key not in known:
            raise TraceError(f"unknown field (expected one of {sorted(known)})", key, key)
    fmt = doc.get("format", FORMAT)
    if fmt != FORMAT:
        raise TraceError(f"unsupported format '{fmt}' (expected '{FORMAT}')", "format", "format")
    name = _get(doc, "name", str, "")
    duration_s = _number(doc, "duration_s", "", required=True)
    notice_s = _number(doc, "reclaim_notice_s", "", required=False)
    source = _get(doc, "source", str, "", required=False)
    raw = _get(doc, "changes", list, "")
    changes = tuple(_change(c, f"changes[{i}]") for i, c in enumerate(raw))
    return AvailabilityTrace(
        name, duration_s, 0.0 if notice_s is None else notice_s, changes, source
    )


def _change(doc: Any, where: str) -> Change:
    if not isinstance(doc, dict):
        raise TraceError("a change must be a JSON object", where, None)
    for key in doc:
        if key not in {"time_s", "num_gpus", "add", "remove"}:
            raise TraceError(
                "unknown field (expected time_s, num_gpus, add, remove)", f"{where}.{key}", key
            )
    time_s = _number(doc, "time_s", where, required=True)
    if "num_gpus" in doc:
        n = doc["num_gpus"]
        if isinstance(n, bool) or not isinstance(n, int):
            raise TraceError(
                f"must be an integer, got {json.dumps(n)}", f"{where}.num_gpus", "num_gpus"
            )
        return Change(
            time_s, num_gpus=n, added=_ids(doc, "add", where), removed=_ids(doc, "remove", where)
        )
    return Change(time_s, added=_ids(doc, "add", where), removed=_ids(doc, "remove", where))


def _ids(doc: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    ids = doc.get(key, [])
    if not isinstance(ids, list) or not all(isinstance(g, str) for g in ids):
        raise TraceError("must be a list of GPU id strings", f"{where}.{key}", key)
    return tuple(ids)


def _get(doc: dict[str, Any], key: str, kind: type, where: str, *, required: bool = True) -> Any:
    path = f"{where}.{key}" if where else key
    if key not in doc:
        if required:
            raise TraceError("missing", path, key)
        return kind()
    if not isinstance(doc[key], kind):
        raise TraceError(f"must be a {kind.__name__}", path, key)
    return doc[key]


def _number(doc: dict[str, Any], key: str, where: str, *, required: bool) -> Any:
    path = f"{where}.{key}" if where else key
    if key not in doc:
        if required:
            raise TraceError("missing", path, key)
        return None
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise TraceError(f"must be a finite number, got {json.dumps(v)}", path, key)
    return float(v)


def load_event_csv(
    path: Path, *, reclaim_notice_s: float = CSV_RECLAIM_NOTICE_S
) -> AvailabilityTrace:
    """A count trace of alive nodes from `time_ms,add|remove,nodeID` rows (see module doc)."""
    src = str(path)
    alive: set[str] = set()
    points: list[tuple[float, int]] = []
    last_ms = 0.0
    for lineno, line in enumerate(read_text(path).splitlines(), 1):
        row = line.strip()
        if not row or row.startswith("#"):
            continue
        loc = f"line {lineno}"
        fields = [f.strip() for f in row.split(",")]
        if len(fields) != 3:
            raise InputError(
                src,
                f"expected 3 fields time_ms,op,node_id, got {len(fields)}: '{row}'",
                location=loc,
                field="row",
            )
        raw_t, op, node = fields
        try:
            t_ms = float(raw_t)
        except ValueError:
            raise InputError(
                src, f"not a number: '{raw_t}'", location=loc, field="time_ms"
            ) from None
        if not math.isfinite(t_ms) or t_ms < 0:
            raise InputError(
                src, f"must be a finite time >= 0, got '{raw_t}'", location=loc, field="time_ms"
            )
        if t_ms < last_ms:
            raise InputError(
                src,
                f"time goes backwards ({raw_t} < {last_ms:g} on an earlier line)",
                location=loc,
                field="time_ms",
            )
        if not node:
            raise InputError(src, "empty node id", location=loc, field="node_id")
        if op == "add":
            if node in alive:
                raise InputError(
                    src, f"adds node '{node}' that is already there", location=loc, field="node_id"
                )
            alive.add(node)
        elif op == "remove":
            if node not in alive:
                raise InputError(
                    src,
                    f"removes node '{node}' that is not there (count would go negative or wrong)",
                    location=loc,
                    field="node_id",
                )
            alive.remove(node)
        else:
            raise InputError(
                src, f"unknown op '{op}' (expected add or remove)", location=loc, field="op"
            )
        last_ms = t_ms
        points.append((t_ms / 1000.0, len(alive)))
    if not points:
        raise InputError(src, "no events in the file", field="row")
    duration_s = points[-1][0]
    if duration_s <= 0:
        raise InputError(src, "all events are at time 0: the trace spans no time", field="time_ms")
    return AvailabilityTrace.from_counts(
        path.stem, duration_s, points, reclaim_notice_s=reclaim_notice_s, source=path.name
    )
