"""Bundled trace segments and one entry point that resolves a name or a file.

The bundled segments live in `pearl/traces/data/<name>.json` (our format); they are derived
from real traces by `pearl.traces.derive` (see docs/traces.md for attribution and stats).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pearl.errors import InputError
from pearl.traces.availability import AvailabilityTrace
from pearl.traces.io import load_json_trace, read_trace_file
from pearl.traces.transform import cap as cap_trace
from pearl.traces.transform import parse_scale, parse_window, scale, window

BUNDLED = ("seg1", "seg2", "seg3")


def bundled_names() -> tuple[str, ...]:
    """Names of the bundled segments, in order."""
    return BUNDLED


def load_bundled(name: str) -> AvailabilityTrace:
    """A bundled segment by name; `KeyError` for an unknown name."""
    if name not in BUNDLED:
        raise KeyError(name)
    res = resources.files("pearl.traces").joinpath("data", f"{name}.json")
    with resources.as_file(res) as path:
        return load_json_trace(Path(path))


def load_trace(
    name_or_path: str | Path,
    *,
    scale_ratio: str | tuple[int, int] | None = None,
    window_s: str | tuple[float, float] | None = None,
    cap: int | None = None,
) -> AvailabilityTrace:
    """Resolve a bundled name or a trace file, then scale, cap and cut a window, in that order.

    `scale_ratio` is `"A/B"` or `(A, B)` (A GPUs per B nodes); `window_s` is `"START:END"` or
    `(start_s, end_s)`. Bad arguments raise `InputError` naming the option (`--scale`,
    `--window`, `--cap`); bad files raise `InputError` naming file, line/path and field.
    """
    key = str(name_or_path)
    if key in BUNDLED:
        trace = load_bundled(key)
    else:
        path = Path(name_or_path)
        if not path.exists():
            raise InputError(
                key, f"no such file, and not a bundled trace (one of {', '.join(BUNDLED)})"
            )
        trace = read_trace_file(path)
    try:
        if scale_ratio is not None:
            a, b = parse_scale(scale_ratio) if isinstance(scale_ratio, str) else scale_ratio
            trace = scale(trace, a, b)
    except ValueError as err:
        raise InputError("<argument>", str(err), field="--scale") from None
    if cap is not None:
        if cap < 0:
            raise InputError("<argument>", f"must be >= 0, got {cap}", field="--cap")
        trace = cap_trace(trace, cap)
    try:
        if window_s is not None:
            start_s, end_s = parse_window(window_s) if isinstance(window_s, str) else window_s
            trace = window(trace, start_s, end_s)
    except ValueError as err:
        raise InputError("<argument>", str(err), field="--window") from None
    return trace
