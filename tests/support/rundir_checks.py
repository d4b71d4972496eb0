"""Checks both worlds' run directories must pass (one format, `pearl.report.rundir`)."""

from __future__ import annotations

from typing import Any

NOTE_KEYS = {"t_s", "kind", "text"}


def assert_decision_lines(docs: list[dict[str, Any]]) -> None:
    """decisions.jsonl: notes {"t_s", "kind": "decision"|"ignored", "text"} and commands
    {"t_s", "kind": "command", "command": name, ...fields}, never a Route, in time order."""
    assert docs, "decisions.jsonl is empty"
    for d in docs:
        assert d["kind"] in ("decision", "ignored", "command"), d
        if d["kind"] == "command":
            assert isinstance(d["command"], str) and d["command"] != "Route", d
        else:
            assert set(d) == NOTE_KEYS and isinstance(d["text"], str), d
            assert not d["text"].startswith("t="), d  # the time is t_s, once
    times = [d["t_s"] for d in docs]
    assert times == sorted(times)
    assert any(d["kind"] == "decision" for d in docs)
    assert any(d["kind"] == "command" and d["command"] == "InitWorker" for d in docs)


# events.jsonl: the detail fields each kind carries in both worlds
EVENT_FIELDS = {
    "borrow": {"gpus"},
    "return": {"gpus"},
    "preemption": {"gpus"},
    "expansion": {"workers", "group_id"},
    "interrupt": {"traj_id", "worker", "kept_tokens"},
    "resume": {"traj_id", "worker", "context_tokens"},
    "pd_reconfig": {"before", "after"},
}


def assert_event_lines(docs: list[dict[str, Any]]) -> None:
    """events.jsonl: {"t_s", "kind", "reason", ...detail}; the kinds both worlds write carry
    the same detail fields, and a borrow, return or reclaim gives the controller's decision
    that made it ("t=...: text") as its reason when there was one."""
    for d in docs:
        assert isinstance(d["t_s"], float | int) and isinstance(d["reason"], str), d
        assert d["reason"], d
        fields = EVENT_FIELDS.get(d["kind"])
        if fields is not None:
            assert fields <= set(d), d
        if d["kind"] == "expansion":  # preemptible GPUs admitted, not any group
            assert d["group_id"].startswith("expand-"), d
        if d["kind"] in ("borrow", "preemption") and d["reason"].startswith("t="):
            text = d["reason"].split(": ", 1)[1]
            assert text.startswith(("borrow", "reclaim", "GPUs gone")), d
