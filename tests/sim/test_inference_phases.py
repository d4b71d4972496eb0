"""A simulated worker's decode starts (what the world turns into `RequestPhase` events):
reporting them changes no completion, and each is reported when it happens."""

from collections import deque
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.control.state import Role
from pearl.sim.physics.inference import InferenceWorker
from pearl.sim.physics.iteration import WorkerHardware
from pearl.specs import get_gpu, get_model

from ._inference_helpers import budget_config, request_lists, run, submissions


def run_reporting(worker, submissions):
    """`run`, popping the decode starts after each advance; each must be due by then and
    not older than the previous wake-up (reported when it happens, not later)."""
    pending = deque(sorted(submissions, key=lambda x: x[0]))
    out, starts, last = [], [], 0.0
    while True:
        t_next = min(pending[0][0] if pending else float("inf"), worker.next_change_time_s())
        if t_next == float("inf"):
            return out, starts
        out += worker.advance(t_next)
        for key, t in worker.pop_decode_starts():
            assert last <= t <= t_next, (key, t, last, t_next)
            starts.append((key, t))
        last = t_next
        while pending and pending[0][0] <= t_next:
            worker.submit(pending.popleft()[1], t_next)


@settings(max_examples=80, deadline=None)
@given(
    reqs=request_lists,
    role=st.sampled_from([Role.COLOCATED, Role.PREFILL, Role.DECODE]),
    budget=st.sampled_from([512, 8192]),
    max_seqs=st.integers(1, 8),
)
def test_reporting_decode_starts_changes_no_completion(reqs, role, budget, max_seqs):
    hw = WorkerHardware(get_model("qwen3-8b"), get_gpu("h100-sxm"), tp=1)
    cfg = budget_config(budget, max_seqs)
    subs = submissions(reqs)
    quiet = run(InferenceWorker("w", hw, role, cfg), subs)
    loud = InferenceWorker("w", hw, role, replace(cfg, report_decode_starts=True))
    got, starts = run_reporting(loud, subs)
    assert got == quiet
    # every request that decoded here reported its start (once, unless preempted and
    # recomputed, which starts it again), at the time its completion records
    decoded = [c for c in got if c.t_decode_start_s is not None]
    assert len(starts) >= len(decoded)
    for c in decoded:
        assert (c.traj_id, c.t_decode_start_s) in starts or c.num_preemptions
    if role == Role.PREFILL:
        assert not starts
