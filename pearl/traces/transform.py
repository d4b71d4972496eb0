"""Scaling, capping and windowing of availability traces.

All three are pure: they return a new trace and never change the one given.

- `scale(trace, gpus, per_nodes)`: `A/B` means A GPUs per B nodes. The count becomes
  `round(n * A / B)` with halves rounded up (integer arithmetic, `(2nA + B) // 2B`), so
  32 nodes at 12/32 give exactly 12 GPUs and a scaled trace keeps the raw mean within half a
  GPU. Counts that round to the same value merge (fewer changes than the raw trace).
- `cap(trace, max_gpus)`: counts above `max_gpus` become `max_gpus`.
- `window(trace, start_s, end_s)`: the segment `[start_s, end_s)` shifted to start at 0; it
  starts with the availability at `start_s` and keeps the changes strictly inside.

`scale` and `cap` return count traces (an id trace is read through its counts);
`window` keeps the kind (an id trace's segment starts by adding the GPUs live at `start_s`).
"""

from __future__ import annotations

from dataclasses import replace

from pearl.traces.availability import AvailabilityTrace, Change


def parse_scale(text: str) -> tuple[int, int]:
    """`"A/B"` -> `(A, B)` with `A >= 0`, `B >= 1`; a bare `"A"` means `A/1`."""
    parts = text.strip().split("/")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"expected A/B with integers (A GPUs per B nodes), got '{text}'") from None
    if len(values) == 1:
        values.append(1)
    if len(values) != 2 or values[0] < 0 or values[1] < 1:
        raise ValueError(f"expected A/B with A >= 0 and B >= 1, got '{text}'")
    return values[0], values[1]


def parse_window(text: str) -> tuple[float, float]:
    """`"START:END"` in seconds -> `(start_s, end_s)` with `0 <= START < END`."""
    parts = text.strip().split(":")
    try:
        start_s, end_s = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"expected START:END in seconds, got '{text}'") from None
    if not 0 <= start_s < end_s:
        raise ValueError(f"expected 0 <= START < END, got '{text}'")
    return start_s, end_s


def scaled_count(num_nodes: int, gpus: int, per_nodes: int) -> int:
    """`round(num_nodes * gpus / per_nodes)`, halves rounded up."""
    return (2 * num_nodes * gpus + per_nodes) // (2 * per_nodes)


def scale(trace: AvailabilityTrace, gpus: int, per_nodes: int) -> AvailabilityTrace:
    """A count trace with `gpus` GPUs per `per_nodes` nodes (see the module docstring)."""
    if gpus < 0 or per_nodes < 1:
        raise ValueError(f"bad scale {gpus}/{per_nodes}")
    points = [(t, scaled_count(n, gpus, per_nodes)) for t, n in trace.levels()]
    return _counts_like(trace, points)


def cap(trace: AvailabilityTrace, max_gpus: int) -> AvailabilityTrace:
    """A count trace with every count limited to `max_gpus`."""
    if max_gpus < 0:
        raise ValueError(f"cap must be >= 0, got {max_gpus}")
    return _counts_like(trace, [(t, min(n, max_gpus)) for t, n in trace.levels()])


def window(
    trace: AvailabilityTrace, start_s: float, end_s: float, *, name: str | None = None
) -> AvailabilityTrace:
    """The segment `[start_s, end_s)` of `trace`, re-based to time 0 (duration `end - start`).

    Raises `ValueError` unless `0 <= start_s < end_s <= trace.duration_s`.
    """
    if not 0 <= start_s < end_s <= trace.duration_s:
        raise ValueError(
            f"window {start_s:g}:{end_s:g} must satisfy 0 <= START < END <= "
            f"{trace.duration_s:g} (the trace's duration in seconds)"
        )
    inside = [c for c in trace.changes if start_s < c.time_s < end_s]
    changes: list[Change] = []
    if trace.is_count:
        changes.append(Change(0.0, num_gpus=trace.count_at(start_s)))
    else:
        live: list[str] = []
        for c in trace.changes:
            if c.time_s > start_s:
                break
            live = [g for g in live if g not in c.removed] + list(c.added)
        if live:
            changes.append(Change(0.0, added=tuple(live)))
    changes += [replace(c, time_s=c.time_s - start_s) for c in inside]
    out = AvailabilityTrace(
        name or trace.name,
        end_s - start_s,
        trace.reclaim_notice_s,
        tuple(changes),
        trace.source,
    )
    if trace.is_count:  # drop a start level of 0 and no-op changes
        return _counts_like(out, out.levels())
    return out


def _counts_like(
    trace: AvailabilityTrace, points: list[tuple[float, int]] | tuple[tuple[float, int], ...]
) -> AvailabilityTrace:
    return AvailabilityTrace.from_counts(
        trace.name,
        trace.duration_s,
        points,
        reclaim_notice_s=trace.reclaim_notice_s,
        source=trace.source,
    )
