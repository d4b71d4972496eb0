"""The text protocol: tool-call parsing, result types, registry."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.envs import (
    Environment,
    Observation,
    StepResult,
    env_names,
    format_tool_call,
    make_env,
    parse_tool_call,
    register,
)
from pearl.envs.protocol import check_task_id

word = st.text(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="<>"),
    min_size=1,
    max_size=8,
)


def test_tagged_call_with_args_and_body():
    """Name and args come from the first line, the body from the rest."""
    call = parse_tool_call("thinking... <tool>replace a.py\n<old>x</old>\n<new>y</new></tool> tail")
    assert call is not None
    assert (call.name, call.args, call.body, call.tagged) == (
        "replace",
        ("a.py",),
        "<old>x</old>\n<new>y</new>",
        True,
    )


def test_first_call_wins_and_missing_close_tag():
    """Only the first call counts; an unclosed call runs to the end of the response."""
    assert parse_tool_call("<tool>view a</tool><tool>view b</tool>").args == ("a",)
    assert parse_tool_call("<tool>run_tests").name == "run_tests"


def test_bare_first_line_is_an_action():
    """Without tags, the first non-empty line is read as the call (tiny-model friendly)."""
    call = parse_tool_call("\n\n  Guess 5 \nmore")
    assert call is not None and call.name == "guess" and call.args == ("5",) and not call.tagged


@pytest.mark.parametrize("text", ["", "   \n\t", "<tool></tool>", "<tool>   \nbody</tool>"])
def test_no_action(text):
    """Blank responses and empty calls parse to None (the env answers with a hint)."""
    assert parse_tool_call(text) is None


@given(
    name=word,
    args=st.lists(word, max_size=3),
    body=st.text(max_size=40).filter(lambda b: "</tool>" not in b),
)
def test_format_parse_round_trip(name, args, body):
    """parse(format(call)) gives the call back (names are case-folded)."""
    call = parse_tool_call(format_tool_call(name, *args, body=body))
    assert call is not None
    assert call.name == name.lower() and call.args == tuple(args)
    assert call.body == body


def test_results_are_json():
    """Observations and step results serialise to plain JSON."""
    res = StepResult(Observation("hi\n", turn=2), 0.5, True, {"k": [1, 2]})
    doc = json.loads(json.dumps(res.to_json()))
    assert doc == {
        "observation": {"text": "hi\n", "turn": 2},
        "reward": 0.5,
        "done": True,
        "info": {"k": [1, 2]},
    }


def test_check_task_id():
    """Task ids are ints in range; anything else is a caller error."""
    assert check_task_id(3, 4) == 3
    for bad in (-1, 4):
        with pytest.raises(ValueError):
            check_task_id(bad, 4)
    with pytest.raises(TypeError):
        check_task_id(True, 4)  # type: ignore[arg-type]


def test_registry_builds_environments():
    """Both bundled environments are registered and satisfy the protocol."""
    assert {"guess", "code_repair"} <= set(env_names())
    for name in ("guess", "code_repair"):
        env = make_env(name)
        assert isinstance(env, Environment) and env.name == name and env.num_tasks >= 1
        env.close()
    with pytest.raises(KeyError, match="known: .*guess"):
        make_env("nope")


def test_register_custom_env():
    """A registered factory is used by make_env with its keyword arguments."""
    from pearl.envs.learnable import GuessEnv

    register("guess-small", lambda **kw: GuessEnv(num_values=4, **kw))
    env = make_env("guess-small", max_turns=2)
    assert env.max_turns == 2 and "0-3" in env.reset(0, 0).text
