"""Run every benchmark in turn; each writes its own section of BENCHMARKS.md.

.venv/bin/python -m bench.run_all [NAME ...]    # default: all, cheapest first
"""

from __future__ import annotations

import subprocess
import sys
import time

ORDER = (
    "plan",
    "decide",
    "controller",
    "sim_physics",
    "sim_calibration",
    "envs_latency",
    "envs_learnable",
    "learning",
    "engine_decode",
    "engine_backends",
    "kv_transfer",
    "worker_ops",
    "sim_speed",
    "sim_validate",
    "workload_fit",
    "seeds",
    "demo",
)
EXTRA_ARGS = {"envs_latency": ["--write"], "envs_learnable": ["--write"]}


def main() -> None:
    names = sys.argv[1:] or list(ORDER)
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        sys.exit(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(ORDER)})")
    failed = []
    for name in names:
        t0 = time.perf_counter()
        print(f"== bench.{name}", flush=True)
        if (
            subprocess.run(
                [sys.executable, "-m", f"bench.{name}", *EXTRA_ARGS.get(name, [])]
            ).returncode
            != 0
        ):
            failed.append(name)
        print(f"== bench.{name}: {time.perf_counter() - t0:.0f} s", flush=True)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
