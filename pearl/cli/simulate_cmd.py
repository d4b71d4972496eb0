"""`pearl simulate`: policies side by side on a simulated trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pearl.cli.output import console, err_console, guarded, print_json
from pearl.errors import InputError


def _build_config(
    config: Path | None,
    *,
    model: str | None,
    gpu: str | None,
    trace: str | None,
    policies: str | None,
    batch: int | None,
    max_len: int | None,
    seed: int | None,
    static_gpus: int | None,
    duration: float | None,
    sets: list[str] | None = None,
) -> Any:
    from pearl.sim.config import SimConfig, load_config

    cfg = load_config(config) if config is not None else SimConfig()
    updates: dict[str, Any] = {}
    if model is not None:
        updates["cluster.model"] = model
    if gpu is not None:
        updates["cluster.gpu"] = gpu
    if trace is not None:
        updates["trace.trace"] = trace
    if policies is not None:
        names = [p.strip() for p in policies.split(",") if p.strip()]
        if not names:
            raise InputError("<argument>", "no policy named", field="--policies")
        updates["policies"] = names
    if batch is not None:
        updates["rollout.batch_size"] = batch
    if max_len is not None:
        updates["rollout.max_context_tokens"] = max_len
    if seed is not None:
        updates["seed"] = seed
    if static_gpus is not None:
        updates["trace.static_gpus"] = static_gpus
    if duration is not None:
        updates["trace.duration_s"] = duration
    updates.update(_parse_sets(sets or []))
    from pydantic import ValidationError

    from pearl.world.sections import renamed_key

    for key in updates:
        if (new := renamed_key(key)) is not None:
            raise InputError("<argument>", f"{key} was renamed: use {new}", field="--set")

    try:
        return cfg.with_updates(**updates)
    except KeyError as err:
        raise InputError(
            "<argument>", f"no config section {err.args[0]!r}", field="--set"
        ) from None
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InputError("<argument>", first["msg"], field=field) from None


def _parse_sets(sets: list[str]) -> dict[str, Any]:
    """`--set section.field=value` pairs; the value is read as YAML (numbers, lists...)."""
    import yaml

    out: dict[str, Any] = {}
    for item in sets:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise InputError("<argument>", f"expected KEY=VALUE, got {item!r}", field="--set")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise InputError(
                "<argument>", f"value of {key!r} is not valid YAML", field="--set"
            ) from None
    return out


def _print_table(doc: dict[str, Any]) -> None:
    bound = doc.get("bound") or {}
    title = f"{doc['setting']}"
    table = Table(title=title)
    for col in (
        "policy",
        "traj/h",
        "tok/s",
        "steps/h",
        "of bound",
        "makespan s",
        "reconfigs",
        "GPU-h",
    ):
        table.add_column(col, justify="right" if col != "policy" else "left")
    for name, s in doc["policies"].items():
        reconf = ", ".join(f"{k} {v}" for k, v in s["reconfigurations"].items() if v)
        frac = s.get("fraction_of_bound")
        table.add_row(
            name,
            f"{s['trajs_per_hour']:.1f}",
            f"{s['tokens_per_s']:.0f}",
            f"{s['train_steps_per_hour']:.2f}",
            "-" if frac is None else f"{100 * frac:.0f}%",
            f"{s['mean_makespan_s']:.0f}" if s["mean_makespan_s"] is not None else "-",
            reconf or "-",
            f"{s['gpu_hours']['total']:.1f}",
        )
    console.print(table)
    if bound:
        console.print(
            f"bound: {bound['trajs_per_hour']:.1f} traj/h "
            f"({bound['best_static']}, limited by {bound['limited_by']})"
        )


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @guarded
    def simulate(
        model: str = typer.Option(None, "--model", help="qwen3-8b or qwen3-30b-a3b."),
        gpu: str = typer.Option(None, "--gpu", help="GPU type (see pearl/specs/data/gpus.yaml)."),
        trace: str = typer.Option(None, "--trace", help="seg1, seg2, seg3 or a trace file."),
        policies: str = typer.Option(
            None, "--policies", help="Comma-separated: pearl,rlboost+,roll,fixed:colocated,..."
        ),
        batch: int = typer.Option(None, "--batch", help="Trajectories per rollout step (64)."),
        max_len: int = typer.Option(None, "--max-len", help="Trajectory length limit (32768)."),
        seed: int = typer.Option(None, "--seed", help="Seed of every random draw (0)."),
        static_gpus: int = typer.Option(
            None, "--static-gpus", help="Constant rollout budget: no trace, no borrowing."
        ),
        duration: float = typer.Option(
            None, "--duration", help="Simulated seconds (default: the whole trace)."
        ),
        config: Path = typer.Option(None, "--config", help="YAML config (see docs/simulator.md)."),
        out: Path = typer.Option(
            None,
            "--out",
            help="Write one run directory per policy (the format of pearl run, with its report), summary.json and config.yaml.",
        ),
        no_bound: bool = typer.Option(False, "--no-bound", help="Skip the upper bound."),
        jobs: int = typer.Option(
            0, "--jobs", min=0, help="Worker processes for independent runs (0: one per CPU)."
        ),
        sets: list[str] = typer.Option(  # noqa: B008
            None,
            "--set",
            help="Override any config field: section.field=value (repeatable), e.g. "
            "rollout.max_staleness=0 or rollout.workload.prefix_reuse=context.",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """Simulate policies on a GPU-availability trace and compare their throughput."""
        from pearl.sim.compare import default_jobs, run_simulation

        cfg = _build_config(
            config,
            model=model,
            gpu=gpu,
            trace=trace,
            policies=policies,
            batch=batch,
            max_len=max_len,
            seed=seed,
            static_gpus=static_gpus,
            duration=duration,
            sets=sets,
        )
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as progress:
            tasks: dict[str, Any] = {}

            def on_progress(name: str, now_s: float, total_s: float) -> None:
                if name not in tasks:
                    tasks[name] = progress.add_task(name, total=total_s)
                progress.update(tasks[name], completed=min(now_s, total_s))

            result = run_simulation(
                cfg, progress=on_progress, with_bound=not no_bound, jobs=jobs or default_jobs()
            )
        if out is not None:
            result.write(out)
        doc = result.to_json()
        if as_json:
            print_json(doc)
        else:
            _print_table(doc)
            if out is not None:
                console.print(f"outputs written to {out}")
