"""User-facing input errors: one line that names the file, the location and the field.

Every loader (traces, state files, profiles, configs, checkpoints) raises `InputError`;
the CLI prints `str(err)` on one line and exits with code 2 (traceback only with --debug).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class InputError(ValueError):
    """Bad user input, located as precisely as the loader can.

    `source` is a file path (or "<argument>" for a command-line value), `location` a line
    number ("line 12") or a JSON path ("workers[3].gpus"), `field` the offending field.
    """

    def __init__(
        self,
        source: str,
        message: str,
        *,
        location: str | None = None,
        field: str | None = None,
    ) -> None:
        self.source = source
        self.location = location
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __reduce__(self) -> tuple:
        # keyword-only fields survive pickling (an error raised in a worker process)
        return (_input_error, (self.source, self.message, self.location, self.field))

    def __str__(self) -> str:
        where = self.source if self.location is None else f"{self.source}:{self.location}"
        what = f"field '{self.field}': " if self.field else ""
        return f"{where}: {what}{self.message}"


def from_validation(
    err: ValidationError, source: str, *, prefix: str | None = None, location: str | None = None
) -> InputError:
    """The first problem of a pydantic `ValidationError` as an `InputError` naming its
    dotted field (under `prefix`), without pydantic's "Value error, " preamble. A required
    field that is missing beside an unknown one of the same section is most often a
    misspelling, and the message names the unknown one."""
    errors = err.errors()
    first = errors[0]
    path = ".".join(str(p) for p in first["loc"])
    field = ".".join(x for x in (prefix, path) if x) or None
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "missing":
        parent = tuple(first["loc"][:-1])
        unknown = [
            str(e["loc"][-1])
            for e in errors
            if e["type"] == "extra_forbidden" and tuple(e["loc"][:-1]) == parent
        ]
        if unknown:
            names = ", ".join(f"'{u}'" for u in unknown)
            message += f" (not a field here: {names}; a misspelling?)"
    return InputError(source, message, location=location, field=field)


def _input_error(source: str, message: str, location: str | None, field: str | None) -> InputError:
    return InputError(source, message, location=location, field=field)


class PathError(ValueError):
    """A document (a state, a trace) that breaks an invariant at `path`, a JSON path such as
    `changes[3].time_s`, in its `field`. Loaders turn it into an `InputError` naming the
    file."""

    def __init__(self, message: str, path: str = "", field: str | None = None) -> None:
        self.path = path
        self.field = field
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)

    def __reduce__(self) -> tuple:
        return (type(self), (self.message, self.path, self.field))


def read_text(path: object) -> str:
    """A file's text; a missing or unreadable file is an `InputError` naming it."""
    from pathlib import Path

    p = Path(str(path))
    try:
        return p.read_text()
    except FileNotFoundError:
        raise InputError(str(p), "file not found") from None
    except IsADirectoryError:
        raise InputError(str(p), "is a directory, expected a file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(str(p), f"cannot read: {getattr(err, 'strerror', None) or err}") from None


def read_json(path: object) -> object:
    """A JSON file's document; a syntax error is an `InputError` naming file and line."""
    import json

    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            str(path), f"not valid JSON: {err.msg}", location=f"line {err.lineno}"
        ) from None
