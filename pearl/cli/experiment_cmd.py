"""`pearl experiment e2e|ablation|sensitivity|ratio|facts|ladder`: the paper's evaluation and its
§3 measurements of the world, simulated."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.markdown import Markdown
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pearl.cli import sim_config as opts
from pearl.cli.output import (
    console,
    elapsed,
    err_console,
    guarded,
    interrupted,
    kept_message,
    output_dir,
    print_json,
    run_store_at,
)
from pearl.errors import InputError, from_validation

NAMES = ("e2e", "ablation", "sensitivity", "ratio", "facts", "ladder")


class _SettingBars:
    """Progress of an experiment: live bars for the runs of the setting now simulated
    (labels "<setting> | <run>", `pearl.sim.policy_run.tagged`), and one line per setting
    done, which stays on screen and is all a non-terminal (a CI log) shows."""

    def __init__(self, bar: Progress, started: float, sep: str) -> None:
        self.bar = bar
        self.sep = sep
        self.started = started
        self.setting: str | None = None
        self.tasks: dict[str, Any] = {}

    def update(self, label: str, done: float, total: float) -> None:
        setting, _, run = label.rpartition(self.sep)
        if setting != self.setting:
            self.finish()
            self.setting = setting
        if run not in self.tasks:
            self.tasks[run] = self.bar.add_task(f"{setting}: {run}" if setting else run)
        self.bar.update(self.tasks[run], completed=min(done, total), total=total)

    def finish(self) -> None:
        """The current setting is done: its bars go, its line stays."""
        for task in self.tasks.values():
            self.bar.remove_task(task)
        self.tasks.clear()
        if self.setting is not None:
            self.bar.console.print(
                f"[{elapsed(self.started)}] done: {self.setting or 'runs'}", highlight=False
            )
        self.setting = None


def register(app: typer.Typer) -> None:
    @app.command("experiment")
    @guarded
    def experiment(
        name: str = typer.Argument(..., help="e2e, ablation, sensitivity, ratio, facts or ladder."),
        out: Path = typer.Option(
            None,
            "--out",
            help="Write results.md, results.json, PNGs and config.yaml (the config every "
            "run started from: rerun with --config).",
        ),
        batch: int = typer.Option(None, "--batch", help="Rollout batch size (64)."),
        seed: int = typer.Option(
            None, "--seed", help="Seed of every random draw (the config's; 0 by default)."
        ),
        duration: float = typer.Option(
            None, "--duration", help="Simulated seconds per run (default: the experiment's)."
        ),
        quick: bool = typer.Option(
            False, "--quick", help="A much smaller grid and shorter runs (smoke test, demo)."
        ),
        models: str = typer.Option(
            None,
            "--models",
            help="Comma-separated models (bundled names or HF config.json files): the rows "
            "of e2e and ladder, the §3.3 models of facts; the model of the others (one).",
        ),
        config: Path = opts.config_option(
            "YAML config every run starts from (see docs/simulator.md); what the experiment "
            "varies (model, trace, budget, policies) it sets itself."
        ),
        sets: list[str] = opts.set_option(
            "rollout.workload.prefix_reuse=turn or engine.max_batched_tokens=16384"
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
        show_config: bool = opts.show_config_option(),
    ) -> None:
        """Run one of the paper's experiments in the simulator; print a markdown table."""
        from pydantic import ValidationError

        from pearl.sim import run_store
        from pearl.sim.experiments import EXPERIMENTS, models_run, quick_kwargs
        from pearl.sim.policy_run import SETTING_SEP

        if name not in EXPERIMENTS:
            raise InputError(
                "<argument>",
                f"unknown experiment '{name}' (one of {', '.join(NAMES)})",
                field="NAME",
            )
        updates = opts.given(
            ("seed", seed),
            ("rollout.batch_size", batch if batch is not None else (16 if quick else None)),
        )
        kwargs = quick_kwargs(name) if quick else {}
        if models is not None:
            chosen = tuple(dict.fromkeys(m.strip() for m in models.split(",") if m.strip()))
            if not chosen:
                raise InputError("<argument>", "no model given", field="--models")
            if name in ("e2e", "facts", "ladder"):
                kwargs["models"] = chosen
            elif len(chosen) == 1:
                updates["cluster.model"] = chosen[0]
            else:
                raise InputError("<argument>", f"{name} runs one model; give one", field="--models")
        if name in ("e2e", "facts", "ladder"):
            if duration is not None or quick:
                updates["trace.duration_s"] = duration or 400.0
        elif name in ("ablation", "sensitivity") and duration is not None:
            kwargs["duration_s"] = duration
        cfg = opts.build_sim_config(config, updates, sets, show=show_config)
        for model in models_run(name, cfg.cluster.model, kwargs):
            # the experiment sets the model of each row itself: check each one fits the
            # configured card before any run, as the config check does for its own model
            try:
                cfg.with_updates(**{"cluster.model": model})
            except ValidationError as err:
                base = from_validation(err, "<argument>")
                raise InputError(
                    "<argument>",
                    f"experiment {name} runs {model}: {base.message}",
                    field=base.field,
                ) from None
        output_dir(out)
        store = run_store_at(out)
        started = time.monotonic()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as bar:
            shown = _SettingBars(bar, started, SETTING_SEP)
            try:
                with run_store.use(store):
                    result = EXPERIMENTS[name](cfg, progress=shown.update, **kwargs)
            except KeyboardInterrupt:
                interrupted(bar, f" after {elapsed(started)}; {kept_message(store)}")
            shown.finish()
        files: list[str] = []
        if out is not None:
            from pearl.sim.config import dump_config

            files = [str(p) for p in result.write(out)]
            (out / "config.yaml").write_text(dump_config(cfg))
            files.append(str(out / "config.yaml"))
            if result.timeline is not None:
                from pearl.report.timeline import plot_timeline, segments

                title, history, end_s = result.timeline
                if history:
                    png = plot_timeline(
                        segments(history, end_s), out / "timeline.png", title=f"GPU roles: {title}"
                    )
                    files.append(str(png))
        if as_json:
            doc = result.to_json()
            doc["files"] = files
            print_json(doc)
            return
        console.print(Markdown(result.markdown()))
        if files:
            console.print("written: " + ", ".join(files))
