"""Derive the bundled segments seg1, seg2, seg3 from the real traces (reproducible).

    python -m pearl.traces.derive --data-dir DIR            # rewrite
    python -m pearl.traces.derive --data-dir DIR --check    # verify
    python -m pearl.traces.derive --data-dir DIR --search   # candidates

DIR holds the raw traces as `parcae-p3/p3trace.csv` and `spotserve-g4dn/g4dn.csv`, copied
from the two public repositories below at the commits named in `PARCAE` and `SPOTSERVE`.

Each segment is a two-hour window of a real AWS spot trace (paper §6.1: three two-hour
segments that differ in abundance and churn), scaled from nodes to GPUs and capped at 12
preemptible GPUs (on top of 4 reserved GPUs, which the traces do not include). The windows
and scales were chosen with `--search` to hit the target means (10, 6, 8) and the intended
change frequencies (seg1 few, seg3 many). The sources and their licences:

- Parcae (Duan et al., NSDI'24), github.com/JF-D/Parcae, liveput/traces/p3trace.csv, MIT.
- SpotServe (Miao et al., ASPLOS'24), github.com/Hsword/SpotServe,
  elastic-switch/trace/trace_full/g4dn.csv, Apache-2.0.

Their LICENSE files are copied next to the segments as `LICENSE.<source>`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from pearl.traces.availability import AvailabilityTrace
from pearl.traces.io import load_event_csv, load_json_trace, save_json_trace
from pearl.traces.transform import cap, scale, window

SEGMENT_DURATION_S = 7200.0
MAX_PREEMPTIBLE_GPUS = 12
OUT_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True, slots=True)
class Source:
    """A real trace: `folder/file` under the shared traces directory, and its attribution."""

    folder: str
    file: str
    attribution: str


PARCAE = Source(
    "parcae-p3",
    "p3trace.csv",
    "Parcae (Duan et al., NSDI'24), github.com/JF-D/Parcae liveput/traces/p3trace.csv "
    "@efedee7e, AWS p3.2xlarge spot; MIT licence (LICENSE.parcae-p3)",
)
SPOTSERVE = Source(
    "spotserve-g4dn",
    "g4dn.csv",
    "SpotServe (Miao et al., ASPLOS'24), github.com/Hsword/SpotServe "
    "elastic-switch/trace/trace_full/g4dn.csv @832b29f, AWS g4dn spot; "
    "Apache-2.0 licence (LICENSE.spotserve-g4dn)",
)


@dataclass(frozen=True, slots=True)
class SegmentSpec:
    """How one bundled segment is cut: source, scale A GPUs per B nodes, window start."""

    name: str
    source: Source
    gpus: int
    per_nodes: int
    start_s: float
    note: str


SEGMENTS = (
    SegmentSpec("seg1", SPOTSERVE, 12, 20, 25500.0, "abundant, few changes"),
    SegmentSpec("seg2", PARCAE, 12, 32, 31500.0, "scarce"),
    SegmentSpec("seg3", PARCAE, 12, 26, 27240.0, "in between, frequent changes"),
)


def derive(spec: SegmentSpec, data_dir: Path) -> AvailabilityTrace:
    """The segment described by `spec`, from the raw CSV under `data_dir`."""
    raw = load_event_csv(data_dir / spec.source.folder / spec.source.file)
    gpus = cap(scale(raw, spec.gpus, spec.per_nodes), MAX_PREEMPTIBLE_GPUS)
    end_s = spec.start_s + SEGMENT_DURATION_S
    seg = window(gpus, spec.start_s, end_s, name=spec.name)
    source = (
        f"{spec.note}; derived from {spec.source.attribution}; scaled {spec.gpus} GPUs per "
        f"{spec.per_nodes} nodes (rounded half up), capped at {MAX_PREEMPTIBLE_GPUS}, "
        f"window {spec.start_s:g}:{end_s:g} s"
    )
    return AvailabilityTrace(
        seg.name, seg.duration_s, seg.reclaim_notice_s, seg.changes, source=source
    )


def write_all(data_dir: Path, out_dir: Path = OUT_DIR) -> list[AvailabilityTrace]:
    """Derive every segment into `out_dir` and copy the sources' LICENSE files there."""
    out_dir.mkdir(parents=True, exist_ok=True)
    traces = []
    for spec in SEGMENTS:
        trace = derive(spec, data_dir)
        save_json_trace(trace, out_dir / f"{spec.name}.json")
        traces.append(trace)
    for src in (PARCAE, SPOTSERVE):
        shutil.copyfile(data_dir / src.folder / "LICENSE", out_dir / f"LICENSE.{src.folder}")
    return traces


def search(
    raw: AvailabilityTrace, gpus: int, per_nodes: int, *, step_s: float = 60.0
) -> list[tuple[float, float, int]]:
    """`(start_s, mean_gpus, num_changes)` of every two-hour window on a `step_s` grid."""
    scaled = cap(scale(raw, gpus, per_nodes), MAX_PREEMPTIBLE_GPUS)
    rows = []
    start_s = 0.0
    while start_s + SEGMENT_DURATION_S <= raw.duration_s:
        s = window(scaled, start_s, start_s + SEGMENT_DURATION_S).stats()
        rows.append((start_s, s.mean_gpus, s.num_changes))
        start_s += step_s
    return rows


def _print_search(data_dir: Path) -> None:
    for src in (PARCAE, SPOTSERVE):
        raw = load_event_csv(data_dir / src.folder / src.file)
        for per_nodes in range(12, 33, 2):
            for target in (10.0, 8.0, 6.0):
                hits = [r for r in search(raw, 12, per_nodes) if abs(r[1] - target) <= 0.2]
                hits.sort(key=lambda r: r[2])
                if hits:
                    lo, hi = hits[0], hits[-1]
                    print(
                        f"{src.folder:15} 12/{per_nodes:<3} mean~{target:g}: {len(hits):3} windows;"
                        f" fewest changes {lo[2]} at {lo[0]:g} s, most {hi[2]} at {hi[0]:g} s"
                    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data-dir",
        type=Path,
        required=True,
        help="Folder with parcae-p3/p3trace.csv and spotserve-g4dn/g4dn.csv (the raw traces).",
    )
    ap.add_argument("--check", action="store_true", help="Verify the bundled files, write nothing.")
    ap.add_argument("--search", action="store_true", help="Print candidate windows.")
    args = ap.parse_args(argv)
    if args.search:
        _print_search(args.data_dir)
        return 0
    if args.check:
        bad = [
            s.name
            for s in SEGMENTS
            if derive(s, args.data_dir) != load_json_trace(OUT_DIR / f"{s.name}.json")
        ]
        print("bundled segments differ: " + ", ".join(bad) if bad else "bundled segments match")
        return 1 if bad else 0
    for trace in write_all(args.data_dir):
        print(trace.name, trace.stats().to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
