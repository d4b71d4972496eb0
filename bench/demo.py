"""The demo run's figures: `pearl run examples/demo.yaml`, then its metrics into BENCHMARKS.md.

    .venv/bin/python -m bench.demo [RUN_DIR]   # RUN_DIR: summarise an existing run instead

Records what the demo measured: wall time, reward over the first and last fifth of the
steps, elasticity events, and the median error of the decision engine's predicted rollout
makespan against the measured one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._md import machine_line, write_section

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if args:
        run_dir, wall = Path(args[0]), None
    else:
        run_dir = Path(tempfile.mkdtemp(prefix="pearl-demo-")) / "run"
        t0 = time.perf_counter()
        cmd = [
            sys.executable,
            "-m",
            "pearl.cli.main",
            "run",
            str(ROOT / "examples" / "demo.yaml"),
            "--out",
            str(run_dir),
            "--no-live",
        ]
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - t0
    m = json.loads((run_dir / "metrics.json").read_text())
    s, ev, mp = m["summary"], m["event_counts"], m["makespan_prediction"]
    err = mp.get("median_abs_rel_error")
    lines = [
        "## Demo run (`make demo`)",
        "",
        f"`pearl run examples/demo.yaml` on {machine_line()}. Rerun: `.venv/bin/python -m bench.demo`.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| wall time, whole command (Ray start included) | {wall:.0f} s |"
        if wall
        else "| wall time, whole command | (not measured: existing run dir) |",
        f"| wall time of the run after the cluster is up | {s['wall_s']:.0f} s |",
        f"| training steps | {s['steps']} |",
        f"| mean reward, first fifth of steps -> last fifth | {s['reward_first_fifth']:.3f} -> {s['reward_last_fifth']:.3f} |",
        f"| preemption events / expansions (groups of preemptible GPUs admitted) | {ev.get('preemption', 0)} / {ev.get('expansion', 0)} |",
        f"| borrows / returns (late returns) | {ev.get('borrow', 0)} / {ev.get('return', 0)} ({s.get('late_returns', 0)}) |",
        f"| PD reconfigurations | {ev.get('pd_reconfig', 0)} |",
        f"| interrupted / resumed requests | {ev.get('interrupt', 0)} / {ev.get('resume', 0)} |",
        f"| parked-worker activations / parks | {ev.get('activation', 0)} / {ev.get('park', 0)} |",
        f"| PD configs the steps ran on | {', '.join(_configs(run_dir))} |",
        f"| switch costs the gates ended with (times measured) | {_switch_costs(s)} |",
        f"| turns served by borrowed (activated) workers | {_borrowed_turns(run_dir)} |",
        f"| median relative error, predicted vs measured rollout makespan | {err:.0%} over {mp.get('num_steps')} steps (signed {mp.get('median_rel_error'):+.0%}) |"
        if err is not None
        else "| median relative error, predicted vs measured rollout makespan | no step with both |",
        "",
        "The workload is the `transcript` style of `guess` (about 100 new prompt tokens per",
        'turn) with the disaggregated mode pinned (docs/demo.md, "PD mode and ratio in the demo"): the',
        "P:D ratio is the decision engine's choice for each pool size. The measured makespan runs",
        "from a batch's start to its last trajectory; with two batches in flight (staleness 1)",
        "and worker starts sharing the CPU it includes waiting that the model's single-batch",
        "prediction does not. Borrowed workers are activated and admitted within tenths of a",
        "second; routing keeps a trajectory on the worker holding its prefix only while that",
        "worker has at most 2 requests more than the least-loaded one",
        "(`controller.sticky_max_imbalance`), so they take turns during each few-second borrow",
        "window and give them back interrupted, with their prefix, when the window ends. Each",
        "borrow also changes the P:D ratio (5:1 with the borrowed slots), hence the many",
        "reconfigurations.",
    ]
    body = "\n".join(lines)
    print(body)
    if "--no-write" not in sys.argv:
        write_section("demo", body)


def _switch_costs(summary: dict) -> str:
    """`kind estimate s (n)` for each switch kind; n = 0 means the configured prior."""
    est, n = summary.get("switch_costs_s") or {}, summary.get("switch_costs_measured") or {}
    return ", ".join(f"{k} {v:.2f} s ({n.get(k, 0)})" for k, v in est.items()) or "-"


def _borrowed_turns(run_dir: Path) -> str:
    """Turns prefilled or decoded by a worker that was an activated (borrowed) one."""
    borrowed = set()
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        e = json.loads(line) if line.strip() else {}
        if e.get("kind") == "activation":
            borrowed.add(e.get("worker"))
    n = used = 0
    for line in (run_dir / "telemetry.jsonl").read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        if r.get("kind") == "turn":
            n += 1
            used += bool({r.get("prefill_worker"), r.get("decode_worker")} & borrowed)
    return f"{used} of {n}"


def _configs(run_dir: Path) -> list[str]:
    """The distinct PD configs of the trained steps, in order of first use."""
    seen: dict[str, None] = {}
    for line in (run_dir / "steps.jsonl").read_text().splitlines():
        if line.strip():
            seen.setdefault(str(json.loads(line).get("config")), None)
    return list(seen)


if __name__ == "__main__":
    main()
