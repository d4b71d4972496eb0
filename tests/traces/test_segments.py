"""The bundled segments: two hours each, 0-12 GPUs, and they differ from each other."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from pearl.traces import bundled_names, load_bundled, load_trace
from pearl.traces.derive import SEGMENTS, derive

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces"


def test_three_two_hour_segments_within_the_pool() -> None:
    assert bundled_names() == ("seg1", "seg2", "seg3")
    for name in bundled_names():
        tr = load_trace(name)
        s = tr.stats()
        assert tr.name == name and s.duration_s == 7200
        assert 0 <= s.min_gpus <= s.max_gpus <= 12
        assert tr.reclaim_notice_s > 0 and "licence" in tr.source


def test_segments_differ_as_described() -> None:
    """seg1 abundant with few changes, seg2 scarce, seg3 in between with the most changes."""
    s1, s2, s3 = (load_bundled(n).stats() for n in ("seg1", "seg2", "seg3"))
    assert s1.mean_gpus > s3.mean_gpus > s2.mean_gpus
    for s, target in ((s1, 10), (s2, 6), (s3, 8)):
        assert abs(s.mean_gpus - target) <= 0.5
    assert s1.num_changes < s2.num_changes < s3.num_changes
    assert s3.num_changes >= 2 * s1.num_changes


def test_licences_ship_with_the_segments() -> None:
    data = resources.files("pearl.traces").joinpath("data")
    assert "MIT" in data.joinpath("LICENSE.parcae-p3").read_text()
    assert "Apache License" in data.joinpath("LICENSE.spotserve-g4dn").read_text()


@pytest.mark.parametrize("spec", SEGMENTS, ids=lambda s: s.name)
def test_segments_reproduce_from_the_real_traces(spec) -> None:  # type: ignore[no-untyped-def]
    """Re-deriving from the shared raw CSVs gives exactly the bundled file."""
    if not (SHARED / spec.source.folder / spec.source.file).exists():
        pytest.skip("shared real traces not present")
    assert derive(spec, SHARED) == load_bundled(spec.name)


@pytest.mark.parametrize("name", ["seg1", "seg2", "seg3"])
def test_id_stream_plays_back_to_the_mean(name: str) -> None:
    """The simulator's playback of gpu_events gives mean_gpus * duration_s GPU-seconds."""
    from pearl.sim.playback import live_gpu_seconds, playback_actions

    tr = load_bundled(name)
    acts = playback_actions(
        tr.gpu_events(), reclaim_notice_s=tr.reclaim_notice_s, max_gpus=12, duration_s=7200
    )
    gpu_s = live_gpu_seconds(acts, tr.duration_s)
    assert gpu_s == pytest.approx(tr.stats().mean_gpus * tr.duration_s)
    assert any(a.kind == "notice" for a in acts) and any(a.kind == "gone" for a in acts)
