"""The simulated world's workload fitted from turn telemetry (`pearl profile workload`).

A user decides whether PEARL pays on *their* agent by simulating it: this turns the turn
records of a run (`pearl run`'s telemetry.jsonl, a simulated run's, or any file in the
schema of docs/telemetry.md) into the `rollout.workload` fields of a simulation config,
i.e. the parameters `pearl.sim.trajectories.TrajectorySampler` draws trajectories from:

* the initial prompt: turn 0's context; uniform between the smallest and largest seen;
* tokens generated a turn: a lognormal by its median and 90th percentile, clipped to the
  smallest and largest seen; a generation the length limit cut is a lower bound of what
  the policy would have generated (Kaplan-Meier, `pearl.sim.law_fit.censored_quantiles`),
  since leaving the cut ones, mostly long, out would shorten the law;
* observation tokens: what a context grew by between two turns beyond the tokens the
  turn generated (the chat template included, so `template_tokens` is 0): a lognormal by
  its median and 90th percentile, clipped to the smallest and largest seen. The
  quantiles take each growth as *truncated* at the room its turn left: an observation
  that left no room for another turn ended its trajectory unrecorded, so the growths seen
  understate the law where the length limit is near
  (`pearl.sim.law_fit.truncated_quantiles`);
* turns: `run_to_cap_fraction` and the lognormal of the trajectories that stop on their
  own, by maximum likelihood over how each trajectory ended (on its own, at the turn cap,
  cut mid-generation by the length limit, or left no room by its last observation, whose
  chance the observation law gives; `pearl.sim.law_fit.turn_count_law`);
* environment latency: a mixture of one to three lognormals fitted by expectation-
  maximisation on the log of each environment step, the number of components chosen by
  the Bayesian information criterion, each clipped at the longest step seen;
* prefix reuse: the most a turn ever served from the prefix cache, against what each mode
  allows (`context`: the previous turn's whole context; `turn`: its prompt; `prompt`: the
  initial prompt).

What turn records cannot show stays at the world's default and is said in the fit's notes:
the sandbox start before the first turn, and a trajectory's final environment step where
the records mark the last turn by leaving its environment step out.

This is the world's workload, not the decision engine's profile (`pearl profile fit`,
`pearl.control.tracker`): the two read the same records for different models and share
no formula.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from pearl.control.telemetry import TurnRecord
from pearl.errors import from_validation
from pearl.sim.law_fit import (
    MIN_DURATION_S,
    TurnEnding,
    censored_quantiles,
    limit_ended_share,
    lognormal_mixture,
    normal_cdf,
    truncated_quantiles,
    turn_count_law,
)
from pearl.specs.workload import TokenDist, WorkloadSpec

_Z95 = 1.6448536269514722
LIMIT_ENDED_NOTE = 0.8  # above this share of trajectories ended by the limit, say so


class WorkloadFitError(ValueError):
    """The records cannot give a workload (none complete, or a field without samples)."""


@dataclass(frozen=True, slots=True)
class ObservedTrajectory:
    """One trajectory as its turn records show it: the turns recorded, in order, from 0
    (a turn may lack its record: pearl run writes none for a turn interrupted after its
    last token)."""

    traj_id: str
    step: int  # the rollout step (batch) it belongs to
    turns: tuple[int, ...]  # turn index of each record
    contexts: tuple[int, ...]  # context when each turn's prefill starts
    decodes: tuple[int, ...]  # tokens each turn generated
    env_s: tuple[float | None, ...]  # the environment step after each turn, if recorded
    resumed: tuple[bool, ...]
    cached: tuple[int, ...]  # prompt tokens each turn served from the prefix cache

    @property
    def num_turns(self) -> int:
        return self.turns[-1] + 1

    @property
    def end_tokens(self) -> int:
        """Context after its last turn's generation."""
        return self.contexts[-1] + self.decodes[-1]

    @property
    def marked_last(self) -> bool:
        """Its last turn has no environment step (the schema's mark of a finished one)."""
        return self.env_s[-1] is None

    def consecutive(self) -> list[int]:
        """Positions j whose record and the next are of consecutive turns."""
        return [j for j in range(len(self.turns) - 1) if self.turns[j + 1] == self.turns[j] + 1]


@dataclass(frozen=True, slots=True)
class WorkloadFit:
    """The fitted `rollout.workload` fields, with what they rest on."""

    workload: dict[str, Any]  # WorkloadSpec fields (validated)
    max_context_tokens: int
    samples: dict[str, int]  # how many values each fitted field rests on
    notes: tuple[str, ...] = field(default=())
    limit_ended: float = 0.0  # share of the trajectories the length limit ended (estimated)

    def config(self) -> dict[str, Any]:
        """A simulation config fragment (`pearl simulate --config`)."""
        return {
            "rollout": {"max_context_tokens": self.max_context_tokens, "workload": self.workload}
        }


def observed_trajectories(turns: Iterable[TurnRecord]) -> tuple[list[ObservedTrajectory], int]:
    """Group turn records into trajectories; returns them and how many were left out for
    lacking their first turn's record (their initial prompt is unknown)."""
    by_traj: dict[str, dict[int, TurnRecord]] = {}
    for rec in turns:
        mine = by_traj.setdefault(rec.traj_id, {})
        old = mine.get(rec.turn)
        if old is None or rec.t_decode_end_s >= old.t_decode_end_s:  # the latest record wins
            mine[rec.turn] = rec
    out: list[ObservedTrajectory] = []
    headless = 0
    for tid in sorted(by_traj):
        recs = by_traj[tid]
        if 0 not in recs:
            headless += 1
            continue
        ordered = [recs[i] for i in sorted(recs)]
        out.append(
            ObservedTrajectory(
                tid,
                ordered[0].step,
                tuple(r.turn for r in ordered),
                tuple(r.context_tokens for r in ordered),
                tuple(r.decode_tokens for r in ordered),
                tuple(r.env_s for r in ordered),
                tuple(r.resumed for r in ordered),
                tuple(r.cached_prefix_tokens for r in ordered),
            )
        )
    return out, headless


def _token_dist(
    values: Sequence[int],
    what: str,
    *,
    limits: Sequence[int] | None = None,
    censored: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """A `TokenDist`: the median and 90th percentile of the positive values (a lognormal
    has no zeros; they stay in `min_tokens`), clipped to the smallest and largest seen.
    With `limits`, value i was seen only because it was below `limits[i]`; with
    `censored`, a censored value is a lower bound (the draw was cut there)."""
    if not values:
        raise WorkloadFitError(f"no {what} to fit")
    keep = [i for i, v in enumerate(values) if v > 0] or None
    positive = [float(values[i]) for i in keep] if keep else [1.0]
    if limits is not None and keep:
        median, p90 = truncated_quantiles(positive, [limits[i] for i in keep], (0.5, 0.9))
    elif censored is not None and keep:
        median, p90 = censored_quantiles(positive, [censored[i] for i in keep], (0.5, 0.9))
    else:
        median, p90 = float(np.median(positive)), float(np.quantile(positive, 0.9))
    p90 = max(median, p90)
    # a censored value bounds the law from below: it says nothing of the least value
    uncut = [v for v, c in zip(values, censored, strict=True) if not c] if censored else values
    return {
        "median_tokens": round(median, 1),
        "p90_tokens": round(p90, 1),
        "min_tokens": int(min(uncut or values)),
        "max_tokens": max(1, int(max(values))),
    }


def _prefix_reuse(trajs: Sequence[ObservedTrajectory]) -> str:
    """The least reuse that explains every cache hit seen (see the module docstring)."""
    mode = "prompt"
    for t in trajs:
        for j in t.consecutive():
            hit = t.cached[j + 1]
            if hit > t.contexts[j]:
                return "context"  # more than the previous prompt: its generation too
            if hit > t.contexts[0]:
                mode = "turn"
    return mode


def fit_workload(
    turns: Iterable[TurnRecord],
    *,
    max_context_tokens: int | None = None,
    max_turns: int | None = None,
) -> WorkloadFit:
    """The `rollout.workload` fields that make the world's trajectories look like these.

    `max_context_tokens` is the run's length limit and `max_turns` its turn cap; each
    defaults to the largest seen (and the notes say so). Raises `WorkloadFitError` when the
    records hold no complete trajectory.
    """
    trajs, headless = observed_trajectories(turns)
    notes: list[str] = []
    if headless:
        notes.append(f"{headless} trajectory(ies) left out: no record of their first turn")
    complete = _complete(trajs, notes)
    cap = max_context_tokens
    if cap is None:
        cap = max(t.end_tokens for t in complete) + 1
        notes.append(
            f"length limit not given: taken as the longest trajectory seen ({cap} tokens); "
            "pass the run's (--max-len)"
        )
    prompts = [t.contexts[0] for t in complete]
    if max(prompts) >= cap:
        raise WorkloadFitError(
            f"an initial prompt of {max(prompts)} tokens is not below the length limit, "
            f"{cap} tokens (fit within a larger one: --max-len)"
        )
    turn_cap = max_turns if max_turns is not None else max(t.num_turns for t in complete)
    if max_turns is None:
        notes.append(f"turn cap not given: taken as the most turns seen ({turn_cap})")

    def cut_mid_turn(t: ObservedTrajectory, j: int) -> bool:
        return j == len(t.turns) - 1 and t.end_tokens >= cap

    # a generation the limit cut ends there, not where the policy stopped: a lower bound
    generations = [
        (d, cut_mid_turn(t, j))
        for t in complete
        for j, d in enumerate(t.decodes)
        if not t.resumed[j]
    ]
    generated = [d for d, cut in generations if not cut]
    if not generated:
        raise WorkloadFitError("no generated tokens to fit (every turn was cut or resumed)")
    decode = _token_dist(
        [d for d, _ in generations], "generated tokens", censored=[c for _, c in generations]
    )
    room_below = cap - int(decode["min_tokens"])  # a next turn needs its context below this
    observation = _observation_dist(complete, room_below, notes)
    min_turns = min(t.num_turns for t in complete)
    no_room = _no_room_probability(observation, room_below)
    endings = [
        TurnEnding(t.num_turns, cut_mid_turn(t, len(t.turns) - 1), no_room(t.end_tokens))
        for t in complete
    ]
    law = turn_count_law(endings, min_turns, turn_cap)
    limited = limit_ended_share(endings, law, min_turns, turn_cap)
    if limited > LIMIT_ENDED_NOTE:
        notes.append(
            f"the length limit ended about {limited:.0%} of the trajectories: how many turns "
            "they would have taken past it is not in the records, so the turn law is one "
            "that ends trajectories as these ended; simulating a longer limit with it "
            "(rollout.max_context_tokens) extrapolates"
        )
    workload: dict[str, Any] = {
        "num_turns_median": round(law.median, 2),
        "num_turns_p90": round(max(law.median, law.p90), 2),
        "min_turns": max(1, min_turns),
        "max_turns": max(1, turn_cap),
        "run_to_cap_fraction": round(law.run_to_cap_fraction, 4),
        "decode_tokens": decode,
        "observation_tokens": observation,
        "template_tokens": 0,
        "prompt_tokens_min": min(prompts),
        "prompt_tokens_max": max(prompts),
        "prefix_reuse": _prefix_reuse(complete),
    }
    envs = [e for t in complete for e in t.env_s if e is not None]
    if envs:
        workload["env_latency"] = _env_components(envs)
    else:
        notes.append("no environment step recorded: the default environment latencies kept")
    notes.append(
        "sandbox start before the first turn is not in turn records: the default "
        "(rollout.workload.container_start_min_s / _max_s) kept"
    )
    per_step = Counter(t.step for t in trajs)
    batch = round(float(np.median(list(per_step.values()))))
    notes.append(
        f"the run's rollout batch: {batch} trajectories a step (the config keeps the "
        f"simulator's; pearl simulate --batch {batch} simulates it)"
    )
    try:  # the world's own checks (e.g. its smallest length limit)
        WorkloadSpec.model_validate({**workload, "context_cap_tokens": cap})
    except ValidationError as err:
        bad = from_validation(err, "the fit", prefix="rollout.workload")
        hint = ""
        if bad.field and bad.field.endswith("context_cap_tokens"):
            hint = f" (the length limit, {cap} tokens: fit within a larger one, --max-len)"
        raise WorkloadFitError(
            f"the fitted workload is not one the world runs: {bad.field}: {bad.message}{hint}"
        ) from None
    samples = {
        "trajectories": len(complete),
        "turns": sum(t.num_turns for t in complete),
        "generated": len(generated),
        "environment_steps": len(envs),
        "cut_mid_turn": sum(1 for e in endings if e.cut_mid_turn),
    }
    return WorkloadFit(workload, cap, samples, tuple(notes), limited)


def _complete(trajs: list[ObservedTrajectory], notes: list[str]) -> list[ObservedTrajectory]:
    """The finished trajectories: those whose last turn has no environment step, or, where
    the records mark none so (pearl run's environments also score the last answer, and it
    writes a rollout step's turns once its batch is whole), all of them."""
    marked = [t for t in trajs if t.marked_last]
    if marked:
        if len(marked) < len(trajs):
            notes.append(
                f"{len(trajs) - len(marked)} trajectory(ies) left out: not finished (a "
                "finished one's last turn has no environment step)"
            )
        return marked
    if not trajs:
        raise WorkloadFitError("no complete trajectory in the turn records")
    notes.append(
        "no turn is marked as a trajectory's last (every turn has an environment step): "
        "every trajectory taken as finished, its last environment step as a turn's"
    )
    return trajs


def _observation_dist(
    complete: list[ObservedTrajectory], room_below: int, notes: list[str]
) -> dict[str, Any]:
    """What a context grew by between two turns beyond the tokens its turn generated, each
    growth seen only because it was below the room its turn left."""
    grown: list[int] = []
    rooms: list[int] = []  # the room each growth's turn left: the growth is below it
    for t in complete:
        for j in t.consecutive():
            if t.resumed[j + 1]:  # a resumed turn's context holds its earlier partial answer
                continue
            end = t.contexts[j] + t.decodes[j]
            grown.append(t.contexts[j + 1] - end)
            rooms.append(room_below - end)
    if not grown:
        notes.append("no trajectory has two turns: observation tokens set to 0-1")
        return {"median_tokens": 1.0, "p90_tokens": 1.0, "min_tokens": 0, "max_tokens": 1}
    shrunk = sum(1 for g in grown if g < 0)
    if shrunk:
        notes.append(
            f"{shrunk} of {len(grown)} turn(s) shrank the context (an agent that rewrites "
            "its history): the world only appends, so those count as 0 tokens"
        )
    return _token_dist([max(0, g) for g in grown], "observations", limits=rooms)


def _no_room_probability(observation: dict[str, Any], room_below: int) -> Callable[[int], float]:
    """P(the observation after a turn ending at `end` tokens leaves no room for another
    turn), i.e. P(observation >= room_below - end) under the fitted observation law."""
    law = TokenDist.model_validate(observation)

    def p(end: int) -> float:
        need = room_below - end
        if need <= law.min_tokens:
            return 1.0
        if need > law.max_tokens:
            return 0.0
        if law.sigma <= 0:
            return 1.0 if law.median_tokens >= need - 0.5 else 0.0
        z = (math.log(need - 0.5) - math.log(law.median_tokens)) / law.sigma
        return float(1.0 - normal_cdf(np.array(z)))

    return p


def _env_components(envs: list[float]) -> list[dict[str, Any]]:
    longest = max(max(envs), 2 * MIN_DURATION_S)
    return [
        {
            "name": f"fit-{i + 1}",
            "weight": round(w, 4),
            "median_s": round(max(math.exp(mu), MIN_DURATION_S), 4),
            "p95_s": round(max(math.exp(mu + _Z95 * sd), MIN_DURATION_S), 4),
            "max_s": round(longest, 4),
        }
        for i, (w, mu, sd) in enumerate(lognormal_mixture(envs))
    ]
