"""The simulation config a command runs: a YAML file or the defaults, the command's own
options, then `--set section.field=value` overrides; every error names the file or option
and the field, before any simulated work starts; `--show-config` prints it. Shared by
`pearl simulate`, `pearl experiment` and `pearl validate`; `pearl run` applies its `--set`
pairs to a run config with the same `with_sets`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import typer
from pydantic import BaseModel

from pearl.cli.output import err_console
from pearl.errors import InputError, from_validation

M = TypeVar("M", bound=BaseModel)


def config_option(help_text: str) -> Any:
    """The `--config FILE.yaml` option of a simulating command."""
    return typer.Option(None, "--config", help=help_text)


def set_option(example: str) -> Any:
    """The repeatable `--set section.field=value` option of a simulating command."""
    return typer.Option(
        None,
        "--set",
        help="Override any config field: section.field=value (repeatable), e.g. " + example + ".",
    )


def show_config_option() -> Any:
    """The `--show-config` flag: print the config the command would start from and exit."""
    return typer.Option(
        False,
        "--show-config",
        help="Print the config this command would start from (the defaults or --config, the "
        "options, then --set) as YAML and exit without simulating; every field is there, so "
        "it is a starting point for a --config file.",
    )


def print_config(cfg: Any) -> None:
    """The config as YAML on stdout (what `--show-config` prints; `load_config` reads it)."""
    from pearl.sim.config import dump_config

    typer.echo(dump_config(cfg), nl=False)


def given(*pairs: tuple[str, Any]) -> dict[str, Any]:
    """The (dotted field, option value) pairs whose option was given (not None)."""
    return {key: value for key, value in pairs if value is not None}


def parse_sets(sets: list[str]) -> dict[str, Any]:
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


def build_sim_config(
    config: Path | None,
    updates: dict[str, Any],
    sets: list[str] | None = None,
    *,
    show: bool = False,
) -> Any:
    """`config` (or the defaults) with the command's `updates`, then the `--set` pairs
    (which win over both). `show` (`--show-config`): print it and end the command."""
    cfg = _built(config, updates, sets)
    if show:
        print_config(cfg)
        raise typer.Exit(0)
    _warn_unpinned(cfg.cluster.gpu)
    return cfg


def _warn_unpinned(gpu: str) -> None:
    """One line on stderr when the world's speed on `gpu` is not pinned to a measurement."""
    from pearl.specs import get_gpu

    why = get_gpu(gpu).unpinned
    if why:
        err_console.print(
            f"[yellow]note:[/yellow] {gpu}: not calibrated: {why} (BENCHMARKS.md, "
            "simulator calibration)",
            highlight=False,
            soft_wrap=True,
        )


def _built(config: Path | None, updates: dict[str, Any], sets: list[str] | None) -> Any:
    from pearl.sim.config import SimConfig, load_config

    cfg = load_config(config) if config is not None else SimConfig()
    return with_sets(cfg, updates, sets)


def with_sets(cfg: M, updates: dict[str, Any], sets: list[str] | None) -> M:
    """`cfg` with the command's `updates` (dotted field -> value), then the `--set` pairs,
    which win; a renamed field, a missing section or a bad value is an `InputError` naming
    `--set` and the field."""
    from pydantic import ValidationError

    from pearl.configio import with_dotted_updates
    from pearl.world.sections import renamed_key

    merged = {**updates, **parse_sets(sets or [])}
    for key in merged:
        if (new := renamed_key(key)) is not None:
            raise InputError("<argument>", f"{key} was renamed: use {new}", field="--set")
    try:
        return with_dotted_updates(cfg, merged)
    except KeyError as err:
        raise InputError(
            "<argument>", f"no config section {err.args[0]!r}", field="--set"
        ) from None
    except ValidationError as err:
        raise from_validation(err, "<argument>") from None
