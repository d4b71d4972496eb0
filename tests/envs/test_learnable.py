"""The guess game: determinism, shaped-reward invariants, and the oracle/random gap."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.envs import EpisodeOver, play
from pearl.envs.learnable import (
    GuessConfig,
    GuessEnv,
    oracle_policy,
    parse_guess,
    random_byte_policy,
    random_digit_policy,
)

NUM_TASKS = 300


def _mean_return(policy, env=None) -> float:
    env = env or GuessEnv()
    return statistics.mean(play(env, policy, t)[0] for t in range(NUM_TASKS))


def test_secret_depends_on_task_only():
    """Same task, any seed, any instance: same secret; all values occur across tasks."""
    a, b = GuessEnv(), GuessEnv()
    assert [a.secret_of(t) for t in range(50)] == [b.secret_of(t) for t in range(50)]
    assert {a.secret_of(t) for t in range(200)} == set(range(10))
    for seed in (0, 1, 99):
        _, tr1 = play(a, oracle_policy(), 7, seed)
        _, tr2 = play(b, oracle_policy(), 7, 0)
        assert tr1 == tr2


def test_oracle_solves_every_task_fast():
    """Binary search finds the secret in <= 4 turns, so every return is >= 0.7."""
    env = GuessEnv()
    for t in range(NUM_TASKS):
        ret, transcript = play(env, oracle_policy(), t)
        assert ret >= 0.7 - 1e-9
        assert transcript[-1].endswith("correct\n") and len(transcript) <= 1 + 2 * 4


def test_reward_gap_oracle_vs_random():
    """A learner has signal: oracle >> format-only random digits >> untrained random bytes."""
    oracle = _mean_return(oracle_policy())
    digits = _mean_return(random_digit_policy(seed=1))
    noise = _mean_return(random_byte_policy(seed=2))
    assert oracle - noise > 0.45, (oracle, noise)
    assert oracle - digits > 0.15, (oracle, digits)
    assert digits - noise > 0.2, (digits, noise)


@settings(max_examples=150, deadline=None)
@given(
    task=st.integers(0, 999),
    actions=st.lists(st.text(max_size=6), min_size=1, max_size=8),
)
def test_shaped_rewards_invariants(task, actions):
    """Rewards are >= 0, the return stays in [0, 1], and equals the final reported score."""
    env = GuessEnv()
    env.reset(task, 0)
    total = 0.0
    for i, action in enumerate(actions):
        res = env.step(action)
        assert res.reward >= 0.0
        total += res.reward
        assert 0.0 <= total <= 1.0 + 1e-9
        assert res.info["score"] == pytest.approx(total, abs=1e-6)
        assert res.observation.turn == i + 1
        if res.done:
            assert res.info["solved"] == (res.info["feedback"] == "correct")
            with pytest.raises(EpisodeOver):
                env.step("5")
            break
    else:
        assert len(actions) < env.max_turns


def test_feedback_and_invalid_actions():
    """Feedback names the guess and the direction; a response without a digit gets a hint."""
    env = GuessEnv()
    task = next(t for t in range(100) if env.secret_of(t) == 6)
    env.reset(task)
    res = env.step("no digits here")
    assert res.observation.text == "say a digit 0-9\n" and res.reward == 0.0
    assert env.step("<tool>guess 2</tool>").observation.text == "2 higher\n"
    assert env.step("guess 8").observation.text == "8 lower\n"
    res = env.step("xx6")
    assert res.observation.text == "6 correct\n" and res.done
    assert res.reward == pytest.approx(1.0 - 0.1 * 3 - 0.5 * (1 - 2 / 9))


def test_parse_guess_and_config_validation():
    """The first digit counts; digits beyond num_values are invalid; configs check ranges."""
    assert parse_guess("a7b3") == 7 and parse_guess("abc") is None
    assert parse_guess("9", num_values=5) is None
    with pytest.raises(ValueError):
        GuessConfig(num_values=11)
    with pytest.raises(ValueError):
        GuessConfig(closeness_weight=0.9)
    with pytest.raises(RuntimeError):
        GuessEnv().step("1")


def test_transcript_observations_play_the_same_game_with_longer_prompts():
    """The transcript style re-renders the state each turn (~100 bytes) with the same
    rewards, ends and infos as the short style for the same actions."""
    import random as _random

    from pearl.envs.learnable import GuessEnv

    rng = _random.Random(5)
    for task in range(20):
        short, long = GuessEnv(), GuessEnv(observation="transcript")
        o_short, o_long = short.reset(task), long.reset(task)
        assert len(o_short.text) < 20 and 80 <= len(o_long.text) <= 160
        done = False
        while not done:
            action = rng.choice(["guess 3", "x7", "<tool>guess 5</tool>", "no digit", "9"])
            a, b = short.step(action), long.step(action)
            assert (a.reward, a.done, a.info) == (b.reward, b.done, b.info)
            assert a.observation.text.strip() in b.observation.text
            assert 80 <= len(b.observation.text) <= 200
            done = a.done
        assert "over" in b.observation.text


def test_unknown_observation_style_is_refused():
    from pearl.envs.learnable import GuessEnv

    with pytest.raises(ValueError, match="observation must be one of"):
        GuessEnv(observation="verbose")
