"""The `pearl` command. Each command group lives in its own module and registers here."""

from __future__ import annotations

import typer

from pearl.cli.output import DEBUG

app = typer.Typer(
    name="pearl",
    help="PEARL: elastic, PD-adaptive rollout for asynchronous agentic RL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
) -> None:
    DEBUG["on"] = debug


def _register() -> None:
    # Imported here so that `pearl --help` stays fast and a broken optional module names itself.
    from pearl.cli import plan_cmd, trace_cmd

    plan_cmd.register(app)
    trace_cmd.register(app)
    from pearl.cli import decide_cmd, profile_cmd

    profile_cmd.register(app)
    decide_cmd.register(app)
    from pearl.cli import run_cmd

    run_cmd.register(app)
    from pearl.cli import simulate_cmd

    simulate_cmd.register(app)
    from pearl.cli import validate_cmd

    validate_cmd.register(app)
    from pearl.cli import experiment_cmd

    experiment_cmd.register(app)
    from pearl.cli import env_cmd

    env_cmd.register(app)
    from pearl.cli import report_cmd

    report_cmd.register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
