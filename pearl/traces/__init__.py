"""Preemptible GPU availability traces: one model, loaders, generators, bundled segments.

Entry points: `load_trace(name_or_file, scale_ratio=, window_s=, cap=)`, `AvailabilityTrace`
(`count_at`, `stats`, `gpu_events`), the generators, and `bundled_names()`. Formats and the
attribution of the real traces: docs/traces.md.
"""

from pearl.traces.availability import AvailabilityTrace, Change, GpuEvent, TraceError, TraceStats
from pearl.traces.catalog import BUNDLED, bundled_names, load_bundled, load_trace
from pearl.traces.generators import constant, periodic, poisson_churn
from pearl.traces.io import load_event_csv, load_json_trace, save_json_trace, trace_from_json
from pearl.traces.transform import cap, parse_scale, parse_window, scale, window

__all__ = [
    "BUNDLED",
    "AvailabilityTrace",
    "Change",
    "GpuEvent",
    "TraceError",
    "TraceStats",
    "bundled_names",
    "cap",
    "constant",
    "load_bundled",
    "load_event_csv",
    "load_json_trace",
    "load_trace",
    "parse_scale",
    "parse_window",
    "periodic",
    "poisson_churn",
    "save_json_trace",
    "scale",
    "trace_from_json",
    "window",
]
