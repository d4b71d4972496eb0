"""The runtime's token-level trajectory record."""

from pearl.runtime.trajectory import RuntimeTrajectory


def test_interrupted_prefix_is_kept_and_continued():
    """An interrupted turn's tokens stay; the resumed turn continues them (paper §4.5)."""
    t = RuntimeTrajectory("s0-g0-0", 0, 0, 7)
    t.add_context([1, 2, 3])
    t.keep_partial((10, 11), (-0.5, -0.6), version=0)
    assert t.prompt() == [1, 2, 3, 10, 11]
    ids = t.finish_turn((12,), (-0.7,), version=1)
    assert ids == [10, 11, 12]
    assert t.response_mask == [0, 0, 0, 1, 1, 1]
    assert t.logprobs[3:] == [-0.5, -0.6, -0.7]
    assert t.versions[3:] == [0, 0, 1] and t.min_version == 0
    assert t.partial_ids == [] and t.num_turns == 1 and t.num_interrupts == 1


def test_sample_and_json_round_trip():
    t = RuntimeTrajectory("s1-g2-3", 1, 2, 9, reward=0.5)
    t.add_context([5])
    t.finish_turn((6, 7), (-0.1, -0.2), version=1)
    s = t.to_sample()
    assert s.token_ids == (5, 6, 7) and s.response_mask == (0, 1, 1) and s.group_id == 2
    assert RuntimeTrajectory.from_json(t.to_json()) == t
