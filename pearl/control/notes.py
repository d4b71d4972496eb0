"""The controller's own log: each decision it took and each event it ignored.

One `ControlNote` per line, kept in the order they happened. Both worlds write them to the
run directory's `decisions.jsonl` with `to_json()` (`pearl.report.rundir`), so a note reads
the same whether `pearl run` or `pearl simulate` produced it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

NoteKind = Literal["decision", "ignored"]


@dataclass(frozen=True, slots=True)
class ControlNote:
    """At controller time `t_s`, a decision taken or an event ignored (`kind`), said in
    `text` (e.g. "expand: -> colocated:6 (gain 41.2s > cost 12.0s)")."""

    t_s: float
    kind: NoteKind
    text: str

    def __str__(self) -> str:
        return f"t={self.t_s:.3f}: {self.text}"

    def to_json(self) -> dict[str, Any]:
        return {"t_s": round(self.t_s, 3), "kind": self.kind, "text": self.text}


# The verbs a decision's text starts with, by the run event it leads to (`last_decision`).
BORROW_VERBS = ("borrow",)
RETURN_VERBS = ("return", "budget spent")  # the latter: RLBoost+'s early return
RECLAIM_VERBS = ("reclaim", "GPUs gone")


def last_decision(
    notes: Sequence[ControlNote], verbs: tuple[str, ...] | None, until_s: float = math.inf
) -> ControlNote | None:
    """The last decision at or before `until_s` whose text starts with one of `verbs` (any
    decision for None): the reason a run event gives for itself. (Its start, not anywhere in
    it: a borrow's reason says "activation + return 9.8 s".)"""
    for n in reversed(notes):
        if n.kind != "decision" or n.t_s > until_s:
            continue
        if verbs is None or n.text.startswith(verbs):
            return n
    return None


def change_reason(
    notes: Sequence[ControlNote], t_s: float, tolerance_s: float = 1e-3
) -> ControlNote | None:
    """The decision behind a change of the cluster seen at `t_s` (a PD reconfiguration):
    of the decisions taken then, the last that named a target config ("... -> config"),
    else the last of them (e.g. a reclaim's); with none taken then, the last one before
    that named a target. `tolerance_s`: a written note's time is rounded to the ms. `notes`
    are in time order, as the controller keeps them."""
    then: list[ControlNote] = []  # the decisions at t_s, latest first
    for n in reversed(notes):  # in time order: stop at the first one before t_s
        if n.kind != "decision" or n.t_s > t_s + tolerance_s:
            continue
        if n.t_s >= t_s - tolerance_s:
            then.append(n)
        elif then:
            break
        elif "->" in n.text:
            return n
    if then:
        return next((n for n in then if "->" in n.text), then[0])
    return None
