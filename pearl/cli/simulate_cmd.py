"""`pearl simulate`: policies side by side on a simulated trace."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pearl.cli import sim_config as opts
from pearl.cli.output import (
    console,
    elapsed,
    err_console,
    guarded,
    interrupted,
    output_dir,
    print_json,
    run_store_at,
)
from pearl.errors import InputError

if TYPE_CHECKING:
    from pearl.sim.compare import SimulationResult
    from pearl.sim.config import SimConfig
    from pearl.sim.run_store import RunStore


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
    show: bool = False,
) -> Any:
    if trace is not None and static_gpus is not None:
        raise InputError(
            "<argument>",
            "give --trace or --static-gpus, not both (a static pool has no trace)",
            field="--static-gpus",
        )
    names = None
    if policies is not None:
        names = [p.strip() for p in policies.split(",") if p.strip()]
        if not names:
            raise InputError("<argument>", "no policy named", field="--policies")
    updates = opts.given(
        ("cluster.model", model),
        ("cluster.gpu", gpu),
        ("trace.trace", trace),
        ("policies", names),
        ("rollout.batch_size", batch),
        ("rollout.max_context_tokens", max_len),
        ("seed", seed),
        ("trace.static_gpus", static_gpus),
        ("trace.duration_s", duration),
    )
    return opts.build_sim_config(config, updates, sets, show=show)


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
        "GPU-h",
    ):
        table.add_column(col, justify="right" if col != "policy" else "left")
    for name, s in doc["policies"].items():
        frac = s.get("fraction_of_bound")
        table.add_row(
            name,
            f"{s['trajs_per_hour']:.1f}",
            f"{s['tokens_per_s']:.0f}",
            f"{s['train_steps_per_hour']:.2f}",
            "-" if frac is None else f"{100 * frac:.0f}%",
            f"{s['mean_makespan_s']:.0f}" if s["mean_makespan_s"] is not None else "-",
            f"{s['gpu_hours']['total']:.1f}",
        )
    console.print(table)
    _print_reconfigurations(doc["policies"])
    idle = [name for name, s in doc["policies"].items() if not s["rollout_steps"]]
    bare = [name for name in idle if not doc["policies"][name]["gpu_hours"]["total"]]
    slow = [name for name in idle if name not in bare]
    if bare:
        console.print(f"{', '.join(bare)}: held no rollout GPU (an empty fixed pool?)")
    if slow:
        console.print(
            f"{', '.join(slow)}: no rollout batch finished in {doc['duration_s']:g} simulated "
            "s (a longer --duration measures it)"
        )
    if bound:
        console.print(
            f"bound: {bound['trajs_per_hour']:.1f} traj/h "
            f"({bound['best_static']}, limited by {bound['limited_by']})"
        )


def _print_reconfigurations(policies: dict[str, Any]) -> None:
    """One line per policy under the table (a column wraps into a tower at 80 characters)."""
    lines = []
    for name, s in policies.items():
        counts = ", ".join(f"{k} {v}" for k, v in s["reconfigurations"].items() if v)
        if counts:
            lines.append(f"  {name}: {counts}")
    if lines:
        from pearl.report.run_data import RECONFIGURATIONS_MEANING

        console.print(
            f"reconfigurations ({RECONFIGURATIONS_MEANING}):",
            highlight=False,
            soft_wrap=True,
        )
        for line in lines:
            console.print(line, highlight=False, soft_wrap=True)


def _parse_seeds(raw: str) -> list[int]:
    """`--seeds 0,1,2,3`: distinct non-negative integers, in the order given."""
    seeds: list[int] = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise InputError(
                "<argument>", f"not an integer seed: {part!r}", field="--seeds"
            ) from None
        if value < 0:
            raise InputError("<argument>", f"seeds must be >= 0, got {value}", field="--seeds")
        if value not in seeds:
            seeds.append(value)
    if not seeds:
        raise InputError("<argument>", "no seed given", field="--seeds")
    return seeds


def _kept_seed(
    store: RunStore, cfg: SimConfig, folder: Path, *, with_bound: bool
) -> SimulationResult | None:
    """A seed's result an earlier `--seeds ... --out` run finished: in the run store (same
    config and code) and its folder whole (summary.json written, config.yaml this
    config's); None otherwise, and the seed is simulated again."""
    from pearl.sim.config import dump_config

    cfg_file = folder / "config.yaml"
    if not (folder / "summary.json").is_file() or not cfg_file.is_file():
        return None
    if cfg_file.read_text() != dump_config(cfg):
        return None
    return store.get(cfg, with_bound=with_bound)


def _seed_result(
    cfg: SimConfig,
    folder: Path | None,
    store: RunStore | None,
    simulate: Callable[[SimConfig], SimulationResult],
    *,
    with_bound: bool,
) -> tuple[SimulationResult, bool]:
    """One run of `pearl simulate` (a seed's, or the only one): read back from `store` if an
    earlier run finished it, else simulated, written to `folder` and kept in `store`.
    Returns the result and whether it was read back."""
    if store is not None and folder is not None:
        kept = _kept_seed(store, cfg, folder, with_bound=with_bound)
        if kept is not None:
            return kept, True
    res = simulate(cfg)
    if folder is not None:
        res.write(folder)
    if store is not None:
        store.put(res, with_bound=with_bound)
    return res, False


def _print_seeds_table(doc: dict[str, Any]) -> None:
    seeds = doc["seeds"]
    table = Table(title=f"{doc['setting']}, seeds {', '.join(map(str, seeds))}")
    for col in ("policy", "traj/h mean", "min", "max", "per seed", "of bound"):
        table.add_column(col, justify="right" if col != "policy" else "left")
    for name, s in doc["policies"].items():
        frac = s["fraction_of_bound_mean"]
        table.add_row(
            name,
            f"{s['mean']:.1f}",
            f"{s['min']:.1f}",
            f"{s['max']:.1f}",
            " / ".join(f"{v:.1f}" for v in s["trajs_per_hour"]),
            "-" if frac is None else f"{100 * frac:.0f}%",
        )
    console.print(table)
    names = list(doc["policies"])
    for name, cmp in doc["policies"][names[0]].get("against", {}).items():
        ratio = cmp["ratio_of_means"]
        console.print(
            f"{names[0]} / {name}: {'-' if ratio is None else f'{ratio:.3f}'} on the means, "
            f"ahead on {cmp['seeds_ahead']} of {len(seeds)} seeds"
        )


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @guarded
    def simulate(
        model: str = typer.Option(
            None,
            "--model",
            help="qwen3-8b, qwen3-30b-a3b (another bundled model), or an HF config.json of your own.",
        ),
        gpu: str = typer.Option(
            None, "--gpu", help="GPU type (pearl/specs/data/gpus.yaml) or a GPU file of your own."
        ),
        trace: str = typer.Option(None, "--trace", help="seg1, seg2, seg3 or a trace file."),
        policies: str = typer.Option(
            None, "--policies", help="Comma-separated: pearl,rlboost+,roll,fixed:colocated,..."
        ),
        batch: int = typer.Option(None, "--batch", help="Trajectories per rollout step (64)."),
        max_len: int = typer.Option(None, "--max-len", help="Trajectory length limit (32768)."),
        seed: int = typer.Option(None, "--seed", help="Seed of every random draw (0)."),
        seeds: str = typer.Option(
            None,
            "--seeds",
            help="Comma-separated seeds, e.g. 0,1,2,3: one run per seed, and each policy's "
            "mean, min and max traj/h (replaces --seed; with --out, one folder per seed, "
            "and a rerun reads the finished seeds back).",
        ),
        static_gpus: int = typer.Option(
            None, "--static-gpus", help="Constant rollout budget: no trace, no borrowing."
        ),
        duration: float = typer.Option(
            None, "--duration", help="Simulated seconds (default: the whole trace)."
        ),
        config: Path = opts.config_option("YAML config (see docs/simulator.md)."),
        out: Path = typer.Option(
            None,
            "--out",
            help="Write one run directory per policy (the format of pearl run, with its report), summary.json and config.yaml.",
        ),
        no_bound: bool = typer.Option(False, "--no-bound", help="Skip the upper bound."),
        jobs: int = typer.Option(
            0, "--jobs", min=0, help="Worker processes for independent runs (0: one per CPU)."
        ),
        sets: list[str] = opts.set_option(
            "rollout.max_staleness=0 or rollout.workload.prefix_reuse=context"
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
        show_config: bool = opts.show_config_option(),
    ) -> None:
        """Simulate policies on a GPU-availability trace and compare their throughput."""
        from pearl.sim.compare import default_jobs, run_simulation
        from pearl.sim.policy_run import SETTING_SEP

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
            show=show_config,
        )
        seed_list = _parse_seeds(seeds) if seeds is not None else None
        if seed_list is not None and seed is not None:
            raise InputError("<argument>", "give --seed or --seeds, not both", field="--seeds")
        output_dir(out)
        # --seeds --out DIR: each finished seed is kept (DIR/runs), and a rerun reads it back
        store = run_store_at(out) if seed_list is not None else None
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as progress:
            tasks: dict[str, Any] = {}
            prefix = [""]

            def on_progress(name: str, now_s: float, total_s: float) -> None:
                # one setting a seed: the label's setting part says nothing the table won't
                label = prefix[0] + name.rpartition(SETTING_SEP)[2]
                if label not in tasks:
                    tasks[label] = progress.add_task(label, total=total_s)
                progress.update(tasks[label], completed=min(now_s, total_s))

            def run_one(run_cfg: SimConfig) -> SimulationResult:
                return run_simulation(
                    run_cfg,
                    progress=on_progress,
                    with_bound=not no_bound,
                    jobs=jobs or default_jobs(),
                )

            results = []
            written: list[str] = []
            started = time.monotonic()
            try:
                for s in seed_list or [None]:
                    run_cfg = cfg if s is None else cfg.with_updates(seed=s)
                    prefix[0] = "" if s is None else f"seed {s}: "
                    folder = out if out is None or s is None else out / f"seed-{s}"
                    res, read_back = _seed_result(
                        run_cfg, folder, store, run_one, with_bound=not no_bound
                    )
                    if folder is not None and not read_back:
                        written.append(str(folder))
                    results.append(res)
                    if s is not None:  # a line a seed: all a log that is not a terminal shows
                        kept = " (read back from an earlier run)" if read_back else ""
                        progress.console.print(
                            f"[{elapsed(started)}] done: seed {s}{kept}", highlight=False
                        )
            except KeyboardInterrupt:
                done = f"; the finished seeds are written: {', '.join(written)}" if written else ""
                if store is not None:
                    done += " (the same command again goes on from them)"
                interrupted(progress, done)
        if seed_list is None:
            doc, show, where = results[0].to_json(), _print_table, f"{out}"
        else:
            from pearl.sim.over_seeds import seeds_summary

            doc = seeds_summary([r.to_json() for r in results], seed_list)
            show, where = _print_seeds_table, f"{out} (one folder per seed)"
        if as_json:
            print_json(doc)
        else:
            show(doc)
            if out is not None:
                from pearl.sim.telemetry_out import safe_name

                dirs = ", ".join(safe_name(p) for p in doc["policies"])
                console.print(
                    f"outputs written to {where}: a run directory per policy ({dirs}), "
                    "each with its report.md; `pearl report` rebuilds one",
                    highlight=False,
                    soft_wrap=True,
                )
