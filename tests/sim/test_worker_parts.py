"""The parts a simulated worker's batching core holds: the lazily advanced decode set and the
segment times. Each is checked against the plain computation it stands for."""

from hypothesis import given, settings
from hypothesis import strategies as st
from sim_toys import toy

from pearl.sim.physics import segment_time
from pearl.sim.physics.decode_set import DecodeSet
from pearl.sim.physics.inference_types import Request
from pearl.sim.physics.worker_state import Seq


def _decoding_seq(admit_no: int, context: int, decode: int) -> Seq:
    s = Seq(Request(admit_no, 0, context, decode), 0.0, prefilled=True)
    s.admit(admit_no, 0.0, 0, context)
    return s


# each action: ("add", context, decode tokens) or ("step", n) or ("drop", index)
_actions = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 500), st.integers(1, 40)),
        st.tuples(st.just("step"), st.integers(1, 30)),
        st.tuples(st.just("drop"), st.integers(0, 10)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(actions=_actions)
def test_decode_set_matches_advancing_every_request(actions):
    """Advanced lazily, the set gives each request the tokens and KV that advancing every
    request each step gives, finishes the same requests in order, and its contexts' sum is
    the members' KV."""
    ds = DecodeSet()
    plain: dict[int, list[int]] = {}  # admit_no -> [generated, kv, decode tokens]
    seqs: dict[int, Seq] = {}
    finished_lazy: list[int] = []
    finished_plain: list[int] = []
    n_added = 0
    for act in actions:
        if act[0] == "add":
            n_added += 1
            s = _decoding_seq(n_added, act[1], act[2])
            ds.add(s, 0.0)
            seqs[n_added] = s
            plain[n_added] = [0, act[1], act[2]]
        elif act[0] == "step":
            for _ in range(act[1]):
                if not plain:
                    break
                want = min(v[2] - v[0] for v in plain.values())
                assert ds.steps_to_next_finish() == want
                for v in plain.values():
                    v[0] += 1
                    v[1] += 1
                ds.advance(1)
                done = sorted(k for k, v in plain.items() if v[0] >= v[2])
                for k in done:
                    del plain[k]
                finished_plain += done
                finished_lazy += [s.admit_no for s in ds.pop_finished()]
        elif plain:
            k = sorted(plain)[act[1] % len(plain)]
            ds.remove(seqs[k])
            del plain[k]
        assert len(ds) == len(plain)
        assert ds.ctx_sum == sum(v[1] for v in plain.values())
    assert finished_lazy == finished_plain
    ds.sync_all()
    for k, v in plain.items():
        assert (seqs[k].generated, seqs[k].kv) == (v[0], v[1])
        assert ds.holds(seqs[k])


@settings(max_examples=200, deadline=None)
@given(
    d=st.integers(1, 64),
    ctx=st.integers(1, 200_000),
    iters=st.integers(1, 500),
    frac=st.floats(0.0, 1.2),
)
def test_a_truncated_stretch_ends_at_its_first_boundary_after_the_arrival(d, ctx, iters, frac):
    hw = toy()
    seg = segment_time.decode_stretch(hw, 5.0, d, ctx, iters)
    assert seg.end_s == 5.0 + segment_time.elapsed_s(hw, seg, iters)
    now = 5.0 + frac * (seg.end_s - 5.0)
    done = segment_time.iters_done_by(hw, seg, now)
    assert 0 <= done <= iters
    assert segment_time.elapsed_s(hw, seg, done) <= now - 5.0 + 1e-9
    segment_time.truncate_stretch(hw, seg, now)
    assert seg.iters <= iters
    if 5.0 < now < 5.0 + segment_time.elapsed_s(hw, seg, iters):
        assert seg.end_s >= now - 1e-9  # the arrival joins at the boundary after it
        assert (
            seg.iters == iters or seg.start_s + segment_time.elapsed_s(hw, seg, seg.iters - 1) < now
        )
