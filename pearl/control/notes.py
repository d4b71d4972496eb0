"""The controller's own log: each decision it took and each event it ignored.

One `ControlNote` per line, kept in the order they happened. Both worlds write them to the
run directory's `decisions.jsonl` with `to_json()` (`pearl.report.rundir`), so a note reads
the same whether `pearl run` or `pearl simulate` produced it.
"""

from __future__ import annotations

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
