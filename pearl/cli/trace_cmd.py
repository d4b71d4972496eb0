"""`pearl trace list` and `pearl trace show`: preemptible availability traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from pearl.cli.output import console, guarded, print_json
from pearl.errors import InputError
from pearl.traces import AvailabilityTrace, bundled_names, load_bundled, load_trace

trace_app = typer.Typer(
    help="Preemptible GPU availability traces: bundled segments and trace files.",
    no_args_is_help=True,
)


def _doc(trace: AvailabilityTrace) -> dict[str, Any]:
    return {
        "name": trace.name,
        "source": trace.source,
        "reclaim_notice_s": trace.reclaim_notice_s,
        **trace.stats().to_json(),
    }


@trace_app.command("list")
@guarded
def list_traces(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """List the bundled trace segments with their statistics."""
    docs = [_doc(load_bundled(name)) for name in bundled_names()]
    if as_json:
        print_json({"traces": docs})
        return
    table = Table("name", "duration_s", "min", "mean", "max", "changes", "source")
    for d in docs:
        table.add_row(
            d["name"],
            f"{d['duration_s']:g}",
            str(d["min_gpus"]),
            f"{d['mean_gpus']:.2f}",
            str(d["max_gpus"]),
            str(d["num_changes"]),
            d["source"].split(";")[0],
        )
    console.print(table)


@trace_app.command("show")
@guarded
def show(
    name_or_file: str = typer.Argument(
        ..., help="A bundled segment (seg1, seg2, seg3), a .json trace or an event .csv file."
    ),
    scale: str | None = typer.Option(
        None, "--scale", help="A/B: A GPUs per B nodes (rounded half up), e.g. 12/32."
    ),
    cap: int | None = typer.Option(None, "--cap", help="At most this many GPUs at any time."),
    window: str | None = typer.Option(
        None, "--window", help="START:END in seconds: cut this segment, re-based to 0."
    ),
    plot: Path | None = typer.Option(None, "--plot", help="Write a step plot to this PNG."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Show a trace's statistics (duration_s, min/mean/max GPUs, num_changes)."""
    trace = load_trace(name_or_file, scale_ratio=scale, window_s=window, cap=cap)
    doc = _doc(trace)
    doc["levels"] = [{"time_s": t, "num_gpus": n} for t, n in trace.levels()]
    if plot is not None:
        _plot(trace, plot)
        doc["plot"] = str(plot)
    if as_json:
        print_json(doc)
        return
    console.print(f"[bold]{escape(trace.name)}[/bold]  {escape(trace.source)}", highlight=False)
    table = Table("duration_s", "min_gpus", "mean_gpus", "max_gpus", "num_changes", "notice_s")
    table.add_row(
        f"{doc['duration_s']:g}",
        str(doc["min_gpus"]),
        f"{doc['mean_gpus']:.3f}",
        str(doc["max_gpus"]),
        str(doc["num_changes"]),
        f"{trace.reclaim_notice_s:g}",
    )
    console.print(table)
    if plot is not None:
        console.print(f"plot written to {plot}")


def _plot(trace: AvailabilityTrace, path: Path) -> None:
    """A step plot of the GPU count over time (matplotlib, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = trace.levels()
    times = [t for t, _ in levels] + [trace.duration_s]
    counts = [n for _, n in levels] + [levels[-1][1]]
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.step([t / 60 for t in times], counts, where="post")
    ax.set_xlabel("time (min)")
    ax.set_ylabel("preemptible GPUs")
    s = trace.stats()
    ax.set_title(f"{trace.name}: mean {s.mean_gpus:.2f}, {s.num_changes} changes")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as err:
        raise InputError(str(path), f"cannot write plot: {err.strerror}", field="--plot") from None
    finally:
        plt.close(fig)


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
