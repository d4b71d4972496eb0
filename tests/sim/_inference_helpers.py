"""Shared by the simulated inference worker tests: the event-loop driver and the strategy
for random request lists."""

from collections import deque

from hypothesis import strategies as st

from pearl.sim.physics.inference_types import Request, WorkerConfig


def run(worker, submissions):
    """Drive one worker like the event loop does; returns completions in time order.

    Checks that no completion comes late: none ends before the wake-up time the worker
    asked for (`next_change_time_s` never overshoots a completion)."""
    pending = deque(sorted(submissions, key=lambda x: x[0]))
    out = []
    while True:
        wake = worker.next_change_time_s()
        t_next = min(pending[0][0] if pending else float("inf"), wake)
        if t_next == float("inf"):
            return out
        done = worker.advance(t_next)
        assert all(c.t_end_s >= wake for c in done), "a completion was reported late"
        out += done
        while pending and pending[0][0] <= t_next:
            worker.submit(pending.popleft()[1], t_next)


request_lists = st.lists(
    st.tuples(
        st.floats(0.0, 3.0),  # submit time
        st.integers(0, 5),  # trajectory (repeats give prefix-cache hits)
        st.integers(1, 12_000),  # context tokens
        st.integers(1, 400),  # decode tokens
        st.integers(0, 3),  # generated already (resumed)
        st.booleans(),  # full prefill
    ),
    min_size=1,
    max_size=12,
)


def submissions(reqs):
    """(submit time, Request) pairs from a `request_lists` draw (decode > generated)."""
    return [
        (
            round(t, 3),
            Request(traj, i, ctx, max(dec, gen + 1), generated_tokens=gen, full_prefill=full),
        )
        for i, (t, traj, ctx, dec, gen, full) in enumerate(reqs)
    ]


def budget_config(budget, max_seqs):
    """A worker config with one token budget for both roles."""
    return WorkerConfig(
        max_batched_tokens=budget, prefill_max_batched_tokens=budget, max_num_seqs=max_seqs
    )
