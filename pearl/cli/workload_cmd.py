"""`pearl profile workload`: turn telemetry -> the simulated world's `rollout.workload`.

So a user can ask the simulator whether PEARL pays on their own agent: fit the workload
from a run's telemetry, then `pearl simulate --config FITTED.yaml` at the scale they plan.
The fit is `pearl.sim.workload_fit`; this module reads the files and prints.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.table import Table

from pearl.cli.output import console, err_console, guarded, print_json
from pearl.cli.telemetry_input import read_telemetry, telemetry_path
from pearl.control.telemetry import TurnRecord
from pearl.errors import InputError, read_text
from pearl.sim.workload_fit import WorkloadFit, WorkloadFitError, fit_workload


def run_dir_limits(run_dir: Path) -> tuple[int | None, int | None]:
    """The length limit and turn cap a run directory's config.yaml ran with: a `pearl run`
    config (its environment's `max_turns`) or a `pearl simulate --out` one (its workload's);
    (None, None) without a config.yaml."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None, None
    try:
        doc = yaml.safe_load(read_text(path))
    except yaml.YAMLError:
        raise InputError(str(path), "not valid YAML") from None
    if isinstance(doc, dict) and "env" in doc:
        from pearl.runtime.control_setup import env_max_turns
        from pearl.runtime.run_config import load_run_config

        run = load_run_config(path)  # checks the environment's name and kwargs
        return run.rollout.max_context_tokens, env_max_turns(run)
    from pearl.sim.config import load_config
    from pearl.specs.workload import workload_from_dict

    sim = load_config(path)
    spec = workload_from_dict(
        sim.rollout.workload, source=str(path), context_cap_tokens=sim.rollout.max_context_tokens
    )
    return sim.rollout.max_context_tokens, spec.max_turns


def parse_steps(text: str) -> tuple[int | None, int | None]:
    """`--steps`: "N" (one rollout step), "FIRST:LAST" (inclusive), "FIRST:" or ":LAST"."""
    lo_text, sep, hi_text = text.partition(":")

    def end(part: str) -> int | None:
        part = part.strip()
        if not part and sep:
            return None  # an open end
        if not (part.isascii() and part.isdigit()):
            raise InputError(
                "<argument>",
                f"{text!r}: give N, FIRST:LAST, FIRST: or :LAST (rollout steps, from 0)",
                field="--steps",
            )
        return int(part)

    lo, hi = end(lo_text), end(hi_text if sep else lo_text)
    if lo is not None and hi is not None and lo > hi:
        raise InputError("<argument>", f"{text!r}: FIRST is after LAST", field="--steps")
    return lo, hi


def _select_steps(
    turns: tuple[TurnRecord, ...], steps: tuple[int | None, int | None], source: Path
) -> tuple[tuple[TurnRecord, ...], str]:
    """The turns of rollout `steps` (inclusive; None: open), and a note saying which."""
    lo, hi = steps
    present = sorted({t.step for t in turns})
    kept = tuple(t for t in turns if (lo is None or t.step >= lo) and (hi is None or t.step <= hi))
    have = f"steps {present[0]}-{present[-1]}" if present else "no step"
    if not kept:
        want = f"{'' if lo is None else lo}:{'' if hi is None else hi}"
        raise InputError(
            str(source), f"no turn in rollout steps {want} (it has {have})", field="--steps"
        )
    chosen = sorted({t.step for t in kept})
    return kept, (
        f"fitted to rollout steps {chosen[0]}-{chosen[-1]} ({len(chosen)} of the "
        f"{len(present)} steps in the file, {have})"
    )


def fit_source(
    source: Path,
    *,
    max_len: int | None = None,
    max_turns: int | None = None,
    steps: tuple[int | None, int | None] = (None, None),
) -> tuple[WorkloadFit, Path]:
    """Fit a telemetry file, or a run directory's telemetry.jsonl within its config's limits
    (`max_len` / `max_turns` win over them), on the turns of rollout `steps` (inclusive;
    None: open). Returns the fit and the telemetry file read."""
    path = telemetry_path(source)
    if source.is_dir():
        run_len, run_turns = run_dir_limits(source)
        max_len = max_len if max_len is not None else run_len
        max_turns = max_turns if max_turns is not None else run_turns
    tel = read_telemetry(path, "a workload")
    turns, note = tel.turns, None
    if steps != (None, None):
        turns, note = _select_steps(turns, steps, path)
    try:
        fit = fit_workload(turns, max_context_tokens=max_len, max_turns=max_turns)
    except WorkloadFitError as err:
        raise InputError(str(path), str(err)) from None
    if note is not None:
        fit = dataclasses.replace(fit, notes=(note, *fit.notes))
    return fit, path


def config_yaml(fit: WorkloadFit, telemetry: Path) -> str:
    """The fit as a `pearl simulate --config` file, its provenance and notes as comments."""
    n = fit.samples
    head = [
        f"# rollout.workload fitted by `pearl profile workload` from {telemetry}:",
        f"# {n['trajectories']} trajectories, {n['turns']} turns, "
        f"{n['environment_steps']} environment steps.",
        "# Use: pearl simulate --config THIS_FILE [--model M --trace T --batch B ...]",
        *(f"# note: {note}" for note in fit.notes),
    ]
    body = yaml.safe_dump(fit.config(), sort_keys=False)
    return "\n".join(head) + "\n" + body


def _table(fit: WorkloadFit) -> Table:
    table = Table(title="fitted workload (rollout.workload)")
    table.add_column("field")
    table.add_column("value", justify="right")
    table.add_row("rollout.max_context_tokens", str(fit.max_context_tokens))
    for key, value in fit.workload.items():
        if isinstance(value, dict):
            table.add_row(key, _dist(value))
        elif isinstance(value, list):
            for comp in value:
                table.add_row(
                    f"env_latency.{comp['name']}",
                    f"weight {comp['weight']:.3f}, median {comp['median_s']:.3g} s, "
                    f"p95 {comp['p95_s']:.3g} s, max {comp['max_s']:.3g} s",
                )
        else:
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    table.add_row("ended by the length limit (est.)", f"{fit.limit_ended:.0%}")
    return table


def _dist(d: dict[str, Any]) -> str:
    return (
        f"median {d['median_tokens']:.4g}, p90 {d['p90_tokens']:.4g}, "
        f"[{d['min_tokens']}, {d['max_tokens']}]"
    )


def register(profile_app: typer.Typer) -> None:
    @profile_app.command("workload")
    @guarded
    def workload(
        source: Path = typer.Argument(
            ...,
            metavar="RUN_DIR|TELEMETRY.jsonl",
            help="Telemetry JSONL (docs/telemetry.md) or a run directory holding one "
            "(pearl run's, or pearl simulate --out's: its config gives the limits).",
        ),
        max_len: int | None = typer.Option(
            None,
            "--max-len",
            help="The run's trajectory length limit, tokens (default: a run directory's "
            "config, else the longest trajectory seen).",
        ),
        max_turns: int | None = typer.Option(
            None,
            "--max-turns",
            help="The run's turn cap (default: a run directory's config, else the most seen).",
        ),
        steps: str | None = typer.Option(
            None,
            "--steps",
            metavar="FIRST:LAST",
            help="Fit only these rollout steps' trajectories (inclusive; N, FIRST:LAST, "
            "FIRST: or :LAST): an agent's trajectories change as it trains, and the latest "
            "steps are the workload to plan for.",
        ),
        out: Path | None = typer.Option(
            None, "--out", help="Write the config here (default: print it on stdout)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """Fit the simulator's workload to a run's turns: a config for `pearl simulate --config`."""
        for name, value in (("--max-len", max_len), ("--max-turns", max_turns)):
            if value is not None and value < 1:
                raise InputError("<argument>", f"must be >= 1, got {value}", field=name)
        fit, telemetry = fit_source(
            source,
            max_len=max_len,
            max_turns=max_turns,
            steps=parse_steps(steps) if steps is not None else (None, None),
        )
        text = config_yaml(fit, telemetry)
        if out is not None:
            out.write_text(text)
        if as_json:
            print_json(
                {
                    "config": fit.config(),
                    "samples": fit.samples,
                    "limit_ended": round(fit.limit_ended, 4),
                    "notes": list(fit.notes),
                }
            )
            return
        if out is None:
            print(text, end="")
            for note in fit.notes:
                err_console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
            return
        console.print(_table(fit))
        for note in fit.notes:
            console.print(f"note: {note}", highlight=False, soft_wrap=True)
        console.print(
            f"{fit.samples['trajectories']} trajectories, {fit.samples['turns']} turns; "
            f"written to {out} (pearl simulate --config {out})",
            highlight=False,
            soft_wrap=True,
        )
