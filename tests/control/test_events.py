"""Events and commands are frozen, hashable values with `time_s` first on every event."""

from __future__ import annotations

import dataclasses

import pytest

from pearl.control import commands as C
from pearl.control import events as E
from pearl.control.state import Gpu, Role, Zone


def test_every_event_has_time_first_and_is_frozen():
    """Each event type's first field is `time_s`, and instances are immutable."""
    for cls in E.EVENT_TYPES:
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[0] == "time_s", cls
    ev = E.ReclaimNotice(1.0, ("g0",), 31.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.time_s = 2.0  # type: ignore[misc]


def test_events_and_commands_hash_and_compare_by_value():
    """Equal values are equal and hash alike (safe in sets, logs and across processes)."""
    a = E.GpusOffered(0.0, (Gpu("p0", Zone.PREEMPTIBLE),), 600.0)
    b = E.GpusOffered(0.0, (Gpu("p0", Zone.PREEMPTIBLE),), 600.0)
    assert a == b and hash(a) == hash(b)
    r1 = C.Route("t0", "w1", "w2", full_prefill=True)
    assert r1 == C.Route("t0", "w1", "w2", True) and len({r1, C.Route("t0", "w1", "w2", True)}) == 1
    assert C.InitWorker("w3", ("p0",), Role.DECODE, "g1") != C.InitWorker(
        "w3", ("p0",), Role.PREFILL, "g1"
    )


def test_describe_names_type_and_fields_without_telemetry():
    """`describe` gives one line with the type and scalar fields (telemetry omitted)."""
    text = E.describe(E.RolloutStepFinished(3.0, 7))
    assert text.startswith("RolloutStepFinished(") and "step=7" in text and "turns" not in text
    assert "\n" not in E.describe(E.WorkerInitFailed(1.0, "w4", "oom"))
