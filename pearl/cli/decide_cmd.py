"""`pearl decide`: predicted makespan of every PD config at a GPU budget, and the choice
the decision engine makes (paper §4.3)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from pearl.cli.output import console, guarded, print_json
from pearl.cli.profile_cmd import load_profile
from pearl.control.decision import MODES, Candidate, Decision, DecisionConfig, DecisionEngine
from pearl.control.plan import PDConfig
from pearl.errors import InputError

# (column, breakdown keys tried in order): colocated and disaggregated name their paths apart.
_COLUMNS = (
    ("tput bound", ("throughput_bound_s",)),
    ("crit path", ("critical_path_s",)),
    ("prefill", ("prefill_path_s", "prefill_s")),
    ("decode", ("decode_path_s", "decode_s")),
)


def _table(decision: Decision, top: int) -> Table:
    cands = list(decision.candidates)
    if top > 0 and len(cands) > top:
        best = sorted(
            (c for c in cands if c.prediction.feasible), key=lambda c: c.prediction.makespan_s
        )[:top]
        keep = {c.config for c in best} | {decision.chosen}
        if decision.current is not None:
            keep.add(decision.current)
        cands = [c for c in cands if c.config in keep]
    table = Table(title=f"candidates, seconds ({len(cands)} of {len(decision.candidates)} shown)")
    table.add_column("config", no_wrap=True)
    table.add_column("makespan", justify="right", min_width=8)
    for name, _ in _COLUMNS:
        table.add_column(name, justify="right", min_width=6)
    table.add_column("ok")
    reasons = any(not c.prediction.feasible for c in cands)
    if reasons:
        table.add_column("reason")
    for c in cands:
        row = _row(c, decision)
        table.add_row(*(row if reasons else row[:-1]))
    return table


def _row(c: Candidate, d: Decision) -> list[str]:
    b = c.prediction.breakdown
    mark = " *" if c.config == d.chosen else (" (cur)" if c.config == d.current else "")
    cells = []
    for _, keys in _COLUMNS:
        key = next((k for k in keys if k in b), None)
        cells.append("-" if key is None else f"{b[key]:.1f}")
    return [
        f"{c.config}{mark}",
        f"{c.prediction.makespan_s:.1f}",
        *cells,
        "yes" if c.prediction.feasible else "no",
        c.prediction.reason,
    ]


def _env_s(decision: Decision) -> float:
    return decision.candidates[0].prediction.breakdown.get("env_s", 0.0)


def register(app: typer.Typer) -> None:
    @app.command("decide")
    @guarded
    def decide(
        profile_path: Path = typer.Option(
            ...,
            "--profile",
            help="Profile JSON (from `pearl profile fit`, e.g. examples/profile.json).",
        ),
        gpus: int = typer.Option(..., "--gpus", help="GPU budget for rollout workers."),
        current: str | None = typer.Option(
            None, "--current", help="Current config: colocated:N or disaggregated:P:D."
        ),
        batch: int | None = typer.Option(
            None, "--batch", help="Trajectories per rollout batch (default: the profile's)."
        ),
        gpus_per_worker: int = typer.Option(
            1, "--gpus-per-worker", help="GPUs per worker (TP size)."
        ),
        modes: str = typer.Option(
            ",".join(MODES), "--modes", help="Comma-separated modes to consider."
        ),
        mode_threshold: float = typer.Option(
            0.10, "--mode-threshold", help="Relative saving needed to change mode."
        ),
        ratio_threshold: float = typer.Option(
            0.03, "--ratio-threshold", help="Relative saving needed to change the P:D ratio."
        ),
        top: int = typer.Option(
            32,
            "--top",
            help="Table: show only the best N feasible (+ chosen, current); 0 = all (a large "
            "budget has a row per split: 4,096 GPUs, 4,096 rows). --json has every candidate.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """Choose a PD configuration for a GPU budget and show every candidate's prediction."""
        profile = load_profile(profile_path)
        if gpus < 1:
            raise InputError(
                "<argument>", f"the GPU budget must be >= 1, got {gpus}", field="--gpus"
            )
        if gpus_per_worker < 1:
            raise InputError(
                "<argument>", f"must be >= 1, got {gpus_per_worker}", field="--gpus-per-worker"
            )
        num_workers = gpus // gpus_per_worker
        if num_workers < 1:
            raise InputError(
                "<argument>",
                f"{gpus} GPU(s) cannot hold one worker of {gpus_per_worker}",
                field="--gpus",
            )
        b = round(profile.batch_size) if batch is None else batch
        if b < 1:
            raise InputError(
                "<argument>", f"the batch must be >= 1 trajectory, got {b}", field="--batch"
            )
        cur = None
        if current is not None:
            try:
                cur = PDConfig.parse(current)
            except ValueError as err:
                raise InputError("<argument>", str(err), field="--current") from None
        wanted = tuple(m.strip() for m in modes.split(",") if m.strip())
        if not wanted or set(wanted) - set(MODES):
            raise InputError(
                "<argument>", f"use modes from {', '.join(MODES)}, got '{modes}'", field="--modes"
            )
        try:
            cfg = DecisionConfig(mode_threshold, ratio_threshold, gpus_per_worker)
        except ValueError as err:
            raise InputError("<argument>", str(err), field="--mode-threshold") from None
        decision = DecisionEngine(cfg).decide(profile, num_workers, b, cur, modes=wanted)
        if as_json:
            doc = {"gpus": gpus, "num_workers": num_workers, "batch": b, **decision.to_json()}
            print_json(doc)
            return
        console.print(_table(decision, top))
        verb = "switch to" if decision.switch else "keep"
        forced = " (forced)" if decision.forced else ""
        status = "" if decision.feasible else " [red]no feasible configuration[/red]"
        console.print(
            f"[bold]{verb} {decision.chosen}[/bold]{forced}: predicted makespan "
            f"{decision.predicted_makespan_s:.1f} s for {b} trajectories on {num_workers} "
            f"worker(s){status}\n{decision.reason}\n"
            f"(environment time on the critical path: {_env_s(decision):.1f} s in every candidate)"
        )
