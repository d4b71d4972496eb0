"""Shared CLI plumbing: --json output, one-line errors with exit code 2, --debug."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console

from pearl.errors import InputError

if TYPE_CHECKING:
    from pearl.sim.run_store import RunStore

console = Console()
err_console = Console(stderr=True)

# Set by the top-level --debug option: show tracebacks instead of one-line errors.
DEBUG = {"on": False}

F = TypeVar("F", bound=Callable[..., Any])


def guarded(fn: F) -> F:
    """Turn `InputError` (and other bad-input errors) into one line on stderr and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (InputError, FileNotFoundError) as err:
            if DEBUG["on"]:
                raise
            # raised in a Ray actor: Ray's error is also an InputError, but its text
            # carries the remote traceback; the line is the original error's
            cause = getattr(err, "cause", None)
            if isinstance(cause, InputError):
                err = cause
            msg = str(err) if isinstance(err, InputError) else f"{err.filename}: file not found"
            err_console.print(f"[red]error:[/red] {msg}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]


def elapsed(started: float) -> str:
    """Minutes:seconds since `started` (a `time.monotonic()` reading), for progress lines."""
    s = int(time.monotonic() - started)
    return f"{s // 60}:{s % 60:02d}"


def interrupted(live: Any, message: str) -> NoReturn:
    """Ctrl-C during long work: stop the live progress display `live`, say on one line
    what is kept (`message`, after "interrupted"), and exit with code 130 (128 + SIGINT)."""
    live.stop()
    err_console.print(f"interrupted{message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=130)


def print_json(doc: Any) -> None:
    """Exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=_default) + "\n")
    sys.stdout.flush()


def _default(obj: Any) -> Any:
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def output_dir(path: Path | None, option: str = "--out") -> Path | None:
    """Create `path` (and its parents) before the long work whose results go there, so a
    path that cannot be a writable directory fails at once, naming `option`, instead of
    losing the work at the end."""
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(
            str(path), f"cannot be an output directory ({err.strerror})", field=option
        ) from None
    if not os.access(path, os.W_OK):
        raise InputError(str(path), "output directory is not writable", field=option)
    return path


def run_store_at(out: Path | None) -> RunStore | None:
    """The run store under `out/runs` (`pearl.sim.run_store`), None without `--out`; say on
    stderr when it already holds simulations, which a rerun reads back."""
    if out is None:
        return None
    from pearl.sim.run_store import RunStore

    store = RunStore(out / "runs")
    if len(store):
        err_console.print(
            f"{store.root}: {len(store)} stored simulation(s) from an earlier run; those "
            "of this config and code are read back, not simulated again (delete the "
            "folder to simulate everything)",
            highlight=False,
            soft_wrap=True,
        )
    return store


def kept_message(store: RunStore | None) -> str:
    """What an interrupted command with a run store (or none) keeps, for `interrupted`."""
    if store is None:
        return "nothing written (with --out DIR a rerun goes on from what is done)"
    return (
        f"the {store.num_written} simulation(s) finished in this run are kept in "
        f"{store.root}: run the same command again to go on from them"
    )
