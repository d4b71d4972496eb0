"""`guess`: a multi-turn digit-guessing game that a tiny byte-level model can learn.

The environment hides a secret value in ``0 .. num_values-1`` (default 0-9). Each turn the
model names a guess; the observation says ``higher``, ``lower`` or ``correct``. The episode
ends when the guess is right or after ``max_turns`` turns.

Why a tiny model can learn it under GRPO within minutes:

* the action space is one character: the parser takes the first decimal digit anywhere in
  the response (``<tool>guess 5</tool>``, ``guess 5`` and ``xx5`` are the same action), so an
  untrained byte-level model that emits a few random bytes already lands a guess now and then;
* the return is shaped and dense: every guess earns closeness credit, and finding the secret
  earns more the earlier it happens, so emitting a digit, guessing near the middle, and
  following the higher/lower feedback each raise the return on their own;
* observations are a few bytes, so prompts stay short (``observation="short"``, the default).

``observation="transcript"`` renders the game state the way agent scaffolds re-render theirs
every turn: the tool-call instruction, the turn counter and the whole guess history, about
90-130 bytes per observation. Same game, same rewards; each turn then brings about a hundred
new prompt tokens, a prefill-heavy multi-turn workload (``make demo`` uses it).

Return (the sum of per-step rewards, in [0, 1]): with ``closeness(g) = 1 - |g - s|/(n - 1)``,
the score after a turn is ``1 - solve_penalty * (t - 1)`` if the secret was found at turn
``t`` (1-based), else ``closeness_weight * max closeness of the guesses so far`` (0 with no
guess yet). Each step's reward is the increase of that score (potential-based shaping), so
rewards are never negative and the return equals the final score. Defaults: n = 10,
max_turns = 5, closeness_weight = 0.5, solve_penalty = 0.1, so binary search (the oracle)
scores >= 0.7 on every task and an untrained model scores about 0.1.

Determinism: the secret depends on ``task_id`` only (``seed`` is accepted for the protocol
and ignored), so every sample of a GRPO group faces the same secret.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pearl.envs.protocol import EpisodeOver, Observation, Policy, StepResult, check_task_id

_DIGIT_RE = re.compile(r"[0-9]")
_RESULT_RE = re.compile(r"\b([0-9]) (higher|lower|correct)\b")
OBSERVATION_STYLES = ("short", "transcript")


@dataclass(frozen=True, slots=True)
class GuessConfig:
    """Game parameters; the defaults are the documented task."""

    num_values: int = 10
    max_turns: int = 5
    num_tasks: int = 1000
    closeness_weight: float = 0.5
    solve_penalty: float = 0.1
    observation: str = "short"

    def __post_init__(self) -> None:
        if self.observation not in OBSERVATION_STYLES:
            raise ValueError(
                f"observation must be one of {', '.join(OBSERVATION_STYLES)}, "
                f"not {self.observation!r}"
            )
        if not 2 <= self.num_values <= 10:
            raise ValueError("num_values must be in [2, 10] (one decimal digit per guess)")
        if self.max_turns < 1 or self.num_tasks < 1:
            raise ValueError("max_turns and num_tasks must be >= 1")
        if not 0.0 <= self.closeness_weight < 1.0 - self.solve_penalty * (self.max_turns - 1):
            raise ValueError("closeness credit must stay below the worst solved score")


class GuessEnv:
    """The guessing game (see module docstring). Not thread-safe: one episode at a time."""

    name = "guess"

    def __init__(self, config: GuessConfig | None = None, **overrides: int | float) -> None:
        base = config or GuessConfig()
        self.config = dataclasses.replace(base, **overrides) if overrides else base  # type: ignore[arg-type]
        self.num_tasks = self.config.num_tasks
        self.max_turns = self.config.max_turns
        self._secret: int | None = None
        self._turn = 0
        self._score = 0.0
        self._best_closeness = 0.0
        self._done = False

    def secret_of(self, task_id: int) -> int:
        """The hidden value of a task (for tests and oracles; never shown to the model)."""
        check_task_id(task_id, self.num_tasks)
        return random.Random(f"guess:{task_id}").randrange(self.config.num_values)

    def reset(self, task_id: int, seed: int = 0) -> Observation:
        self._secret = self.secret_of(task_id)
        self._turn = 0
        self._score = 0.0
        self._best_closeness = 0.0
        self._done = False
        self._history: list[str] = []
        if self.config.observation == "transcript":
            return Observation(self._transcript("start"), turn=0)
        return Observation(f"guess 0-{self.config.num_values - 1}\n", turn=0)

    def _transcript(self, result: str, done: bool = False) -> str:
        cfg = self.config
        history = ", ".join(self._history) or "none"
        turn = "over" if done else f"turn {self._turn + 1} of {cfg.max_turns}"
        return (
            f"[guess game, {turn}] Reply with "
            f"<tool>guess N</tool>, N in 0-{cfg.num_values - 1}. "
            f"Result: {result}. History: {history}.\n"
        )

    def step(self, action_text: str) -> StepResult:
        if self._secret is None:
            raise RuntimeError("step() before reset()")
        if self._done:
            raise EpisodeOver("episode is over; call reset()")
        cfg = self.config
        self._turn += 1
        guess = parse_guess(action_text, cfg.num_values)
        if guess is None:
            text, feedback = f"say a digit 0-{cfg.num_values - 1}\n", "invalid"
            score = self._score
        else:
            closeness = 1.0 - abs(guess - self._secret) / (cfg.num_values - 1)
            self._best_closeness = max(self._best_closeness, closeness)
            if guess == self._secret:
                feedback = "correct"
                score = 1.0 - cfg.solve_penalty * (self._turn - 1)
            else:
                feedback = "higher" if self._secret > guess else "lower"
                score = cfg.closeness_weight * self._best_closeness
            text = f"{guess} {feedback}\n"
        reward = max(0.0, score - self._score)
        self._score = max(score, self._score)
        self._done = feedback == "correct" or self._turn >= self.max_turns
        if cfg.observation == "transcript":
            self._history.append(text.strip())
            text = self._transcript(text.strip(), self._done)
        info = {"guess": guess, "feedback": feedback, "score": round(self._score, 6)}
        if self._done:
            info["solved"] = feedback == "correct"
            info["secret"] = self._secret
        return StepResult(Observation(text, turn=self._turn), reward, self._done, info)

    def close(self) -> None:
        self._secret = None


def parse_guess(action_text: str, num_values: int = 10) -> int | None:
    """The first decimal digit in the response if it is a legal value, else None."""
    match = _DIGIT_RE.search(action_text)
    if match is None:
        return None
    value = int(match.group())
    return value if value < num_values else None


def oracle_policy(num_values: int = 10) -> Policy:
    """Binary search on the higher/lower feedback read back from the transcript."""

    def act(transcript: Sequence[str]) -> str:
        low, high = 0, num_values - 1
        for obs in transcript[2::2]:  # observations after each action (either style)
            for digit, feedback in _RESULT_RE.findall(obs):
                g = int(digit)
                if feedback == "higher":
                    low = max(low, g + 1)
                elif feedback == "lower":
                    high = min(high, g - 1)
        return f"<tool>guess {(low + high) // 2}</tool>"

    return act


def random_byte_policy(seed: int, num_bytes: int = 4) -> Policy:
    """An untrained byte-level model: `num_bytes` uniformly random bytes per turn."""
    rng = random.Random(seed)

    def act(transcript: Sequence[str]) -> str:
        return bytes(rng.randrange(256) for _ in range(num_bytes)).decode("latin-1")

    return act


def random_digit_policy(seed: int, num_values: int = 10) -> Policy:
    """A model that learned the format but ignores the feedback."""
    rng = random.Random(seed)

    def act(transcript: Sequence[str]) -> str:
        return f"guess {rng.randrange(num_values)}"

    return act
