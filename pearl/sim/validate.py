"""The decision engine against the simulator (`pearl validate`).

1. Profile: the runtime tracker (`pearl.control.tracker`) learns a `WorkloadProfile` from the
   telemetry of two short profiling runs of `profile_steps` steps (one colocated, one
   disaggregated, so that KV transfer is observed), exactly as it would from a real run.
2. Grid: for each budget N and batch B, every configuration (colocated, and every P:D split
   with P + D = N) is simulated with one rollout batch in flight (so a batch's makespan is
   its own, not shared with the next batch) for `num_steps` steps; the simulated makespan
   is their mean. The engine predicts the same configuration from the profile.
3. Figures: relative error |predicted - simulated| / simulated over the grid (median, p90),
   and for each (N, B) whether the engine's chosen configuration is within 1% of the best
   simulated one (brute force). The simulated makespan of a configuration is itself a
   sample mean: its steps differ (which trajectory ends last, and so its turns and
   environment waits, depends on the configuration). Each choice therefore also reports
   the gap to the best against the noise of that difference, two standard errors of the
   step-by-step difference of the two (every configuration runs the same sampled steps;
   `within_noise`: the gap is inside it, so the simulation cannot tell the two
   configurations apart at this number of steps).

The simulator is the ground truth here; the engine's models are coarser on purpose
(docs/architecture.md). Nothing here tunes either of them.

With a run store active (`pearl validate --out DIR`, `pearl experiment ratio --out DIR`;
`pearl.sim.run_store`), the learned profile and each grid point's makespans are kept as
they finish, and a rerun of the same grid reads them back: an interrupted grid goes on
where it stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pearl.control.plan import PDConfig
from pearl.control.profile import WorkloadProfile
from pearl.sim.config import SimConfig, config_identity
from pearl.sim.policy_run import build, hardware_prior, make_policy
from pearl.sim.run_store import kept_or_made

Progress = Callable[[str, float, float], None]


@dataclass(frozen=True, slots=True)
class GridPoint:
    num_gpus: int
    batch_size: int
    config: str
    simulated_s: float
    predicted_s: float
    feasible: bool
    simulated_steps_s: tuple[float, ...] = ()

    @property
    def rel_error(self) -> float:
        return abs(self.predicted_s - self.simulated_s) / self.simulated_s

    def to_json(self) -> dict[str, object]:
        return {
            "num_gpus": self.num_gpus,
            "batch_size": self.batch_size,
            "config": self.config,
            "simulated_s": round(self.simulated_s, 2),
            "predicted_s": round(self.predicted_s, 2),
            "rel_error": round(self.rel_error, 4),
            "feasible": self.feasible,
            "simulated_steps_s": [round(x, 2) for x in self.simulated_steps_s],
        }


def _std_error(xs: tuple[float, ...]) -> float:
    """Standard error of the mean of `xs` (0 for fewer than two samples)."""
    if len(xs) < 2:
        return 0.0
    return float(np.std(xs, ddof=1) / np.sqrt(len(xs)))


@dataclass(frozen=True, slots=True)
class ChoiceCheck:
    num_gpus: int
    batch_size: int
    chosen: str
    best: str
    chosen_s: float
    best_s: float
    chosen_steps_s: tuple[float, ...] = ()
    best_steps_s: tuple[float, ...] = ()

    @property
    def within_1pct(self) -> bool:
        return self.chosen_s <= 1.01 * self.best_s

    @property
    def gap(self) -> float:
        """How much slower the chosen configuration simulated than the best, relative."""
        return self.chosen_s / self.best_s - 1.0

    @property
    def noise(self) -> float:
        """Two standard errors of the difference of the two simulated means, relative to
        the best (0 when the chosen one is the best or a mean has one step). Both
        configurations run the same sampled steps (common random numbers), so with as many
        steps each the difference is taken step by step (paired); otherwise unpaired."""
        if self.chosen == self.best:
            return 0.0
        a, b = self.chosen_steps_s, self.best_steps_s
        if len(a) == len(b):
            se = _std_error(tuple(x - y for x, y in zip(a, b, strict=True)))
        else:
            se = float(np.hypot(_std_error(a), _std_error(b)))
        return float(2.0 * se / self.best_s)

    @property
    def within_noise(self) -> bool:
        return self.gap <= max(self.noise, 0.01)

    def to_json(self) -> dict[str, object]:
        return {
            "num_gpus": self.num_gpus,
            "batch_size": self.batch_size,
            "chosen": self.chosen,
            "best": self.best,
            "chosen_simulated_s": round(self.chosen_s, 2),
            "best_simulated_s": round(self.best_s, 2),
            "within_1pct": self.within_1pct,
            "gap": round(self.gap, 4),
            "noise": round(self.noise, 4),
            "within_noise": self.within_noise,
        }


@dataclass(frozen=True)
class Validation:
    points: tuple[GridPoint, ...]
    choices: tuple[ChoiceCheck, ...]

    def to_json(self) -> dict[str, object]:
        errs = np.array([p.rel_error for p in self.points]) if self.points else np.zeros(1)
        within = [c.within_1pct for c in self.choices]
        noise = [c.within_noise for c in self.choices]
        return {
            "num_points": len(self.points),
            "median_rel_error": round(float(np.median(errs)), 4),
            "p90_rel_error": round(float(np.percentile(errs, 90)), 4),
            "choice_within_1pct": round(sum(within) / len(within), 4) if within else None,
            "choice_within_1pct_or_noise": round(sum(noise) / len(noise), 4) if noise else None,
            "points": [p.to_json() for p in self.points],
            "choices": [c.to_json() for c in self.choices],
        }


def configs_for(num_gpus: int) -> list[PDConfig]:
    """Colocated and every P:D split on `num_gpus` single-GPU workers."""
    out = [PDConfig.colocated(num_gpus)]
    out += [PDConfig.disaggregated(p, num_gpus - p) for p in range(1, num_gpus)]
    return out


def _policy_for(config: PDConfig) -> object:
    """The static policy that runs `config`: one batch in flight, routed as `pearl` routes
    (the decision engine chooses for PEARL's runs, so it is checked in PEARL's world; a
    run config's `controller.sticky_max_imbalance` still overrides it)."""
    name = (
        "fixed:colocated"
        if config.is_colocated
        else f"fixed:disagg:{config.num_prefill}:{config.num_decode}"
    )
    return dataclasses.replace(
        make_policy(name),
        max_batches_in_flight=1,
        sticky_max_imbalance=make_policy("pearl").sticky_max_imbalance,
    )


def simulate_makespans(
    cfg: SimConfig, config: PDConfig, *, num_steps: int, max_time_s: float = 7200.0
) -> tuple[list[float], list[tuple[tuple, tuple]]]:
    """Makespans of the first `num_steps` rollout steps of a static `config` (one batch in
    flight), and each step's telemetry (turns, worker steps)."""
    n = config.num_workers * cfg.cluster.gpus_per_worker
    scfg = cfg.with_updates(**{"trace.static_gpus": n, "trace.duration_s": max_time_s})
    world, _, driver, duration = build(scfg, _policy_for(config), keep_history=False)
    driver.run(duration, stop=lambda: len(world.stats.makespans_s) >= num_steps)
    steps: dict[int, tuple[list, list]] = {}
    for r in world.finished_turns:
        steps.setdefault(r.step, ([], []))[0].append(r)
    for r in world.finished_worker_steps:
        steps.setdefault(r.step, ([], []))[1].append(r)
    tel = [(tuple(t), tuple(w)) for _, (t, w) in sorted(steps.items())]
    return list(world.stats.makespans_s), tel


def grid_makespans(cfg: SimConfig, config: PDConfig, *, num_steps: int) -> list[float]:
    """`simulate_makespans`' makespans alone, kept in the active run store
    (`pearl.sim.run_store`) so an interrupted grid goes on where it stopped."""
    key = f"{config_identity(cfg)}|{config}|{num_steps}"
    return kept_or_made(
        "makespans", key, lambda: simulate_makespans(cfg, config, num_steps=num_steps)[0]
    )


def learn_profile(cfg: SimConfig, *, num_gpus: int = 4, num_steps: int = 2) -> WorkloadProfile:
    """A profile learned by the runtime tracker from simulated telemetry: a colocated run
    on `num_gpus` and a disaggregated one split in half (on 2 GPUs when `num_gpus` is 1,
    since a split needs a prefill and a decode worker). Kept in the active run store."""
    from pearl.control.tracker import RuntimeTracker

    def learn() -> WorkloadProfile:
        tracker = RuntimeTracker(hardware_prior(cfg))
        split = max(2, num_gpus)
        half = split // 2
        for config in (PDConfig.colocated(num_gpus), PDConfig.disaggregated(half, split - half)):
            _, tel = simulate_makespans(cfg, config, num_steps=num_steps)
            for turns, worker_steps in tel:
                tracker.observe_step(turns, worker_steps)
        return tracker.profile

    return kept_or_made("profile", f"{config_identity(cfg)}|{num_gpus}|{num_steps}", learn)


def validate(
    cfg: SimConfig,
    *,
    budgets: tuple[int, ...] = (4, 8, 12),
    batches: tuple[int, ...] = (32, 64),
    num_steps: int = 6,
    profile_steps: int = 6,
    progress: Progress | None = None,
) -> Validation:
    """Predicted vs simulated makespans over the grid; see the module docstring. The
    profile's runs and the grid's are apart: more grid steps narrow the simulation's noise
    without giving the engine more telemetry than a short run would."""
    from pearl.control.decision import DecisionEngine
    from pearl.control.makespan import predict

    gpw = cfg.cluster.gpus_per_worker
    profile = learn_profile(cfg, num_gpus=min(budgets), num_steps=profile_steps)
    engine = DecisionEngine()
    points: list[GridPoint] = []
    choices: list[ChoiceCheck] = []
    total = sum(len(configs_for(n)) for n in budgets) * len(batches)
    done = 0
    for batch in batches:
        bcfg = cfg.with_updates(**{"rollout.batch_size": batch})
        for n in budgets:
            simulated: dict[str, tuple[float, ...]] = {}
            for config in configs_for(n):
                spans = grid_makespans(bcfg, config, num_steps=num_steps)
                done += 1
                if progress is not None:
                    progress("validate", done, total)
                if not spans:
                    continue
                steps_s = tuple(float(x) for x in spans)
                sim_s = float(np.mean(steps_s))
                pred = predict(config, profile, batch, num_gpus_per_worker=gpw)
                simulated[str(config)] = steps_s
                points.append(
                    GridPoint(n, batch, str(config), sim_s, pred.makespan_s, pred.feasible, steps_s)
                )
            if not simulated:
                continue
            chosen = str(engine.decide(profile, n // gpw, batch).chosen)
            mean = {k: float(np.mean(v)) for k, v in simulated.items()}
            best = min(mean, key=lambda k: mean[k])
            choices.append(
                ChoiceCheck(
                    n,
                    batch,
                    chosen,
                    best,
                    mean.get(chosen, float("inf")),
                    mean[best],
                    simulated.get(chosen, ()),
                    simulated[best],
                )
            )
    return Validation(tuple(points), tuple(choices))
