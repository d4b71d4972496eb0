"""`pearl validate`: the decision engine's predicted makespans against the simulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pearl.cli import sim_config as opts
from pearl.cli.output import (
    console,
    err_console,
    guarded,
    interrupted,
    kept_message,
    output_dir,
    print_json,
    run_store_at,
)
from pearl.errors import InputError


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(
            "<argument>", f"'{text}' is not a list of integers", field=option
        ) from None
    if not values or min(values) < 1:
        raise InputError("<argument>", "needs integers >= 1", field=option)
    return values


def register(app: typer.Typer) -> None:
    @app.command("validate")
    @guarded
    def validate(
        model: str = typer.Option(
            None,
            "--model",
            help="qwen3-8b, qwen3-30b-a3b or an HF config.json (the config's; qwen3-8b).",
        ),
        gpu: str = typer.Option(
            None, "--gpu", help="GPU type or a GPU file (the config's; h100-sxm)."
        ),
        budgets: str = typer.Option("4,8,12", "--budgets", help="GPU budgets of the grid."),
        batches: str = typer.Option("32,64", "--batches", help="Batch sizes of the grid."),
        steps: int = typer.Option(
            6, "--steps", min=1, help="Rollout steps per grid point (more: less noise, slower)."
        ),
        profile_steps: int = typer.Option(
            6,
            "--profile-steps",
            min=1,
            help="Rollout steps of each of the two runs the engine's profile is learned from.",
        ),
        seed: int = typer.Option(
            None, "--seed", help="Seed of every random draw (the config's; 0 by default)."
        ),
        config: Path = opts.config_option(
            "YAML config the grid's runs start from (see docs/simulator.md); the grid sets "
            "the budget, the batch and the configuration itself."
        ),
        sets: list[str] = opts.set_option("rollout.workload.prefix_reuse=turn"),
        out: Path = typer.Option(
            None,
            "--out",
            help="Write validate.json and config.yaml there, and keep each finished grid "
            "point in DIR/runs: the same command again goes on from them.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
        show_config: bool = opts.show_config_option(),
    ) -> None:
        """Predicted vs simulated makespan over a grid; is the chosen config the best?"""
        from pearl.sim import run_store
        from pearl.sim.config import dump_config
        from pearl.sim.validate import validate as run_validation

        updates = opts.given(("cluster.model", model), ("cluster.gpu", gpu), ("seed", seed))
        cfg = opts.build_sim_config(config, updates, sets, show=show_config)
        grid = {"budgets": _ints(budgets, "--budgets"), "batches": _ints(batches, "--batches")}
        output_dir(out)
        store = run_store_at(out)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as bar:
            task: dict[str, Any] = {}
            where = {"done": 0.0, "total": 0.0}

            def on_progress(name: str, done: float, total: float) -> None:
                if "id" not in task:
                    task["id"] = bar.add_task(name, total=total)
                bar.update(task["id"], completed=done)
                where.update(done=done, total=total)

            try:
                with run_store.use(store):
                    result = run_validation(
                        cfg,
                        num_steps=steps,
                        profile_steps=profile_steps,
                        progress=on_progress,
                        **grid,
                    )
            except KeyboardInterrupt:
                interrupted(
                    bar,
                    f" after {where['done']:.0f} of {where['total']:.0f} grid points; "
                    f"{kept_message(store)}",
                )
        doc: dict[str, Any] = result.to_json()
        if out is not None:
            (out / "validate.json").write_text(json.dumps(doc, indent=2) + "\n")
            (out / "config.yaml").write_text(dump_config(cfg))
            err_console.print(
                f"written: {out / 'validate.json'}, {out / 'config.yaml'}", highlight=False
            )
        if as_json:
            print_json(doc)
            return
        table = Table("GPUs", "batch", "config", "simulated s", "predicted s", "error")
        for p in doc["points"]:
            table.add_row(
                str(p["num_gpus"]),
                str(p["batch_size"]),
                p["config"],
                f"{p['simulated_s']:.1f}",
                f"{p['predicted_s']:.1f}",
                f"{100 * p['rel_error']:.1f}%",
            )
        console.print(table)
        console.print(
            f"median error {100 * doc['median_rel_error']:.1f}%, p90 {100 * doc['p90_rel_error']:.1f}%;"
            f" chosen within 1% of best in {100 * (doc['choice_within_1pct'] or 0):.0f}% of cases,"
            f" within 1% or the simulation's step-to-step noise in"
            f" {100 * (doc['choice_within_1pct_or_noise'] or 0):.0f}%"
        )
