"""The environment protocol: text in, text out, one action per turn.

An environment is a small stateful object with two verbs (paper §2: multi-turn rollout, each
response plus the environment's observation becomes part of the next prompt):

* ``reset(task_id, seed) -> Observation``: start an episode of task ``task_id``; the same
  ``(task_id, seed)`` always gives the same episode (no hidden randomness, no clock).
* ``step(action_text) -> StepResult``: apply the model's whole response for this turn and
  return the next observation, the reward earned by this step, whether the episode is over,
  and a JSON-serialisable ``info`` dict. Calling ``step`` after ``done`` raises
  ``EpisodeOver``; calling it before ``reset`` raises ``RuntimeError``.

Rewards are per step; an episode's return is their sum. Every environment documents its
return range (both bundled ones return in [0, 1]).

Tool-call format (docs/environments.md has examples). A response holds at most one action;
the first one found counts and any other text (e.g. reasoning) is ignored::

    <tool>NAME ARG1 ARG2 ...
    OPTIONAL BODY LINES</tool>

NAME and the arguments are whitespace-separated on the first line; everything after the
first newline up to ``</tool>`` is the body (for multi-line payloads). A missing ``</tool>``
closes at the end of the response. Tiny models may skip the tags: a response without
``<tool>`` is read as its first non-empty line (``guess 5`` is the same action as
``<tool>guess 5</tool>``). Environments answer malformed actions with an observation that
says what went wrong; they never raise on model output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

TOOL_OPEN = "<tool>"
TOOL_CLOSE = "</tool>"
_TOOL_RE = re.compile(r"<tool>(.*?)(?:</tool>|\Z)", re.DOTALL)


# A policy maps the transcript so far (observation, action, observation, ...; it starts with
# the reset observation) to the next action text. Used by tests, oracles and benchmarks.
Policy = Callable[[Sequence[str]], str]


class EpisodeOver(RuntimeError):
    """`step` was called on an episode that is already done."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What the environment shows the model; `text` is appended to the prompt verbatim."""

    text: str
    turn: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "turn": self.turn}


@dataclass(frozen=True, slots=True)
class StepResult:
    """Outcome of one action. `info` is JSON-serialisable (keys and values plain types)."""

    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "observation": self.observation.to_json(),
            "reward": self.reward,
            "done": self.done,
            "info": self.info,
        }


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One parsed action: `name`, positional `args` (first line) and free-form `body`."""

    name: str
    args: tuple[str, ...] = ()
    body: str = ""
    tagged: bool = True  # False when read from a bare first line (no <tool> tags)


@runtime_checkable
class Environment(Protocol):
    """What every environment implements (see the module docstring for the contract)."""

    name: str
    num_tasks: int
    max_turns: int

    def reset(self, task_id: int, seed: int) -> Observation: ...

    def step(self, action_text: str) -> StepResult: ...

    def close(self) -> None: ...


def parse_tool_call(action_text: str) -> ToolCall | None:
    """The first action in a response, or None when there is none (blank or empty call)."""
    match = _TOOL_RE.search(action_text)
    if match is not None:
        inner, tagged = match.group(1), True
    else:
        lines = [ln for ln in action_text.splitlines() if ln.strip()]
        if not lines:
            return None
        inner, tagged = lines[0], False
    head, _, body = inner.partition("\n")
    words = head.split()
    if not words:
        return None
    return ToolCall(name=words[0].lower(), args=tuple(words[1:]), body=body, tagged=tagged)


def format_tool_call(name: str, *args: str, body: str = "") -> str:
    """The canonical text of an action (inverse of `parse_tool_call` for well-formed input)."""
    head = " ".join((name, *args))
    return f"{TOOL_OPEN}{head}\n{body}{TOOL_CLOSE}" if body else f"{TOOL_OPEN}{head}{TOOL_CLOSE}"


def check_task_id(task_id: int, num_tasks: int) -> int:
    """Validate a task id (a caller bug, not model output: raise)."""
    if not isinstance(task_id, int) or isinstance(task_id, bool):
        raise TypeError(f"task_id must be an int, got {type(task_id).__name__}")
    if not 0 <= task_id < num_tasks:
        raise ValueError(f"task_id {task_id} out of range [0, {num_tasks})")
    return task_id


def play(env: Environment, policy: Policy, task_id: int, seed: int = 0) -> tuple[float, list[str]]:
    """Run one episode of `env` with `policy`; return (return, transcript)."""
    obs = env.reset(task_id, seed)
    transcript = [obs.text]
    total = 0.0
    for _ in range(env.max_turns):
        action = policy(transcript)
        result = env.step(action)
        transcript += [action, result.observation.text]
        total += result.reward
        if result.done:
            break
    return total, transcript
