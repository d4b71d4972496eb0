"""What every experiment returns: rows for a markdown table, bar plots, a role timeline."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pearl.control.state import ClusterState


@dataclass(frozen=True)
class BarPlot:
    """Grouped bars: `groups` on the x axis, one bar per series, `values[series][i]`."""

    filename: str
    title: str
    ylabel: str
    groups: tuple[str, ...]
    values: dict[str, tuple[float, ...]]


@dataclass
class ExperimentResult:
    """An experiment's table (`columns`, `rows`), plots and optionally one run's history."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    bars: list[BarPlot] = field(default_factory=list)
    timeline: tuple[str, list[tuple[float, ClusterState]], float] | None = None

    def markdown(self) -> str:
        lines = [f"# {self.title}", ""]
        lines.append("| " + " | ".join(self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        for row in self.rows:
            lines.append("| " + " | ".join(_cell(row.get(c)) for c in self.columns) + " |")
        if self.notes:
            lines.append("")
            lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.name,
            "title": self.title,
            "columns": self.columns,
            "rows": self.rows,
            "notes": self.notes,
        }

    def write(self, out_dir: Path) -> list[Path]:
        """results.md, results.json and one PNG per bar plot (timeline: see the CLI)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        md = out_dir / "results.md"
        md.write_text(self.markdown())
        js = out_dir / "results.json"
        js.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        paths = [md, js]
        for bar in self.bars:
            paths.append(plot_bars(bar, out_dir / bar.filename))
        return paths


def model_files_note(labels: dict[str, str]) -> list[str]:
    """A note naming the file behind each row label that is a model file's name
    (`pearl.specs.hardware.model_labels`); none when every model is bundled."""
    files = [f"{label} = {name}" for name, label in labels.items() if label != name]
    return [f"model files: {'; '.join(files)}"] if files else []


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def plot_bars(bar: BarPlot, path: Path) -> Path:
    """A grouped bar chart as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    series = list(bar.values)
    x = np.arange(len(bar.groups))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(bar.groups) + 2), 3.8))
    for i, name in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, bar.values[name], width, label=name)
    ax.set_xticks(x, bar.groups, fontsize=8, rotation=20 if len(bar.groups) > 6 else 0)
    ax.set_ylabel(bar.ylabel)
    ax.set_title(bar.title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
