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
