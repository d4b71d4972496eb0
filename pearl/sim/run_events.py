"""A simulation's events.jsonl, as `pearl run` notes its events (`pearl.report.rundir`).

The simulator has no driver-side notes of its own: its run events are derived when the run
directory is written, from the commands the controller emitted, the state history, the
controller's notes and the world's per-request events, by the rules `pearl run` follows
(docs/architecture.md, "The seam"): an elasticity event gives the decision that made it as
its reason (`pearl.control.notes`), a PD reconfiguration is `plan.pd_reconfiguration` of
two states, an expansion is `AdmitGroup.is_expansion`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pearl.control import commands as cmd
from pearl.control.notes import (
    BORROW_VERBS,
    RECLAIM_VERBS,
    RETURN_VERBS,
    ControlNote,
    change_reason,
    last_decision,
)
from pearl.control.plan import pd_reconfiguration
from pearl.control.state import ClusterState

__all__ = ["run_events"]


def run_events(
    history: list[tuple[float, ClusterState]],
    commands: Iterable[tuple[float, Any]],
    decisions: list[dict[str, Any]],
    request_events: Iterable[tuple[float, str, str, dict[str, Any]]] = (),
) -> list[tuple[float, str, str, dict[str, Any]]]:
    """A simulation's events.jsonl, (t_s, kind, reason, detail) in time order, as `pearl run`
    notes them: borrows, returns, preemptions and expansions from the commands, each with the
    controller's decision that made it as its reason (as `pearl run` does), and the same
    detail fields (`gpus`, `workers`); PD reconfigurations from the state history, by the
    rule both worlds share (`pd_reconfiguration`); interrupts and resumes per request."""
    out: list[tuple[float, str, str, dict[str, Any]]] = list(request_events)
    said = [
        ControlNote(float(d["t_s"]), "decision", d["text"])
        for d in decisions
        if d.get("kind") == "decision"
    ]
    for t, c in commands:
        made = _command_event(c)
        if made is not None:
            kind, verbs, detail = made
            made_by = last_decision(said, verbs, t + _ROUNDING_S)
            out.append((t, kind, type(c).__name__ if made_by is None else str(made_by), detail))
    for (_, s0), (t, s1) in zip(history, history[1:], strict=False):
        change = pd_reconfiguration(s0, s1)
        if change is not None:
            c0, c1 = change
            switch = change_reason(said, t, _ROUNDING_S)
            reason = f"{c0} -> {c1}" + (f": {switch}" if switch else "")
            out.append((t, "pd_reconfig", reason, {"before": str(c0), "after": str(c1)}))
    return sorted(out, key=lambda e: e[0])


_ROUNDING_S = 1e-3  # a decision's t_s is rounded to the millisecond (`ControlNote.to_json`)


def _command_event(c: Any) -> tuple[str, tuple[str, ...], dict[str, Any]] | None:
    """(event kind, verbs of the decision behind it, detail) of an elasticity command."""
    if isinstance(c, cmd.OffloadTraining):
        return "borrow", BORROW_VERBS, {"gpus": list(c.gpu_ids)}
    if isinstance(c, cmd.ReleaseGpus) and c.to == "training":
        return "return", RETURN_VERBS, {"gpus": list(c.gpu_ids)}
    if isinstance(c, cmd.ReleaseGpus):
        return "preemption", RECLAIM_VERBS, {"gpus": list(c.gpu_ids)}
    if isinstance(c, cmd.AdmitGroup) and c.is_expansion:
        detail = {"workers": list(c.worker_ids), "group_id": c.group_id}
        return "expansion", (f"admit {c.group_id} ",), detail
    return None
