"""The simulated world end to end with the real controller: small batches, short runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pearl.control import events as E
from pearl.sim.config import SimConfig
from pearl.sim.playback import TraceAction
from pearl.sim.policy_run import run_policy

SMALL_WORKLOAD = {
    "num_turns_median": 4,
    "num_turns_p90": 6,
    "min_turns": 2,
    "max_turns": 8,
    "run_to_cap_fraction": 0.0,
}


def small(**updates: object) -> SimConfig:
    base = {
        "check_every": 1,
        "rollout.batch_size": 8,
        "rollout.workload": SMALL_WORKLOAD,
        "trace.duration_s": 600.0,
        "cluster.num_training_gpus": 4,
        "cluster.num_dedicated_gpus": 2,
    }
    base.update(updates)
    return SimConfig().with_updates(**base)


def _turns_by_traj(run) -> dict[str, list]:
    out: dict[str, list] = {}
    for rec in run.world.finished_turns:
        out.setdefault(rec.traj_id, []).append(rec)
    return out


def test_static_colocated_run_completes_steps_and_trains() -> None:
    """Two colocated workers finish rollout steps; the trainer trains on them in order."""
    run = run_policy(small(**{"trace.static_gpus": 2}), "fixed:colocated")
    s = run.summary
    assert s["rollout_steps"] >= 2 and s["train_steps"] >= 1
    assert s["trajectories"] >= 8 * s["rollout_steps"]
    steps = run.world.trainer.steps
    assert [t.step for t in steps] == list(range(len(steps)))
    assert all(a.end_s <= b.start_s for a, b in zip(steps, steps[1:], strict=False))
    assert s["gpu_hours"]["total"] == pytest.approx(2 * 600 / 3600)


def test_every_finished_trajectory_has_all_its_turns_in_order() -> None:
    """Telemetry holds each turn of a finished trajectory once, with ordered timestamps."""
    run = run_policy(small(**{"trace.static_gpus": 2}), "fixed:colocated")
    by_traj = _turns_by_traj(run)
    finished = [
        tr
        for tr in run.world.trajs.values()
        if tr.done and tr.step in {r.step for r in run.world.finished_turns}
    ]
    assert finished
    for tr in finished:
        recs = by_traj[tr.traj_id]
        assert [r.turn for r in recs] == list(range(tr.traj.num_turns))
        assert sum(r.decode_tokens for r in recs) == tr.traj.decode_tokens
        for r in recs:
            assert r.t_queued_s <= r.t_prefill_start_s <= r.t_prefill_end_s
            assert r.t_prefill_end_s <= r.t_decode_start_s <= r.t_decode_end_s
            assert r.roles == ("colocated",) and r.t_kv_start_s is None
        for a, b in zip(recs, recs[1:], strict=False):
            assert a.t_env_end_s is not None and a.t_env_end_s <= b.t_queued_s + 1e-9


def test_disaggregated_turns_transfer_kv_between_workers() -> None:
    """With 1 prefill + 1 decode worker every turn moves its KV, after its prefill."""
    run = run_policy(small(**{"trace.static_gpus": 2}), "fixed:disagg:1:1")
    recs = run.world.finished_turns
    assert recs
    moved = [r for r in recs if r.t_kv_start_s is not None]
    assert len(moved) >= 0.9 * len(recs)
    for r in moved:
        assert r.prefill_worker != r.decode_worker
        assert r.t_prefill_end_s <= r.t_kv_start_s < r.t_kv_end_s <= r.t_decode_start_s + 1e-9


def test_kv_moves_over_nvlink_within_a_server_and_over_the_nic_across() -> None:
    """Two workers on one 8-GPU server move a turn's KV at NVLink speed; one GPU a server
    (`cluster.gpus_per_node: 1`), the same turns pay the NIC: the transfer times are the
    hardware model's for each link, and the NIC's are the longer."""
    from pearl.sim.physics.iteration import WorkerHardware
    from pearl.specs import get_gpu, get_model

    hw = WorkerHardware(get_model("qwen3-8b"), get_gpu("h100-sxm"), 1)
    for per_node, same in ((8, True), (1, False)):
        cfg = small(**{"trace.static_gpus": 2, "cluster.gpus_per_node": per_node})
        moved = [
            r
            for r in run_policy(cfg, "fixed:disagg:1:1").world.finished_turns
            if r.t_kv_start_s is not None
        ]
        assert moved
        for r in moved[:50]:  # the prompt's KV (its first token's is within the 5%)
            want = hw.kv_transfer_time_s(r.context_tokens, same_node=same)
            assert r.t_kv_end_s - r.t_kv_start_s == pytest.approx(want, rel=0.05)
    assert hw.kv_transfer_time_s(16384, same_node=False) > 5 * hw.kv_transfer_time_s(
        16384, same_node=True
    )


def test_same_seed_same_summary_other_seed_differs() -> None:
    """A run is a pure function of its config and seed."""
    a = run_policy(small(**{"trace.static_gpus": 2}), "fixed:colocated").summary
    b = run_policy(small(**{"trace.static_gpus": 2}), "fixed:colocated").summary
    c = run_policy(small(**{"trace.static_gpus": 2, "seed": 1}), "fixed:colocated").summary
    assert a == b
    assert a != c


def test_reclaim_notice_preserves_generated_prefix() -> None:
    """GPUs reclaimed mid-run: interrupted turns keep their tokens and finish elsewhere."""
    offer = TraceAction(0.0, "offer", ("pre0", "pre1"))
    notice = TraceAction(200.0, "notice", ("pre0", "pre1"), deadline_s=230.0)
    gone = TraceAction(230.0, "gone", ("pre0", "pre1"))
    run = run_policy(small(), "rlboost+", actions=[offer, notice, gone])
    assert run.log.events_by_kind["RequestInterrupted"] > 0, "the reclaim interrupts requests"
    assert run.summary["reconfigurations"]["reclaim"] == 1
    assert not any(g.startswith("pre") for g in run.world.gpus)
    resumed = [r for r in run.world.finished_turns if r.resumed]
    assert resumed
    by_traj = _turns_by_traj(run)
    for tr in run.world.trajs.values():
        if tr.done and tr.traj_id in by_traj and len(by_traj[tr.traj_id]) == tr.traj.num_turns:
            assert sum(r.decode_tokens for r in by_traj[tr.traj_id]) == tr.traj.decode_tokens
    # After the deadline no worker lives on the reclaimed GPUs.
    for t, state in run.log.history:
        if t >= 230.0:
            assert all(not g.startswith("pre") for w in state.workers for g in w.gpu_ids)


def test_borrowed_training_gpus_are_home_for_every_training_step() -> None:
    """Training never runs while one of its GPUs still serves rollout."""
    run = run_policy(small(**{"trace.duration_s": 900.0}), "pearl-ungated", actions=[])
    assert run.summary["reconfigurations"]["borrow"] > 0
    steps = run.world.trainer.steps
    assert steps
    train_ids = set(run.world.trainer.gpu_ids)
    history = run.log.history
    for st in steps:
        for t, state in history:
            if st.start_s <= t < st.end_s:
                bound = {g for w in state.workers for g in w.gpu_ids}
                assert not bound & train_ids, f"training GPU serving at {t:.1f}s"


def test_returns_are_measured_as_deactivation_costs() -> None:
    """Each borrow's return ends in TrainingRestored after the world's deactivation time;
    the controller's gate book learns that cost (within the configured range)."""
    cfg = small(**{"trace.duration_s": 900.0})
    run = run_policy(cfg, "pearl-ungated", actions=[])
    assert run.summary["reconfigurations"]["borrow"] > 0
    costs = run.controller.advisor.costs  # the decision engine's advisor
    assert costs.num_observed("deactivation", borrowing=True) > 0
    low, high = cfg.costs.borrow_deactivation_s.low_s, cfg.costs.borrow_deactivation_s.high_s
    assert low <= costs.cost("deactivation", borrowing=True) <= high


def test_interrupt_event_counts_match_world() -> None:
    """Every RequestInterrupted the controller saw was produced by the world."""
    offer = TraceAction(0.0, "offer", ("pre0",))
    gone = TraceAction(150.0, "gone", ("pre0",))
    run = run_policy(small(), "rlboost+", actions=[offer, gone])
    st = run.world.stats
    assert run.log.events_by_kind["RequestInterrupted"] == (
        st.interrupted_requests + st.bounced_routes
    )
    assert run.log.events_by_kind[E.GpusGone.__name__] == 1


def test_turn_record_counts_recomputed_prefill_once() -> None:
    """Prefill work beyond the context (recompute after preemption) still gives a valid record."""
    from pearl.sim.telemetry_out import TurnTiming, turn_record

    t = TurnTiming(
        t_queued_s=1.0,
        prefill_worker="w0",
        roles=("colocated",),
        new_prefill_tokens=5000,
        cached_prefix_tokens=800,
        context_tokens=3000,
        t_prefill_start_s=1.5,
        t_prefill_end_s=2.0,
        t_decode_start_s=2.0,
    )
    rec = turn_record(
        t,
        traj_id="s0-0",
        turn=0,
        step=0,
        decode_tokens=10,
        t_decode_end_s=3.0,
        t_env_start_s=3.0,
        t_env_end_s=4.0,
    )
    assert rec.new_prefill_tokens == 3000 and rec.cached_prefix_tokens == 0
    assert rec.context_tokens == 3000


@pytest.mark.parametrize("seed", [0, 2])
def test_reroute_of_a_request_that_moved_on_supersedes_it(seed: int) -> None:
    """Disaggregated, the GPUs of prefill workers reclaimed: the controller counts every
    trajectory routed through them as interrupted and routes it again, although some have
    already handed their KV to a surviving decode worker. The world follows the new route
    (aborting the old request where it is) instead of ignoring it: before, those
    trajectories waited forever and the run stopped after 4 rollout steps."""
    import dataclasses

    from pearl.sim.policy_run import make_policy

    policy = dataclasses.replace(
        make_policy("pearl"),
        name="pearl-disaggregated",
        modes=("disaggregated",),
        gate_expansion=False,
        borrow="never",
    )
    lost = ("pre0", "pre1", "pre2")
    actions = [
        TraceAction(0.0, "offer", ("pre0", "pre1", "pre2", "pre3")),
        TraceAction(150.0, "notice", lost, deadline_s=150.0),
        TraceAction(150.0, "gone", lost),
    ]
    run = run_policy(small(seed=seed, **{"trace.duration_s": 900.0}), policy, actions=actions)
    assert run.summary["reconfigurations"]["reclaim"] == 1
    assert run.summary["rollout_steps"] >= 15
    for t in run.controller.book:  # whatever the book has in flight, the world has too
        if t.state.value in ("prefill", "kv_transfer", "decode"):
            assert run.world.trajs[t.traj_id].route is not None, t.traj_id


def test_rollout_steps_span_first_queue_to_last_turn_end():
    """A simulated run directory's per-step makespan: first queue to the last turn's end
    (its environment step included when it has one), with its trajectories counted."""
    from pearl.control.telemetry import turn_record
    from pearl.sim.telemetry_out import rollout_steps

    def rec(step, k, t0, t1, env_end):
        return turn_record(
            traj_id=f"s{step}t{k}", turn=0, step=step, weight_version=0, prefill_worker="w",
            decode_worker="w", roles=("colocated",), context_tokens=10, cached_prefix_tokens=0,
            decode_tokens=1, t_queued_s=t0 + k, t_prefill_start_s=t0 + k,
            t_prefill_end_s=t0 + k, t_kv_start_s=None, t_kv_end_s=None,
            t_decode_start_s=t0 + k, t_decode_end_s=t1 - 1.0,
            t_env_start_s=None if env_end is None else t1 - 1.0,
            t_env_end_s=env_end,
        )  # fmt: skip

    turns = [rec(s, k, t0, t1, t1 if k == 2 else None) for s, (t0, t1) in enumerate([(0.0, 5.0), (5.0, 12.0)]) for k in range(3)]  # fmt: skip
    got = [(d["step"], d["rollout_makespan_s"], d["trajectories"]) for d in rollout_steps(turns)]
    assert got == [(0, 5.0, 3), (1, 7.0, 3)]
    assert [d["generated_tokens"] for d in rollout_steps(turns)] == [3, 3]
    assert [d["interrupted_trajectories"] for d in rollout_steps(turns)] == [0, 0]
    cut = [replace(t, interrupted=True) if t.traj_id == "s1t0" else t for t in turns]
    assert [d["interrupted_trajectories"] for d in rollout_steps(cut)] == [0, 1]
    # the world's span of a step (batch start to its last trajectory done) wins, and the
    # engine's prediction at its start rides along
    docs = rollout_steps(turns, {1: (4.0, 12.5)}, {1: 8.0})
    assert [(d["rollout_makespan_s"], d["predicted_makespan_s"]) for d in docs] == [
        (5.0, None),
        (8.5, 8.0),
    ]
