"""The paper's §3 measurements of the real world, reproduced by the simulated world.

These are facts about GPUs and the workload (paper §3.1-§3.3), not about PEARL: they pin
the world that every policy runs in. Each row gives the paper's figure, the simulated one,
the tolerance it is judged by, and the `pearl simulate` command (or calibration call) that
reproduces it. Runs are one batch at a time ("sync": `rollout.max_staleness: 0`, as the
paper's motivation experiments), on static pools (no trace, no borrowing).

* §1: in sync mode rollout is ~82% of end-to-end time with 4x as many rollout GPUs as the
  16 training GPUs (Qwen3-8B).
* §3.1: 50% more rollout GPUs cut rollout latency by 10.3%, 8 more a further 8.9% (read
  as 16 -> 24 -> 32 GPUs, batch 64); an unlimited pool still takes 216.3 s a batch against
  163.8 s of training (Qwen3-8B).
* §3.2: Qwen3-30B-A3B colocated, chunked prefill and prefix caching on: prefill is 96.68%
  of processed tokens and 26.48% of the time.
* §3.3 (8 GPUs): the best disaggregated configuration beats colocation by 9.7% at batch
  32; colocation wins by 6.1% at batch 96; the best ratio moves from 4P4D at batch 48 to
  5P3D at batch 64.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from pearl.sim.bound import train_step_s
from pearl.sim.calibration import batch_mix, critical_path
from pearl.sim.compare import default_jobs, run_simulation
from pearl.sim.config import SimConfig
from pearl.sim.experiments.result import ExperimentResult
from pearl.sim.physics.iteration import WorkerHardware
from pearl.sim.policy_run import Progress
from pearl.sim.trajectories import TrajectorySampler
from pearl.specs import get_gpu, get_model
from pearl.specs.workload import WorkloadSpec

SCALING_GPUS = (16, 24, 32)
# §1 / paper-notes: in sync mode rollout is ~82% of end-to-end time with 4x as many
# rollout GPUs as the 16 training GPUs
SHARE_GPUS = 64
# The paper does not state the base pool of §3.1: a base of B reads as B -> 1.5B -> 1.5B + 8.
# The table judges B = 16 (issue 13's reading); B = 8, inside the evaluation's 4-16 GPU
# rollout pool, is reported beside it in the notes, never judged.
SCALING_GPUS_OTHER_BASE = (8, 12, 20)
PD_BATCHES = (32, 48, 64, 96)
PD_GPUS = 8
PD_RATIOS = ((2, 6), (3, 5), (4, 4), (5, 3), (6, 2))
# the §3.1 cuts and §3.3 gains are a few percent, the size of one seed's noise: each is the
# mean over these seeds (offsets to the config's seed); a §3.3 sign the seeds disagree on
# is no sign
FACT_SEEDS = (0, 1, 2)
MODELS = ("qwen3-8b", "qwen3-30b-a3b")
SYNC = "rollout.max_staleness=0"


@dataclass(frozen=True, slots=True)
class PdPoint:
    """Mean batch makespans at one batch size on a static pool: colocated and each P:D."""

    batch: int
    colocated_s: float
    disaggregated_s: dict[tuple[int, int], float]
    seed_gains: tuple[float, ...] = ()  # each seed's own best split against colocation

    @property
    def best_ratio(self) -> tuple[int, int]:
        return min(self.disaggregated_s, key=lambda r: (self.disaggregated_s[r], r))

    @property
    def disagg_gain(self) -> float:
        """Colocated makespan / best disaggregated makespan - 1 (> 0: disaggregation wins);
        nan when neither finished a batch in the run."""
        best = self.disaggregated_s[self.best_ratio]
        if math.isinf(best) and math.isinf(self.colocated_s):
            return math.nan
        return self.colocated_s / best - 1.0


def crossover_verdict(
    gain: float, paper_gain: float, points: float = 0.05, seed_gains: tuple[float, ...] = ()
) -> tuple[bool, str]:
    """(within, what is off) for a simulated disaggregation gain against the paper's: the
    sign must agree, in the mean and in every seed, and the magnitude lie within `points`;
    a right sign with a magnitude off says by how much."""
    sign_ok = (gain > 0) == (paper_gain > 0)
    if sign_ok and any((g > 0) != (paper_gain > 0) for g in seed_gains):
        return False, "; the seeds disagree on the sign"
    gap = abs(gain - paper_gain)
    if sign_ok and gap > points:
        return False, f"; sign right, {gap * 100:.1f} points off"
    return sign_ok and gap <= points, ""


def _sync(cfg: SimConfig, **dotted: Any) -> SimConfig:
    return cfg.with_updates(**{"rollout.max_staleness": 0, **dotted})


def _makespans(cfg: SimConfig, progress: Progress | None) -> dict[str, float]:
    """Each policy's mean batch makespan; infinite for a run that finished no batch in its
    simulated time (a configuration too slow for the run: it loses every comparison, and
    the table says so instead of failing)."""
    res = run_simulation(cfg, progress=progress, with_bound=False, jobs=default_jobs())
    out: dict[str, float] = {}
    for r in res.runs:
        span = r.summary["mean_makespan_s"]
        out[r.name] = math.inf if span is None else float(span)
    return out


def _secs(x: float) -> str:
    """A makespan for the table: seconds, or that no batch finished in the run."""
    return f"{x:.0f} s" if math.isfinite(x) else "no batch finished"


def _static_makespans(
    cfg: SimConfig,
    seed_offset: int,
    model: str,
    num_gpus: int,
    policies: list[str],
    progress: Progress | None,
    *,
    batch: int | None = None,
) -> dict[str, float]:
    """Mean batch makespan of each of `policies`, one batch at a time, on a static pool of
    `num_gpus`, at `cfg.seed + seed_offset` (and `batch` trajectories if given)."""
    dotted: dict[str, Any] = {
        "seed": cfg.seed + seed_offset,
        "cluster.model": model,
        "trace.static_gpus": num_gpus,
        "policies": policies,
    }
    if batch is not None:
        dotted["rollout.batch_size"] = batch
    return _makespans(_sync(cfg, **dotted), progress)


def sync_scaling(
    cfg: SimConfig,
    model: str,
    gpus: tuple[int, ...] = SCALING_GPUS,
    *,
    seeds: tuple[int, ...] = FACT_SEEDS,
    progress=None,
) -> dict[int, float]:
    """Mean batch makespan, colocated, one batch at a time, per static pool size (the mean
    over `seeds`, offsets to `cfg.seed`: the cuts are a few percent, like the §3.3 gains)."""
    return {
        n: statistics.fmean(
            _static_makespans(cfg, s, model, n, ["fixed:colocated"], progress)["fixed:colocated"]
            for s in seeds
        )
        for n in gpus
    }


def pd_point(
    cfg: SimConfig,
    model: str,
    batch: int,
    *,
    seeds: tuple[int, ...] = FACT_SEEDS,
    progress=None,
) -> PdPoint:
    """Colocated and every P:D split at one batch on the 8-GPU pool: makespans averaged
    over `seeds` (offsets to `cfg.seed`), with each seed's own gain."""
    names = ["fixed:colocated", *(f"fixed:disagg:{p}:{d}" for p, d in PD_RATIOS)]
    points = []
    for s in seeds:
        m = _static_makespans(cfg, s, model, PD_GPUS, names, progress, batch=batch)
        points.append(
            PdPoint(
                batch,
                m["fixed:colocated"],
                {r: m[f"fixed:disagg:{r[0]}:{r[1]}"] for r in PD_RATIOS},
            )
        )
    return PdPoint(
        batch,
        statistics.fmean(p.colocated_s for p in points),
        {r: statistics.fmean(p.disaggregated_s[r] for p in points) for r in PD_RATIOS},
        tuple(p.disagg_gain for p in points),
    )


def unlimited_pool(cfg: SimConfig, seeds: int = 8) -> tuple[float, float]:
    """(mean over seeds of the unlimited-pool batch makespan, the trainer's step time for
    the mean batch, `pearl.sim.bound.train_step_s`) for the configured model, GPU, batch
    and workload."""
    hw = WorkerHardware(
        get_model(cfg.cluster.model), get_gpu(cfg.cluster.gpu), cfg.cluster.gpus_per_worker
    )
    spec = WorkloadSpec.model_validate(
        {**cfg.rollout.workload, "context_cap_tokens": cfg.rollout.max_context_tokens}
    )
    spans = [
        critical_path(
            TrajectorySampler(spec, cfg.seed + s).batch(cfg.rollout.batch_size), hw
        ).makespan_s
        for s in range(seeds)
    ]
    return statistics.fmean(spans), train_step_s(cfg)


def _row(fact: str, paper: str, sim: str, tolerance: str, ok: bool, how: str) -> dict[str, Any]:
    return {
        "fact": fact,
        "paper": paper,
        "simulated": sim,
        "tolerance": tolerance,
        "verdict": "within" if ok else "MISS",
        "reproduce": how,
    }


def run(
    cfg: SimConfig,
    *,
    models: tuple[str, ...] = MODELS,
    batches: tuple[int, ...] = PD_BATCHES,
    scaling_gpus: tuple[int, ...] = SCALING_GPUS,
    seeds: tuple[int, ...] = FACT_SEEDS,
    progress: Progress | None = None,
) -> ExperimentResult:
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    # §3.1 scaling (Qwen3-8B)
    if len(scaling_gpus) >= 3:
        sc = sync_scaling(cfg, "qwen3-8b", scaling_gpus, seeds=seeds, progress=progress)
        other = sync_scaling(
            cfg, "qwen3-8b", SCALING_GPUS_OTHER_BASE, seeds=seeds, progress=progress
        )
        o1, o2, o3 = SCALING_GPUS_OTHER_BASE
        notes.append(
            f"§3.1 from the other base the paper's wording allows ({o1} -> {o2} -> {o3} "
            f"GPUs, not judged): cuts {1 - other[o2] / other[o1]:.1%} and "
            f"{1 - other[o3] / other[o2]:.1%} ({_secs(other[o1])} -> {_secs(other[o2])} -> "
            f"{_secs(other[o3])}) against the paper's 10.3% and 8.9%."
        )
        a, b, c = scaling_gpus[:3]
        cut1, cut2 = 1 - sc[b] / sc[a], 1 - sc[c] / sc[b]
        rows.append(
            _row(
                f"§3.1 latency cut {a} -> {b} GPUs (Qwen3-8B, batch {cfg.rollout.batch_size})",
                "10.3%",
                f"{cut1:.1%} ({_secs(sc[a])} -> {_secs(sc[b])})",
                "+-5 points",
                abs(cut1 - 0.103) <= 0.05,
                f"pearl simulate --static-gpus {a} --policies fixed:colocated --set {SYNC}",
            )
        )
        rows.append(
            _row(
                f"§3.1 latency cut {b} -> {c} GPUs",
                "8.9%",
                f"{cut2:.1%} ({_secs(sc[b])} -> {_secs(sc[c])})",
                "+-5 points",
                abs(cut2 - 0.089) <= 0.05,
                f"pearl simulate --static-gpus {c} --policies fixed:colocated --set {SYNC}",
            )
        )
        # §1 (one seed): the rollout share of a sync step on 4x the training GPUs
        roll = _static_makespans(cfg, 0, "qwen3-8b", SHARE_GPUS, ["fixed:colocated"], progress)[
            "fixed:colocated"
        ]
        step = train_step_s(cfg.with_updates(**{"cluster.model": "qwen3-8b"}))
        share = roll / (roll + step)
        rows.append(
            _row(
                f"§1 rollout share of a sync step, {SHARE_GPUS} rollout GPUs (4x the "
                f"{cfg.cluster.num_training_gpus} training GPUs; Qwen3-8B, batch "
                f"{cfg.rollout.batch_size})",
                "~82%",
                f"{share:.0%} (rollout {_secs(roll)}, training {step:.0f} s)",
                "+-5 points",
                abs(share - 0.82) <= 0.05,
                f"pearl simulate --static-gpus {SHARE_GPUS} --policies fixed:colocated "
                f"--set {SYNC}",
            )
        )
        notes.append(
            "§1's 82% and §3.1's two anchors cannot all hold in one setting: a pool "
            "is never faster than an unlimited one, so with 216.3 s a batch and 163.8 s of "
            "training the rollout share of a sync step is at least 216.3 / (216.3 + "
            "163.8) = 57% and reaches 82% only if 64 GPUs take 3.5x the unlimited "
            "pool's time for 64 trajectories (one a GPU), or training to take ~50 s "
            "instead of 163.8 s. The paper's 82% is likely measured in another setting "
            "(batch, length limit, or the trainer's GPUs); the world keeps the two §3.1 "
            "anchors."
        )
    span, train = unlimited_pool(cfg.with_updates(**{"cluster.model": "qwen3-8b"}))
    rows.append(
        _row(
            "§3.1 unlimited pool: batch makespan (Qwen3-8B, mean of 8 seeds)",
            "216.3 s",
            f"{span:.0f} s",
            "+-10%",
            abs(span / 216.3 - 1) <= 0.10,
            "pearl.sim.calibration.critical_path",
        )
    )
    rows.append(
        _row(
            "§3.1 training step of that batch (16 GPUs)",
            "163.8 s",
            f"{train:.0f} s",
            "+-10%",
            abs(train / 163.8 - 1) <= 0.10,
            "pearl.sim.bound.train_step_s",
        )
    )
    # §3.2 colocated prefill share (Qwen3-30B-A3B)
    # on the configured card, engine and workload (the defaults: the paper's setting)
    mix_spec = WorkloadSpec.model_validate(
        {**cfg.rollout.workload, "context_cap_tokens": cfg.rollout.max_context_tokens}
    )
    mixes = [
        batch_mix(
            model="qwen3-30b-a3b",
            gpu=cfg.cluster.gpu,
            tp=cfg.cluster.gpus_per_worker,
            num_workers=8,
            batch=cfg.rollout.batch_size,
            router="sticky",
            seed=cfg.seed + s,
            spec=mix_spec,
            config=cfg.engine.worker_config(),
        )
        for s in range(3)
    ]
    tok = statistics.fmean(m.prefill_token_share for m in mixes)
    tim = statistics.fmean(m.prefill_time_share for m in mixes)
    hit = statistics.fmean(m.hit_rate_tokens for m in mixes)
    rows.append(
        _row(
            "§3.2 prefill share of tokens (Qwen3-30B-A3B colocated, 8 GPUs, batch "
            f"{cfg.rollout.batch_size})",
            "96.68%",
            f"{tok:.2%} (prefix hit rate {hit:.2f})",
            "+-2 points",
            abs(tok - 0.9668) <= 0.02,
            "pearl.sim.calibration.batch_mix(router='sticky')",
        )
    )
    rows.append(
        _row(
            "§3.2 prefill share of time",
            "26.48%",
            f"{tim:.2%}",
            "+-6 points",
            abs(tim - 0.2648) <= 0.06,
            "pearl.sim.calibration.batch_mix(router='sticky')",
        )
    )
    # §3.3 PD crossover on 8 GPUs
    for model in models:
        pts = {b: pd_point(cfg, model, b, seeds=seeds, progress=progress) for b in batches}
        for b, p in pts.items():
            notes.append(
                f"{model} batch {b} on {PD_GPUS} GPUs (mean of {len(seeds)} seeds): "
                f"colocated {_secs(p.colocated_s)}; "
                + ", ".join(f"{r[0]}P{r[1]}D {_secs(s)}" for r, s in p.disaggregated_s.items())
            )
        lo, hi = min(batches), max(batches)
        how = (
            f"pearl simulate --static-gpus {PD_GPUS} --batch B --set {SYNC} --policies "
            "fixed:colocated,fixed:disagg:P:D,..."
        )
        ends = [(lo, 0.097, "+9.7% (disaggregation wins)")]
        if hi != lo:
            ends.append((hi, -0.061, "-6.1% (colocation wins)"))
        for b, paper_gain, paper in ends:
            g, per_seed = pts[b].disagg_gain, pts[b].seed_gains
            ok, off = crossover_verdict(g, paper_gain, seed_gains=per_seed)
            spread = (
                f"; seeds {min(per_seed):+.1%} to {max(per_seed):+.1%}" if len(per_seed) > 1 else ""
            )
            sim = f"{g:+.1%} ({pts[b].best_ratio[0]}P{pts[b].best_ratio[1]}D{spread}){off}"
            rows.append(
                _row(
                    f"§3.3 best disaggregated vs colocated, batch {b} ({model})",
                    paper,
                    sim,
                    "sign, and magnitude +-5 points",
                    ok,
                    how,
                )
            )
        if 48 in pts and 64 in pts:
            r48, r64 = pts[48].best_ratio, pts[64].best_ratio
            rows.append(
                _row(
                    f"§3.3 best ratio, batch 48 -> 64 ({model})",
                    "4P4D -> 5P3D (more prefill)",
                    f"{r48[0]}P{r48[1]}D -> {r64[0]}P{r64[1]}D",
                    "direction: prefill share not lower",
                    r64[0] >= r48[0],
                    how,
                )
            )
    if any("no batch finished" in str(v) for row in rows for v in row.values()) or any(
        "no batch finished" in n for n in notes
    ):
        notes.append(
            f"Some runs finished no batch in their {cfg.trace.duration_s:.0f} simulated "
            "seconds (shown as 'no batch finished': slower than the run is long, they lose "
            "every comparison); a longer --duration measures them."
        )
    notes.append(
        "Runs are one batch at a time (rollout.max_staleness 0) on static pools; makespans "
        "are means over the batches of one simulated hour, and the §3.1 cuts and §3.3 points "
        f"means over seeds {', '.join(f'+{s}' for s in seeds)} of the config's seed "
        "(§3.3: each seed's own best split in the range; a sign the seeds disagree on is a "
        "MISS); the §1 share is one seed."
    )
    return ExperimentResult(
        name="facts",
        title="The paper's §3 measurements of the real world, in the simulated world",
        columns=["fact", "paper", "simulated", "tolerance", "verdict", "reproduce"],
        rows=rows,
        notes=notes,
    )
