"""`pearl run`: a real elastic RL run on Ray, recorded in a run directory with a report.

Ray and the runtime driver are imported only when the command runs, so `pearl --help`
stays fast.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import typer

from pearl.cli import sim_config as opts
from pearl.cli.output import DEBUG, console, err_console, guarded, print_json
from pearl.errors import InputError


def default_out_dir(now: dt.datetime | None = None) -> Path:
    """runs/<UTC timestamp>, with a suffix if that directory already exists."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / stamp
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{stamp}-{n}")
    return out


def _with_overrides(cfg: Any, *, address: str | None, steps: int | None) -> Any:
    """The config with --address and --steps applied (validated like the YAML)."""
    if steps is not None and steps < 1:
        raise InputError("<argument>", f"must be >= 1, got {steps}", field="--steps")
    if address is not None:
        cfg = cfg.model_copy(
            update={"cluster": cfg.cluster.model_copy(update={"address": address})}
        )
    if steps is not None:
        cfg = cfg.model_copy(
            update={"trainer": cfg.trainer.model_copy(update={"num_steps": steps})}
        )
    return cfg


def _absolute(value: str | None, base_dir: Path) -> str | None:
    """A relative path that exists (from the current directory, else from `base_dir`) made
    absolute; anything else (a bundled trace name, None) unchanged."""
    if value is None or Path(value).is_absolute():
        return value
    for candidate in (Path(value), base_dir / value):
        if candidate.exists():
            return str(candidate.resolve())
    return value


def _resolve_paths(cfg: Any, config_path: Path) -> Any:
    """Trace file and checkpoint dir resolved against the config file's directory, so the
    run directory's config.yaml still finds them on --resume from anywhere. A trace that
    is neither a file there nor a bundled name is refused here, before Ray starts."""
    from pearl.traces.catalog import BUNDLED

    base_dir = config_path.parent
    trace = _absolute(cfg.trace.source, base_dir)
    on_cluster = cfg.cluster.address is not None  # nodes come and go by themselves there
    if trace is not None and not on_cluster and trace not in BUNDLED and not Path(trace).exists():
        raise InputError(
            str(config_path),
            f"{trace}: no such file in the current directory or {base_dir}, and not a "
            f"bundled trace (one of {', '.join(BUNDLED)})",
            field="trace.source",
        )
    ckpt = _absolute(cfg.model.checkpoint_dir, base_dir)
    return cfg.model_copy(
        update={
            "trace": cfg.trace.model_copy(update={"source": trace}),
            "model": cfg.model.model_copy(update={"checkpoint_dir": ckpt}),
        }
    )


def register(app: typer.Typer) -> None:
    @app.command("run")
    @guarded
    def run(
        config: Path | None = typer.Argument(
            None,
            metavar="CONFIG.yaml",
            help="Run config YAML (see pearl/runtime/run_config.py); omit with --resume.",
        ),
        address: str | None = typer.Option(
            None, "--address", help="Ray cluster address ('auto'); default: a local cluster."
        ),
        out: Path | None = typer.Option(
            None, "--out", help="New run directory (default: runs/<UTC timestamp>)."
        ),
        resume: Path | None = typer.Option(
            None, "--resume", help="Continue the run in this directory from its last checkpoint."
        ),
        steps: int | None = typer.Option(
            None, "--steps", help="Override trainer.num_steps (total steps of the run)."
        ),
        no_live: bool = typer.Option(
            False, "--no-live", help="Plain progress lines instead of the live view."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON doc."),
        sets: list[str] = opts.set_option("env.name=code_repair"),
        show_config: bool = typer.Option(
            False,
            "--show-config",
            help="Print the run config this command would start from (CONFIG, --resume "
            "DIR's or the defaults, the options, then --set) as YAML and exit; every field "
            "is there, so it is a starting point for a CONFIG file.",
        ),
    ) -> None:
        """Train a policy with elastic, PD-adaptive rollout; write a run directory and report."""
        from pearl.report.rundir import CONFIG_FILE, REPORT_FILE, check_out_dir
        from pearl.runtime.run_config import RunConfig, dump_run_config, load_run_config

        if show_config:  # CONFIG's, --resume DIR's or the defaults
            shown = resume / CONFIG_FILE if resume is not None else config
            cfg = load_run_config(shown) if shown is not None else RunConfig()
            cfg = opts.with_sets(_with_overrides(cfg, address=address, steps=steps), {}, sets)
            typer.echo(dump_run_config(cfg), nl=False)
            return
        if resume is not None:
            if config is not None or out is not None or sets:
                raise InputError(
                    "<argument>",
                    "--resume continues DIR with DIR/config.yaml: give no CONFIG, no --out "
                    "and no --set (--steps extends the run)",
                    field="--resume",
                )
            check_out_dir(resume, resume=True)
            out_dir, config_path = resume, resume / CONFIG_FILE
        else:
            if config is None:
                raise InputError("<argument>", "give a CONFIG.yaml or --resume DIR", field="CONFIG")
            out_dir = out if out is not None else default_out_dir()
            check_out_dir(out_dir, resume=False)
            config_path = config
        cfg = _with_overrides(load_run_config(config_path), address=address, steps=steps)
        cfg = _resolve_paths(opts.with_sets(cfg, {}, sets), config_path)

        from pearl.runtime import driver  # imports Ray: only now

        try:
            summary = driver.run(cfg, out_dir=out_dir, resume=resume is not None, live=not no_live)
        except KeyboardInterrupt:
            err_console.print(
                f"interrupted; continue with: pearl run --resume {out_dir} "
                f"(a report of what it did so far: pearl report {out_dir})",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(code=130) from None
        except (InputError, FileNotFoundError):
            raise  # bad input: one line from `guarded`
        except Exception as err:  # a crash mid-run (an actor died, a bug): what is kept
            if DEBUG["on"]:
                raise
            first = (str(err).strip().splitlines() or [""])[0]
            err_console.print(
                f"error: the run stopped: {type(err).__name__}: {first}\n"
                f"what it finished is kept: pearl run --resume {out_dir} goes on from its last "
                f"checkpoint, pearl report {out_dir} reports it; pearl --debug run ... shows "
                "the traceback",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(code=1) from None
        doc: dict[str, Any] = dict(summary or {})
        doc.setdefault("out_dir", str(out_dir))
        doc.setdefault("report", str(Path(out_dir) / REPORT_FILE))
        if as_json:
            print_json(doc)
            return
        for key, value in doc.items():
            if key in ("out_dir", "report"):
                continue
            if isinstance(value, dict):  # e.g. counters, learned switch costs: one line each
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            if isinstance(value, str | int | float | bool):
                console.print(f"{key}: {value}", highlight=False, soft_wrap=True)
        console.print(
            f"run directory: {doc['out_dir']}\nreport: {doc['report']}",
            highlight=False,
            soft_wrap=True,
        )
