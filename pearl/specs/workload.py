"""The agentic workload spec: distributions of a multi-turn SWE-style trajectory.

A trajectory starts with an initial prompt (system + tools + issue), then alternates turns:
the policy generates an action (decode tokens), the environment executes it (an env step of
some latency) and returns an observation (observation tokens) that, with a small chat
template, is appended to the context of the next turn. The trajectory ends at its turn
count or when the context reaches `context_cap_tokens` (the length limit ends it).

Defaults come from public SWE RL recipes (sources in docs/simulator-model.md), adjusted where they
disagree with the paper's calibration facts (docs/simulator-model.md; those win); every choice
and its reason is written down in `docs/simulator-model.md`. All fields are overridable
(e.g. from the simulator config's `rollout.workload` mapping, see `workload_from_dict`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pearl.errors import from_validation

_Z90 = 1.2815515655446004  # standard normal quantile at 0.90
_Z95 = 1.6448536269514722  # standard normal quantile at 0.95


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TokenDist(_Spec):
    """A lognormal token count given by its median and 90th percentile, clipped to [min, max]."""

    median_tokens: float = Field(gt=0, description="Median of the untruncated lognormal.")
    p90_tokens: float = Field(gt=0, description="90th percentile of the untruncated lognormal.")
    min_tokens: int = Field(1, ge=0, description="Smallest value after clipping.")
    max_tokens: int = Field(gt=0, description="Largest value after clipping (a hard cap).")

    @model_validator(mode="after")
    def _check(self) -> TokenDist:
        if self.p90_tokens < self.median_tokens:
            raise ValueError("p90_tokens must be >= median_tokens")
        if self.max_tokens < self.min_tokens:
            raise ValueError("max_tokens must be >= min_tokens")
        return self

    @property
    def sigma(self) -> float:
        """Log-space standard deviation."""
        return math.log(self.p90_tokens / self.median_tokens) / _Z90


class LatencyComponent(_Spec):
    """One kind of environment step: a lognormal latency (median, p95) clipped to a cap."""

    name: str = Field(description="What kind of action this is (for documentation).")
    weight: float = Field(gt=0, description="Relative frequency of this kind of step.")
    median_s: float = Field(gt=0, description="Median latency in seconds.")
    p95_s: float = Field(gt=0, description="95th percentile latency in seconds (untruncated).")
    max_s: float = Field(gt=0, description="Hard cap (a tool timeout) in seconds.")

    @model_validator(mode="after")
    def _check(self) -> LatencyComponent:
        if self.p95_s < self.median_s:
            raise ValueError("p95_s must be >= median_s")
        return self

    @property
    def sigma(self) -> float:
        return math.log(self.p95_s / self.median_s) / _Z95


def _default_env_mixture() -> tuple[LatencyComponent, ...]:
    # Shape of workload.md's mixture (quick commands / script-or-test runs / timeouts), with
    # lighter script runs and rarer timeouts so that the batch critical path matches the
    # paper's ~216 s for Qwen3-8B (calibration facts win; see docs/simulator-model.md).
    return (
        LatencyComponent(name="quick", weight=0.75, median_s=0.6, p95_s=3.0, max_s=10.0),
        LatencyComponent(name="script", weight=0.22, median_s=3.0, p95_s=10.0, max_s=60.0),
        LatencyComponent(name="timeout", weight=0.03, median_s=20.0, p95_s=40.0, max_s=60.0),
    )


class WorkloadSpec(_Spec):
    """Distributions of one agentic trajectory (paper §6.1 setting; SWE-bench-style agent)."""

    num_turns_median: float = Field(
        20.0, gt=0, description="Median turn count of a trajectory that stops on its own."
    )
    num_turns_p90: float = Field(
        40.0, gt=0, description="90th percentile of the turn count (untruncated lognormal)."
    )
    min_turns: int = Field(3, ge=1, description="Fewest turns of any trajectory.")
    max_turns: int = Field(50, ge=1, description="Turn cap: a trajectory never has more turns.")
    run_to_cap_fraction: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Fraction of trajectories (failing ones) that run until the turn or length cap.",
    )
    decode_tokens: TokenDist = Field(
        default_factory=lambda: TokenDist(
            median_tokens=250, p90_tokens=800, min_tokens=8, max_tokens=4096
        ),
        description="Tokens the policy generates per turn (its action).",
    )
    observation_tokens: TokenDist = Field(
        default_factory=lambda: TokenDist(
            median_tokens=400, p90_tokens=2500, min_tokens=16, max_tokens=4096
        ),
        description="Tokens of the environment's observation appended after each turn.",
    )
    template_tokens: int = Field(
        24, ge=0, description="Chat-template tokens added per turn around the observation."
    )
    prompt_tokens_min: int = Field(
        1500, ge=1, description="Smallest initial prompt (system + tools + issue), tokens."
    )
    prompt_tokens_max: int = Field(
        4000, ge=1, description="Largest initial prompt (uniform between min and max), tokens."
    )
    prefix_reuse: Literal["context", "prompt", "turn"] = Field(
        "prompt",
        description="What of a turn's context earlier turns' KV can serve from a prefix "
        "cache: 'context' (the agent appends to its history token for token), 'turn' (the "
        "previous turn's prompt stays a prefix but its generated tokens are re-rendered, as "
        "Qwen3's chat template does when it drops the reasoning of the last answer once a "
        "user-role observation follows it) or 'prompt' (the agent rewrites its history each "
        "turn, e.g. truncates or windows earlier observations, so only the initial prompt "
        "stays a token-identical prefix).",
    )
    context_cap_tokens: int = Field(
        32768,
        ge=1024,
        description="Trajectory length limit: the context never exceeds it; reaching it ends "
        "the trajectory.",
    )
    env_latency: tuple[LatencyComponent, ...] = Field(
        default_factory=_default_env_mixture,
        min_length=1,
        description="Mixture of environment-step latencies (one draw per turn).",
    )
    container_start_min_s: float = Field(
        2.0, ge=0, description="Smallest sandbox start time before the first turn, seconds."
    )
    container_start_max_s: float = Field(
        10.0, ge=0, description="Largest sandbox start time (uniform between min and max)."
    )

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.max_turns < self.min_turns:
            raise ValueError("max_turns must be >= min_turns")
        if self.num_turns_p90 < self.num_turns_median:
            raise ValueError("num_turns_p90 must be >= num_turns_median")
        if self.prompt_tokens_max < self.prompt_tokens_min:
            raise ValueError("prompt_tokens_max must be >= prompt_tokens_min")
        if self.prompt_tokens_max >= self.context_cap_tokens:
            raise ValueError("prompt_tokens_max must be below context_cap_tokens")
        if self.container_start_max_s < self.container_start_min_s:
            raise ValueError("container_start_max_s must be >= container_start_min_s")
        return self

    @property
    def num_turns_sigma(self) -> float:
        return math.log(self.num_turns_p90 / self.num_turns_median) / _Z90


def workload_from_dict(
    overrides: dict[str, Any] | None = None,
    *,
    source: str = "<config>",
    prefix: str = "rollout.workload",
    **fields: Any,
) -> WorkloadSpec:
    """A `WorkloadSpec` from default values updated by `overrides` and keyword `fields`.

    Errors are `InputError(source, message, field="<prefix>.<field path>")`.
    """
    doc: dict[str, Any] = {**(overrides or {}), **fields}
    try:
        return WorkloadSpec.model_validate(doc)
    except ValidationError as err:
        raise from_validation(err, source, prefix=prefix) from None
