"""Environment step latency: guess steps, code-repair tools, sandboxed test runs per isolation
level, and the thread pool's throughput on concurrent test runs.

    .venv/bin/python -m bench.envs_latency [--runs 10] [--write]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

from pearl.envs.code_repair import PROJECTS, CodeRepairEnv
from pearl.envs.code_repair.sandbox import Limits, new_root, probe_level, run_in_sandbox
from pearl.envs.learnable import GuessEnv, random_digit_policy
from pearl.envs.pool import EnvPool


def _median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def guess_step_us(num_steps: int) -> float:
    env, policy = GuessEnv(), random_digit_policy(0)
    done, total, count = True, 0.0, 0
    for i in range(num_steps):
        if done:
            env.reset(i % env.num_tasks)
        start = time.perf_counter()
        done = env.step(policy([])).done
        total += time.perf_counter() - start
        count += 1
    return 1e6 * total / count


def tool_ms(runs: int) -> dict[str, float]:
    env = CodeRepairEnv()
    out: dict[str, list[float]] = {"reset": [], "view": [], "run_tests": []}
    for i in range(runs):
        start = time.perf_counter()
        env.reset(i % len(PROJECTS))
        out["reset"].append(time.perf_counter() - start)
        start = time.perf_counter()
        env.step(f"<tool>view {PROJECTS[i % len(PROJECTS)].fix_path}</tool>")
        out["view"].append(time.perf_counter() - start)
        start = time.perf_counter()
        env.step("<tool>run_tests</tool>")
        out["run_tests"].append(time.perf_counter() - start)
    env.close()
    return {k: _median_ms(v) for k, v in out.items()}


def run_ms_by_level(runs: int) -> dict[str, float]:
    result = {}
    for level in ("full", "userns", "none"):
        iso = probe_level(level)
        if iso is None:
            continue
        root = new_root()
        (root / "tests").mkdir()
        (root / "tests" / "test_a.py").write_text("def test_a():\n    assert 1 + 1 == 2\n")
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            run_in_sandbox(root, Limits(), iso=iso)
            samples.append(time.perf_counter() - start)
        shutil.rmtree(root, ignore_errors=True)
        result[level] = _median_ms(samples)
    return result


def pool_throughput(num_traj: int, num_hosts: int) -> tuple[float, float]:
    """Seconds for `num_traj` concurrent reset+run_tests, serially vs on the thread pool."""
    start = time.perf_counter()
    env = CodeRepairEnv()
    for i in range(num_traj):
        env.reset(i % len(PROJECTS))
        env.step("<tool>run_tests</tool>")
    env.close()
    serial = time.perf_counter() - start
    with EnvPool("code_repair", num_hosts=num_hosts) as pool:
        start = time.perf_counter()
        for i in range(num_traj):
            pool.submit_reset(f"t{i}", i % len(PROJECTS))
        while pool.num_pending:
            for res in pool.wait():
                if res.kind == "reset":
                    pool.submit_step(res.traj_id, "<tool>run_tests</tool>")
        pooled = time.perf_counter() - start
    return serial, pooled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args()
    g_us = guess_step_us(20_000)
    tools = tool_ms(args.runs)
    levels = run_ms_by_level(args.runs)
    n_traj = max(4, 2 * args.runs)
    serial, pooled = pool_throughput(n_traj, num_hosts=2)
    print(f"guess step: {g_us:.1f} us")
    print("code_repair (median ms): " + ", ".join(f"{k} {v:.1f}" for k, v in tools.items()))
    print(
        "sandboxed test run by level (median ms): "
        + ", ".join(f"{k} {v:.1f}" for k, v in levels.items())
    )
    print(
        f"{n_traj} x (reset + run_tests): serial {serial:.2f} s, thread pool (2 hosts) {pooled:.2f} s, speed-up {serial / pooled:.2f}x"
    )
    if args.write:
        from bench._md import machine_line, write_section

        rows = [
            "## Environments: step latency (`python -m bench.envs_latency`)",
            "",
            f"{machine_line()}; 1-min load average {os.getloadavg()[0]:.1f} during the run "
            "(shared machine: compare ratios, not absolute times).",
            "",
            "| what | median |",
            "|---|---|",
            f"| guess step (in process) | {g_us:.1f} us |",
            *[f"| code_repair {k} | {v:.1f} ms |" for k, v in tools.items()],
            *[f"| sandboxed test run, isolation `{k}` | {v:.1f} ms |" for k, v in levels.items()],
            f"| {n_traj} x (reset + run_tests), serial / thread pool of 2 hosts | {serial:.2f} s / {pooled:.2f} s ({serial / pooled:.2f}x) |",
        ]
        write_section("envs_latency", "\n".join(rows))


if __name__ == "__main__":
    main()
