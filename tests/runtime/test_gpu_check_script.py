"""bench/gpu_check.py is what a session with a GPU runs once, in minutes it cannot spend on
debugging: its `--tiny` mode runs the same code on the CPU (PEARL's engine, then vLLM's CPU
build: step times, weight reload, release/restore, a PD handoff), so it is kept working."""

import json
from pathlib import Path

from bench_run import run_bench


def test_gpu_check_runs_every_part_on_a_tiny_model(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    run_bench("gpu_check", "--tiny", "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["device"] == "cpu" and doc["model"] == "tiny"
    for part in ("pearl_engine", "vllm"):
        assert "error" not in doc[part] and "skipped" not in doc[part], doc[part]
        assert all(t > 0 for t in doc[part]["prefill_step_s"].values())
        assert all(t > 0 for t in doc[part]["decode_step_s"].values())
    vllm = doc["vllm"]
    assert vllm["pd_tokens_equal_colocated"] is True and vllm["backend_check"] is True
    assert vllm["pd_kv_bytes"] > 0
    # no CUDA: nothing to measure, and nothing claimed
    assert vllm["sleep_freed_bytes"] is None
