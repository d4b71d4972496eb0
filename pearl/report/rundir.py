"""The run directory, one format for both worlds: everything a run records, one JSON object
per line. `pearl run` appends to it as the run goes; `pearl simulate --out` writes one per
policy when the simulation ends (`pearl.sim.telemetry_out.write_run_dir`).

Layout (all under `out_dir`)::

    config.yaml       the effective run config (rewritten on resume)
    states.jsonl      {"t_s", "state": ClusterState.to_json()} whenever the state changed
    decisions.jsonl   {"t_s", "kind", ...}: the controller's log, in time order. "decision"
                      and "ignored" lines carry its "text" (`ControlNote.to_json`),
                      "command" lines every command but Route ("command": its name, then
                      its fields; `command_doc`)
    events.jsonl      {"t_s", "kind", "reason", ...detail}: preemptions, borrows, PD switches
    telemetry.jsonl   TurnRecord / WorkerStepRecord lines (the shared telemetry schema)
    steps.jsonl       {"step", ...metrics} per training step (the simulator: per rollout step)
    metrics.json      summary + per-step series (written by `finish`)
    report.md, *.png  the report (written by `finish` through pearl.report.run_report)

Contract: every `record_*` call writes whole lines and flushes before it returns, so a crash
loses nothing already recorded. At most the line being written when the process died is
cut short; `open_existing` (resume) drops such a partial last line before appending.
On resume a step may be recorded twice (once before the crash, once after the restart from
the last checkpoint); readers keep the last line of each step (see `pearl.report.run_report`).
All methods are thread-safe.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from pearl.control import commands as cmd
from pearl.control.notes import ControlNote
from pearl.control.state import ClusterState
from pearl.errors import InputError

CONFIG_FILE = "config.yaml"
STATES_FILE = "states.jsonl"
DECISIONS_FILE = "decisions.jsonl"
EVENTS_FILE = "events.jsonl"
TELEMETRY_FILE = "telemetry.jsonl"
STEPS_FILE = "steps.jsonl"
METRICS_FILE = "metrics.json"
PROFILE_FILE = "profile.json"
REPORT_FILE = "report.md"
JSONL_FILES = (STATES_FILE, DECISIONS_FILE, EVENTS_FILE, TELEMETRY_FILE, STEPS_FILE)

# Event kinds the report counts and lists (the recorder accepts any kind).
EVENT_KINDS = (
    "preemption",  # reclaim notice or GPUs gone (paper §4.5)
    "expansion",  # preemptible GPUs admitted (paper §4.5)
    "borrow",  # idle training GPUs borrowed (paper §4.6)
    "return",  # borrowed GPUs handed back (paper §4.6)
    "pd_reconfig",  # PD mode or P:D ratio changed (paper §4.3, §4.4.2)
    "interrupt",  # a request interrupted with its prefix preserved (paper §4.5)
    "resume",  # an interrupted trajectory resumed elsewhere, or the run itself resumed
    "worker_failed",  # a worker failed to start or died
)


def command_doc(t_s: float, c: cmd.Command) -> dict[str, Any]:
    """A decisions.jsonl line for a command the controller emitted at `t_s`."""
    return {"t_s": round(float(t_s), 3), "kind": "command", **cmd.to_doc(c)}


def is_run_dir(path: Path) -> bool:
    """A directory that a previous `pearl run` wrote (it has config.yaml)."""
    return (Path(path) / CONFIG_FILE).is_file()


def check_out_dir(out_dir: Path, *, resume: bool) -> None:
    """Raise `InputError` unless `out_dir` may be used: a new run needs a missing or empty
    directory (or one holding only a config.yaml); a resumed run needs an existing run
    directory."""
    p = Path(out_dir)
    if p.exists() and not p.is_dir():
        raise InputError(str(p), "exists and is not a directory", field="--out")
    if resume:
        if not is_run_dir(p):
            raise InputError(
                str(p), f"not a run directory (no {CONFIG_FILE}) to resume", field="--resume"
            )
        return
    # a run that stopped before writing anything but its config (e.g. no Ray cluster
    # answered) left nothing to lose: a new run may take its directory
    if p.is_dir() and any(x.name != CONFIG_FILE for x in p.iterdir()):
        hint = "use --resume to continue that run" if is_run_dir(p) else "choose an empty one"
        raise InputError(str(p), f"directory is not empty ({hint})", field="--out")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def _clean(value: Any) -> Any:
    """NaN/inf become null so every line is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def dumps_line(doc: dict[str, Any]) -> str:
    """One compact, strict JSON line (no trailing newline)."""
    plain = json.loads(json.dumps(doc, default=_json_default))
    return json.dumps(_clean(plain), separators=(",", ":"), allow_nan=False)


def _drop_partial_last_line(path: Path) -> None:
    """Cut a last line that has no newline (the process died while writing it)."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with path.open("r+b") as fh:
        fh.truncate(cut)


def _last_state_line(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    last = None
    with path.open() as fh:
        for line in fh:
            if line.strip():
                last = line
    if last is None:
        return None
    try:
        doc = json.loads(last)
    except json.JSONDecodeError:
        return None
    return doc.get("state") if isinstance(doc, dict) else None


class RunRecorder:
    """Appends a run's records to its run directory (see the module docstring for files).

    `__init__` creates `out_dir` and writes config.yaml. A non-empty directory is refused
    (`InputError`) unless `resume` is true and it is a run directory; then existing files
    are kept and appended to.
    """

    def __init__(self, out_dir: Path, config_yaml: str, *, resume: bool = False) -> None:
        self.out_dir = Path(out_dir)
        self.resumed = resume
        check_out_dir(self.out_dir, resume=resume)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / CONFIG_FILE).write_text(config_yaml)
        self._lock = threading.Lock()
        self._files: dict[str, TextIO] = {}
        self._last_state: dict[str, Any] | None = None
        self._last_t_s = 0.0
        if resume:
            for name in JSONL_FILES:
                _drop_partial_last_line(self.out_dir / name)
            self._last_state = _last_state_line(self.out_dir / STATES_FILE)
            self._last_t_s = _last_time(self.out_dir)

    @classmethod
    def open_existing(cls, out_dir: Path) -> RunRecorder:
        """Reopen a run directory to append to it (resume), keeping its config.yaml."""
        p = Path(out_dir)
        check_out_dir(p, resume=True)
        return cls(p, (p / CONFIG_FILE).read_text(), resume=True)

    @property
    def last_t_s(self) -> float:
        """The latest `t_s` already recorded when the directory was opened (0 for a new run):
        a resumed driver starts its clock here so the timeline does not go back in time."""
        return self._last_t_s

    # -- recording -------------------------------------------------------------------------
    def _append(self, name: str, doc: dict[str, Any]) -> None:
        line = dumps_line(doc) + "\n"
        with self._lock:
            fh = self._files.get(name)
            if fh is None:
                fh = (self.out_dir / name).open("a", buffering=1)
                self._files[name] = fh
            fh.write(line)
            fh.flush()

    def record_state(self, t_s: float, state: ClusterState) -> bool:
        """Append the state if it differs from the last one recorded; True if written."""
        doc = state.to_json()
        with self._lock:
            if doc == self._last_state:
                return False
            self._last_state = doc
        self._append(STATES_FILE, {"t_s": float(t_s), "state": doc})
        return True

    def record_decision(self, doc: dict[str, Any]) -> None:
        """Append a line of the controller's log, as `ControlNote.to_json()` or
        `command_doc` make it (it carries its own "t_s")."""
        self._append(DECISIONS_FILE, doc)

    def record_note(self, note: ControlNote) -> None:
        self.record_decision(note.to_json())

    def record_command(self, t_s: float, c: cmd.Command) -> None:
        self.record_decision(command_doc(t_s, c))

    def record_event(self, t_s: float, kind: str, reason: str | None, /, **detail: Any) -> None:
        """Append an event; `kind` is one of `EVENT_KINDS` for the report to count it.

        The first three are positional-only so that a `detail` dict that carries its own
        "t_s", "kind" or "reason" key can be passed as `**detail`: the arguments win."""
        doc: dict[str, Any] = {"t_s": float(t_s), "kind": kind, "reason": reason or kind}
        doc.update((k, v) for k, v in detail.items() if k not in doc)
        self._append(EVENTS_FILE, doc)

    def record_telemetry(self, records: Iterable[Any]) -> int:
        """Append telemetry records (objects with `to_json()`, or dicts); returns the count.

        Lines keep the shared telemetry schema, so `pearl profile fit` reads the file."""
        n = 0
        for rec in records:
            doc = rec.to_json() if hasattr(rec, "to_json") else dict(rec)
            if "kind" not in doc:
                doc = {"kind": "turn" if "traj_id" in doc else "worker_step", **doc}
            self._append(TELEMETRY_FILE, doc)
            n += 1
        return n

    def record_step(self, step: int, metrics: dict[str, Any]) -> None:
        """Append one training step's metrics. Keys the report reads (all optional):
        `reward_mean`, `version`, `rollout_makespan_s`, `predicted_makespan_s`,
        `trajectories`, `tokens`, `config` (PD config string), `t_s` (run clock at the
        end of the step), `wall_s` (the step's wall time)."""
        self._append(STEPS_FILE, {"step": int(step), **metrics})

    def write_profile(self, doc: dict[str, Any]) -> None:
        """Replace profile.json with the decision engine's latest workload profile (written
        whole, then renamed, so a reader never sees half a file)."""
        tmp = self.out_dir / (PROFILE_FILE + ".tmp")
        tmp.write_text(json.dumps(_clean(doc), indent=2) + "\n")
        tmp.replace(self.out_dir / PROFILE_FILE)

    # -- the end ---------------------------------------------------------------------------
    def finish(self, summary: dict[str, Any]) -> Path:
        """Write metrics.json (summary, per-step series, event counts) and the report;
        returns the path of report.md. Closes the files (the recorder may not be reused)."""
        # Lazy: the report layer sits above the runtime; it only reads the files written here.
        from pearl.report.run_report import build_report, load_run, run_metrics

        self.close()
        run = load_run(self.out_dir)
        doc = {"summary": summary, **run_metrics(run)}
        (self.out_dir / METRICS_FILE).write_text(
            json.dumps(_clean(json.loads(json.dumps(doc, default=_json_default))), indent=2) + "\n"
        )
        return build_report(self.out_dir)

    def close(self) -> None:
        with self._lock:
            for fh in self._files.values():
                fh.close()
            self._files.clear()

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _last_time(out_dir: Path) -> float:
    """The largest `t_s` in the run's event-like files (states, decisions, events, steps)."""
    latest = 0.0
    for name in (STATES_FILE, DECISIONS_FILE, EVENTS_FILE, STEPS_FILE):
        p = out_dir / name
        if not p.is_file():
            continue
        with p.open() as fh:
            for line in fh:
                try:
                    t = json.loads(line).get("t_s")
                except (json.JSONDecodeError, AttributeError):
                    continue
                if isinstance(t, int | float) and math.isfinite(t):
                    latest = max(latest, float(t))
    return latest
