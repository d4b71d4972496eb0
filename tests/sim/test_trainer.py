"""The trainer: step time from tokens, idle windows, mandatory return of lent GPUs."""

from __future__ import annotations

from pearl.sim.config import CostConfig, TrainerConfig
from pearl.sim.core import EventCore
from pearl.sim.trainer import Trainer, TrainerCallbacks, step_time_s

GPUS = tuple(f"t{i}" for i in range(4))


def _run(core: EventCore) -> None:
    while (h := core.pop()) is not None:
        h.payload()


def _trainer(core: EventCore, log: list) -> Trainer:
    cb = TrainerCallbacks(
        on_idle=lambda ids, until: log.append(("idle", core.now_s, until)),
        on_wants=lambda ids, deadline: log.append(("wants", core.now_s, ids, deadline)),
        on_step_finished=lambda v: log.append(("done", core.now_s, v)),
    )
    return Trainer(
        core,
        TrainerConfig(overhead_s=10.0, mfu=0.5),
        CostConfig(),
        gpu_ids=GPUS,
        active_params=1e9,
        peak_flops_per_s=1e12,
        callbacks=cb,
        expected_ready_s=lambda: core.now_s + 100.0,
    )


def test_step_time_is_overhead_plus_flops() -> None:
    """10 N FLOPs per token over num_gpus * peak * mfu, plus the fixed overhead."""
    cfg = TrainerConfig(overhead_s=10.0, mfu=0.5, flops_per_token_factor=10.0)
    t = step_time_s(cfg, num_tokens=1000, active_params=1e9, num_gpus=4, peak_flops_per_s=1e12)
    assert abs(t - (10.0 + 10 * 1e9 * 1000 / (4 * 1e12 * 0.5))) < 1e-9


def test_steps_run_in_order_and_publish_versions() -> None:
    """Batch 1 ready before batch 0 waits; versions come out 1 then 2."""
    core, log = EventCore(0), []
    tr = _trainer(core, log)
    tr.start()
    tr.batch_ready(1, 1000)
    assert not tr.training
    tr.batch_ready(0, 1000)
    _run(core)
    done = [e for e in log if e[0] == "done"]
    assert [v for *_, v in done] == [1, 2]
    one = tr.step_time_s(1000)
    assert abs(done[0][1] - one) < 1e-9 and abs(done[1][1] - 2 * one) < 1e-9
    assert log[-1][0] == "idle"


def test_lent_gpus_delay_the_step_until_restored() -> None:
    """A ready batch with lent GPUs asks for them back and starts after deactivation."""
    core, log = EventCore(3), []
    tr = _trainer(core, log)
    assert tr.offload(GPUS[:2])
    tr.batch_ready(0, 1000)
    wants = [e for e in log if e[0] == "wants"]
    assert len(wants) == 1 and wants[0][2] == GPUS[:2]
    assert wants[0][3] == CostConfig().borrow_deactivation_s.high_s
    back = tr.restore(GPUS[:2])
    c = CostConfig().borrow_deactivation_s
    assert c.low_s <= back <= c.high_s
    _run(core)
    assert tr.steps[0].start_s == back
    assert abs(tr.wait_for_gpus_s - back) < 1e-9


def test_offload_refused_while_training() -> None:
    """GPUs can be lent only in an idle window."""
    core, log = EventCore(0), []
    tr = _trainer(core, log)
    tr.batch_ready(0, 1000)
    assert tr.training and not tr.offload(GPUS)
    assert not tr.lent


def test_default_step_time_is_calibrated_to_the_paper() -> None:
    """Qwen3-8B, 16 training GPUs, a batch of 64 default trajectories: about 164 s."""
    from pearl.sim.bound import train_step_s
    from pearl.sim.config import SimConfig

    assert 150.0 <= train_step_s(SimConfig()) <= 180.0
