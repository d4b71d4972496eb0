"""The token-level record of one trajectory in the real runtime (paper §5).

The controller's `TrajectoryBook` knows where a trajectory is; this record knows what it
says: every token of its context (prompt, model turns, observations), which tokens the
policy generated (the response mask), the behaviour log-probability and weight version of
each generated token, its reward, and an interrupted turn's preserved prefix. It turns into
one `TrainSample` when done, and round-trips through JSON for checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pearl.runtime.trainer.grpo_trainer import TrainSample


@dataclass
class RuntimeTrajectory:
    traj_id: str
    step: int
    group: int
    task_id: int
    token_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # per token; -1 for context tokens
    reward: float = 0.0
    num_turns: int = 0
    done: bool = False
    truncated: bool = False
    # an interrupted turn's generated prefix, continued by the next route (paper §4.5)
    partial_ids: list[int] = field(default_factory=list)
    partial_logprobs: list[float] = field(default_factory=list)
    partial_versions: list[int] = field(default_factory=list)
    num_interrupts: int = 0
    num_resumes: int = 0
    # the preserved prefix is a whole turn (cancelled after it had finished): not continued
    partial_complete: bool = False

    def add_context(self, ids: list[int]) -> None:
        self.token_ids += ids
        self.response_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.versions += [-1] * len(ids)

    def prompt(self) -> list[int]:
        """What the next request prefills: the context plus an interrupted turn's prefix."""
        return self.token_ids + self.partial_ids

    def keep_partial(self, ids: tuple[int, ...], logprobs: tuple[float, ...], version: int) -> None:
        """An interrupted turn: keep what it generated; the resumed request continues it."""
        self.partial_ids += list(ids)
        self.partial_logprobs += list(logprobs)
        self.partial_versions += [version] * len(ids)
        self.num_interrupts += 1

    def finish_turn(
        self, ids: tuple[int, ...], logprobs: tuple[float, ...], version: int
    ) -> list[int]:
        """Append a completed turn (with any preserved prefix); returns the turn's tokens."""
        turn_ids = self.partial_ids + list(ids)
        self.token_ids += turn_ids
        self.response_mask += [1] * len(turn_ids)
        self.logprobs += self.partial_logprobs + list(logprobs)
        self.versions += self.partial_versions + [version] * len(ids)
        self.partial_ids, self.partial_logprobs, self.partial_versions = [], [], []
        self.partial_complete = False
        self.num_turns += 1
        return turn_ids

    @property
    def min_version(self) -> int | None:
        gen = [v for v in self.versions if v >= 0]
        return min(gen) if gen else None

    def to_sample(self) -> TrainSample:
        return TrainSample(
            self.traj_id,
            self.group,
            tuple(self.token_ids),
            tuple(self.response_mask),
            tuple(self.logprobs),
            self.reward,
        )

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RuntimeTrajectory:
        return cls(**doc)
