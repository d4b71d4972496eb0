"""The hardware model against published measurements (pearl.sim.calibration_refs): every
reference row within its stated tolerance, and the serving benchmark loop itself."""

from __future__ import annotations

import pytest

from pearl.sim.calibration_refs import REFERENCES, closed_loop_serving
from pearl.sim.physics.iteration import WorkerHardware
from pearl.specs import get_gpu, get_model


@pytest.mark.parametrize("ref", REFERENCES, ids=lambda r: r.key)
def test_reference_within_tolerance(ref) -> None:
    """Each published figure is reproduced within its row's tolerance."""
    v = ref.evaluate()
    assert v.ok, v.row()


def test_serving_loop_counts_every_token_and_batches_decodes() -> None:
    """The closed loop finishes every request with all its tokens; concurrency raises
    throughput and (memory-bound decode, shared weight reads) costs less than linearly."""
    hw = WorkerHardware(get_model("llama-3.1-8b"), get_gpu("a100-40g"))
    one = closed_loop_serving(
        hw, concurrency=1, prompt_tokens=512, output_tokens=64, num_requests=5
    )
    four = closed_loop_serving(
        hw, concurrency=4, prompt_tokens=512, output_tokens=64, num_requests=20
    )
    assert one.mean_tpot_s == pytest.approx(hw.decode_step_time_s(1, 512 + 32), rel=0.05)
    assert 2.0 < four.output_tokens_per_s / one.output_tokens_per_s < 4.0
    assert four.mean_tpot_s > one.mean_tpot_s
