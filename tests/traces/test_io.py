"""Trace files: our JSON format round-trips; the event CSV loads; bad files name file/line/field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pearl.errors import InputError
from pearl.traces import (
    AvailabilityTrace,
    Change,
    load_event_csv,
    load_json_trace,
    poisson_churn,
    save_json_trace,
)

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data" / "traces"


def _alive_after_each_time(rows: list[str]) -> dict[float, int]:
    """Independent reading of `time_ms,op,node` rows: alive count after each distinct time."""
    alive: set[str] = set()
    out: dict[float, int] = {}
    for row in rows:
        t, op, node = row.split(",")
        (alive.add if op == "add" else alive.remove)(node)
        out[int(t) / 1000] = len(alive)
    return out


def test_json_round_trip_counts_and_ids(tmp_path: Path) -> None:
    """save then load gives an equal trace, for count and id traces."""
    counts = poisson_churn(3600, seed=3, mean_interval_s=200, reclaim_notice_s=30, name="c")
    ids = AvailabilityTrace(
        "i", 10.0, 5.0, (Change(0.0, added=("a", "b")), Change(4.0, removed=("a",)))
    )
    for tr in (counts, ids):
        path = tmp_path / f"{tr.name}.json"
        save_json_trace(tr, path)
        assert load_json_trace(path) == tr


def test_event_csv_counts_alive_nodes() -> None:
    """The small Parcae excerpt loads as alive-node counts, duration = last event."""
    path = DATA / "p3trace_head.csv"
    rows = [r for r in path.read_text().splitlines() if r]
    tr = load_event_csv(path)
    expected = _alive_after_each_time(rows)
    assert tr.duration_s == max(expected)
    for t, n in expected.items():
        assert tr.count_at(t) == n
    assert tr.reclaim_notice_s == 120.0


def test_real_parcae_file_if_present() -> None:
    """The full real file loads; peak and mean match the shared README's description."""
    path = SHARED / "parcae-p3" / "p3trace.csv"
    if not path.exists():
        pytest.skip("shared real traces not present")
    rows = [r for r in path.read_text().splitlines() if r]
    tr = load_event_csv(path)
    s = tr.stats()
    assert s.max_gpus == max(_alive_after_each_time(rows).values()) == 32
    assert 23.5 < s.mean_gpus < 24.5 and s.duration_s / 3600 == pytest.approx(11.4, abs=0.05)


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("0,add,a\n1000,add\n", 2, "row"),
        ("0,add,a\nsoon,add,b\n", 2, "time_ms"),
        ("0,add,a\n-5,add,b\n", 2, "time_ms"),
        ("0,add,a\n2000,add,b\n1000,remove,a\n", 3, "time_ms"),
        ("0,add,a\n1000,evict,a\n", 2, "op"),
        ("0,add,a\n1000,remove,b\n", 2, "node_id"),
        ("0,add,a\n1000,remove,a\n2000,remove,a\n", 3, "node_id"),
        ("0,add,a\n1000,add,a\n", 2, "node_id"),
        ("# comment\n\n0,add,a\n1000,add,\n", 4, "node_id"),
    ],
)
def test_bad_csv_names_file_line_field(tmp_path: Path, text: str, line: int, field: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_event_csv(path)
    err = info.value
    assert (err.source, err.location, err.field) == (str(path), f"line {line}", field)
    assert "\n" not in str(err)


def test_empty_or_instant_csv(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    path.write_text("# nothing\n")
    with pytest.raises(InputError, match="no events"):
        load_event_csv(path)
    path.write_text("0,add,a\n0,add,b\n")
    with pytest.raises(InputError, match="spans no time"):
        load_event_csv(path)


GOOD = {"name": "x", "duration_s": 100, "changes": [{"time_s": 0, "num_gpus": 2}]}


def _with(**changes: object) -> dict[str, object]:
    return {**GOOD, **changes}


@pytest.mark.parametrize(
    ("doc", "location", "field"),
    [
        (
            _with(changes=[{"time_s": 0, "num_gpus": 2}, {"time_s": 5, "num_gpus": -1}]),
            "changes[1].num_gpus",
            "num_gpus",
        ),
        (
            _with(changes=[{"time_s": 9, "num_gpus": 2}, {"time_s": 5, "num_gpus": 1}]),
            "changes[1].time_s",
            "time_s",
        ),
        (_with(changes=[{"num_gpus": 2}]), "changes[0].time_s", "time_s"),
        (_with(changes=[{"time_s": 0, "num_gpus": 2.5}]), "changes[0].num_gpus", "num_gpus"),
        (_with(changes=[{"time_s": 0, "gpus": 2}]), "changes[0].gpus", "gpus"),
        (_with(changes=[{"time_s": 1, "remove": ["g"]}]), "changes[0].remove", "remove"),
        (_with(duration_s="long"), "duration_s", "duration_s"),
        ({"name": "x", "changes": []}, "duration_s", "duration_s"),
        (_with(format="other/2"), "format", "format"),
    ],
)
def test_bad_json_names_path_and_field(
    tmp_path: Path, doc: dict[str, object], location: str, field: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as info:
        load_json_trace(path)
    err = info.value
    assert (err.source, err.location, err.field) == (str(path), location, field)


def test_json_syntax_error_names_line(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{\n  "name": "x",\n  oops\n}\n')
    with pytest.raises(InputError) as info:
        load_json_trace(path)
    assert info.value.location == "line 3"
