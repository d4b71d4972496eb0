"""What a real run records as it goes, beside the driver that runs it (`pearl.report.rundir`).

`RunLog` owns what it has written so far: the controller's notes already in
decisions.jsonl, the last cluster state in states.jsonl, and the recent run events the live
view shows. The driver calls it around each event (`after_event`) and before each command
the world executes (`before_command`); the world and the driver's components report their
own events through `record` and `note`. Its rules are the ones the simulator's run
directory follows too (docs/architecture.md, "The seam"): a command's line after the notes
that led to it, a PD reconfiguration by `plan.pd_reconfiguration` with the decision taken at
that instant as its reason, an expansion only for a group of preemptible GPUs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pearl.control import commands as cmd
from pearl.control.notes import change_reason, last_decision
from pearl.control.plan import pd_reconfiguration
from pearl.control.state import ClusterState

if TYPE_CHECKING:
    from pearl.control.controller import Controller
    from pearl.report.rundir import RunRecorder

log = logging.getLogger("pearl.runtime.driver")  # where runtime errors were logged before

# Events the world reports (`RayWorld(on_record=...)`) that go to events.jsonl.
WORLD_EVENTS = ("interrupt", "resume", "park", "activation", "warm_up", "init_abandoned")


class RunLog:
    """The run directory's lines as the run goes. `attach` the controller once it is built
    and `start` when the run's clock starts; before that only `record` and `note` may be
    called."""

    def __init__(self, recorder: RunRecorder, now: Callable[[], float]) -> None:
        self.recorder = recorder
        self.now = now
        self.recent: list[str] = []  # "  12.3s kind: reason", the live view's last lines
        self.controller: Controller | None = None
        self._num_notes = 0  # the controller's notes already in decisions.jsonl
        self._last_state: ClusterState | None = None

    # -- events from the world and the driver's components ------------------------------
    def record(self, kind: str, payload: Any) -> None:
        """A world's report (`on_record`): the run events it names, and its errors."""
        if kind in WORLD_EVENTS:
            detail = payload if isinstance(payload, dict) else {}
            reason = payload.get("reason", kind) if isinstance(payload, dict) else str(payload)
            self.recorder.record_event(self.now(), kind, reason, **detail)
        elif kind == "error":
            log.warning("runtime error: %s", payload)
            self.recorder.record_event(self.now(), "error", str(payload))

    def note(self, kind: str, reason: str, **detail: Any) -> None:
        """A run event of the driver's side (trace, lending, expansion, PD switch)."""
        self.recorder.record_event(self.now(), kind, reason, **detail)
        self.recent.append(f"{self.now():6.1f}s {kind}: {reason}")

    # -- the controller's side ------------------------------------------------------------
    def attach(self, controller: Controller) -> None:
        self.controller = controller

    def start(self) -> None:
        """The run's clock has started: the cluster state it starts from."""
        state = self._controller().state
        self._last_state = state
        self.recorder.record_state(self.now(), state)

    def last_decision(self, verbs: tuple[str, ...] | None) -> str:
        """The last decision starting with one of `verbs` (any for None), as "t=...: text"
        ("" if none)."""
        n = last_decision(self._controller().notes, verbs)
        return "" if n is None else str(n)

    def before_command(self, c: cmd.Command) -> None:
        """Just before the world executes `c`: the notes that led to it, then its line
        (but a Route's), on the controller's clock as the notes are."""
        ctl = self._controller()
        self._record_notes()
        if not isinstance(c, cmd.Route):
            self.recorder.record_command(ctl.now_s, c)
        if isinstance(c, cmd.AdmitGroup) and c.is_expansion:
            self.note(
                "expansion",
                self.last_decision((f"admit {c.group_id} ",)) or f"group {c.group_id} admitted",
                workers=list(c.worker_ids),
                group_id=c.group_id,
            )

    def after_event(self, before: ClusterState, after: ClusterState) -> None:
        """What one event changed: the controller's notes, the state, a PD switch."""
        ctl = self._controller()
        self._record_notes()
        if after != self._last_state:
            self.recorder.record_state(self.now(), after)
            self._last_state = after
        change = pd_reconfiguration(before, after)
        if change is None:
            return
        c0, c1 = change
        engine_log = getattr(ctl.advisor, "log", ())
        decided = [x for x in reversed(engine_log) if x.startswith("decide")]
        last = next((x for x in decided if f": {c1} (" in x), decided[0] if decided else None)
        why = f"; decision engine: {last}" if last else ""
        reason = change_reason(ctl.notes, ctl.now_s)
        self.note(
            "pd_reconfig",
            f"{c0} -> {c1}: {reason or ''}{why}",
            before=str(c0),
            after=str(c1),
        )

    def _record_notes(self) -> None:
        notes = self._controller().notes
        for n in notes[self._num_notes :]:
            self.recorder.record_note(n)
        self._num_notes = len(notes)

    def _controller(self) -> Controller:
        if self.controller is None:
            raise RuntimeError("RunLog: no controller attached yet")
        return self.controller
