"""The controller's notes and how a run event finds the decision behind it."""

from __future__ import annotations

from pearl.control.notes import (
    RETURN_VERBS,
    ControlNote,
    change_reason,
    last_decision,
)


def _d(t: float, text: str) -> ControlNote:
    return ControlNote(t, "decision", text)


NOTES = [
    _d(1.0, "initial: -> colocated:2 (2 ops)"),
    _d(5.0, "borrow ['t0']: -> colocated:3 (rollout saving 9.0 s > activation + return 4.0 s)"),
    ControlNote(6.0, "ignored", "return of GPUs not held"),
    _d(9.0, "reclaim ['p0'] (deadline 12.0s)"),
    _d(9.0, "decline expansion to colocated:4: no feasible config without them"),
]


def test_a_note_reads_as_its_time_and_text_and_writes_as_one_line() -> None:
    n = NOTES[0]
    assert str(n) == "t=1.000: initial: -> colocated:2 (2 ops)"
    assert n.to_json() == {"t_s": 1.0, "kind": "decision", "text": n.text}


def test_last_decision_matches_the_leading_verb_only() -> None:
    """A borrow whose reason mentions a return is not the return's reason."""
    assert last_decision(NOTES, RETURN_VERBS) is None
    assert last_decision(NOTES, ("borrow",)) == NOTES[1]
    assert last_decision(NOTES, ("borrow",), until_s=4.0) is None
    assert last_decision(NOTES, ("ignored", "return of")) is None  # decisions only


def test_change_reason_prefers_the_decisions_of_that_instant() -> None:
    # at 9.0 neither decision names a target: the last of them
    assert change_reason(NOTES, 9.0) == NOTES[4]
    # a switch at that instant wins over another decision then
    switch = _d(9.0, "shrink: -> colocated:1 (1 ops)")
    assert change_reason([*NOTES, switch], 9.0) == switch
    # none then: the last decision before that named a target
    assert change_reason(NOTES, 7.0) == NOTES[1]
    assert change_reason(NOTES, 0.5) is None
    # a written note's time is rounded to the ms
    assert change_reason(NOTES, 9.0004) == NOTES[4]
