"""Shared CLI plumbing: --json output, one-line errors with exit code 2, --debug."""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console

from pearl.errors import InputError

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
