"""`pearl plan`: the minimal-change plan from a state file to a PD target (paper §4.4.2)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from pearl.cli.output import console, guarded, print_json
from pearl.control.plan import PDConfig, PlanError, apply, config_of, plan_transition
from pearl.control.state import ClusterState, StateError, Zone
from pearl.errors import InputError, read_json


def load_state(path: Path) -> ClusterState:
    """Read and validate a cluster-state JSON file; errors name the file, JSON path and field."""
    doc = read_json(path)
    try:
        return ClusterState.from_json(doc)
    except StateError as err:
        raise InputError(
            str(path), err.message, location=err.path or None, field=err.field
        ) from None


def _parse_target(text: str) -> PDConfig:
    try:
        return PDConfig.parse(text)
    except ValueError as err:
        raise InputError("<argument>", str(err), field="--to") from None


def register(app: typer.Typer) -> None:
    @app.command("plan")
    @guarded
    def plan(
        from_: Path = typer.Option(
            ..., "--from", help="Cluster-state JSON file (see examples/state.json)."
        ),
        to: str = typer.Option(..., "--to", help="Target: colocated:N or disaggregated:P:D."),
        zones: str = typer.Option(
            "dedicated,preemptible,overlap",
            "--zones",
            help="Comma-separated zones whose GPUs the plan may use.",
        ),
        exclude: str = typer.Option(
            "",
            "--exclude",
            help="Comma-separated GPU ids that may not be used (e.g. being reclaimed).",
        ),
        gpus_per_worker: int = typer.Option(
            1, "--gpus-per-worker", min=1, help="GPUs per new worker (tensor parallel size)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """Print the minimal-change plan from a state to a PD target."""
        state = load_state(from_)
        target = _parse_target(to)
        try:
            wanted = [Zone(z.strip()) for z in zones.split(",") if z.strip()]
        except ValueError:
            raise InputError(
                "<argument>",
                f"unknown zone in '{zones}' (use dedicated, preemptible, overlap)",
                field="--zones",
            ) from None
        excluded = {g.strip() for g in exclude.split(",") if g.strip()}
        unknown = sorted(excluded - {g.gpu_id for g in state.gpus})
        if unknown:
            raise InputError(
                "<argument>",
                f"no GPU {', '.join(unknown)} in {from_} (a typo would leave it usable)",
                field="--exclude",
            )
        usable = [g for g in state.gpus_in(*wanted) if g not in excluded]
        try:
            plan = plan_transition(state, target, usable, gpus_per_worker=gpus_per_worker)
        except PlanError as err:
            raise InputError(str(from_), str(err), field="--to") from None
        after = apply(state, plan)
        current = config_of(state)
        if as_json:
            doc = plan.to_json()
            doc["current"] = None if current is None else str(current)
            doc["usable_gpus"] = len(usable)
            doc["result"] = after.to_json()
            print_json(doc)
            return
        console.print(
            f"current: [bold]{current or 'none'}[/bold]  ->  target: [bold]{target}[/bold]  ({plan.num_ops} operation(s), {len(usable)} usable GPU(s))"
        )
        table = Table("#", "op", "worker", "detail")
        for i, op in enumerate(plan.ops, 1):
            d = op.to_json()
            detail = f"{d.get('role', '')} {' '.join(d.get('gpu_ids', []))}".strip()
            table.add_row(str(i), d["op"], d["worker_id"], detail)
        console.print(table)
