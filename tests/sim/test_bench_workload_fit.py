"""`python -m bench.workload_fit --quick` runs the round trip end to end (one workload,
one seed, short runs) without touching BENCHMARKS.md."""

from __future__ import annotations

from bench_run import ROOT, run_bench


def test_the_round_trip_benchmark_runs_and_leaves_benchmarks_md_alone() -> None:
    before = (ROOT / "BENCHMARKS.md").read_text()
    run_bench("workload_fit", "--quick")
    assert (ROOT / "BENCHMARKS.md").read_text() == before
