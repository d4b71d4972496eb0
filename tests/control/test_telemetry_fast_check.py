"""The turn record's quick validity path agrees with the per-field check (same error, same
field) for any single bad or unusual value."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.control.telemetry import TelemetryError, TurnRecord, _check_fields

GOOD = dict(
    traj_id="t0", turn=0, step=0, weight_version=3, prefill_worker="w0",
    decode_worker="w1", roles=("prefill", "decode"), new_prefill_tokens=900,
    cached_prefix_tokens=100, decode_tokens=250, context_tokens=1000,
    t_queued_s=0.0, t_prefill_start_s=0.5, t_prefill_end_s=0.6, t_kv_start_s=0.6,
    t_kv_end_s=0.65, t_decode_start_s=0.7, t_decode_end_s=3.0, t_env_start_s=3.0,
    t_env_end_s=4.5,
)  # fmt: skip
NUMERIC = [k for k, v in GOOD.items() if isinstance(v, int | float)]
ODD = st.one_of(
    st.just(None),
    st.booleans(),
    st.integers(-3, 5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=2),
)


def _reference(doc: dict) -> str | None:
    """The field the per-field check rejects first (None: it accepts them all), on a record
    built without TurnRecord's own check."""
    rec = object.__new__(TurnRecord)
    for k, v in doc.items():
        object.__setattr__(rec, k, v)
    try:
        _check_fields(rec, lambda n, m: TelemetryError("<record>", m, field=n))
    except TelemetryError as err:
        return err.field
    return None


@given(st.sampled_from(NUMERIC), ODD)
def test_one_odd_value_is_judged_as_the_per_field_check_does(name, value):
    doc = {**GOOD, name: value}
    want = _reference(doc)
    try:
        TurnRecord(**doc)
    except TelemetryError as err:
        got = err.field
    else:
        got = None
    if want is not None:
        assert got == want
    else:  # fields fine: only the cross-field checks (sizes, time order) may reject it
        assert got is None or got == "context_tokens" or got.startswith("t_")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(t_queued_s=math.inf), "t_queued_s"),
        (dict(t_env_end_s=math.nan), "t_env_end_s"),
        (dict(step=True), "step"),
        (dict(t_prefill_end_s=None), "t_prefill_end_s"),
        (dict(decode_tokens=-1, t_queued_s=math.inf), "decode_tokens"),
    ],
)
def test_first_bad_field_is_named(change, field):
    with pytest.raises(TelemetryError) as err:
        TurnRecord(**{**GOOD, **change})
    assert err.value.field == field


def test_int_seconds_are_accepted_as_before():
    rec = TurnRecord(**{**GOOD, "t_queued_s": 0, "t_decode_end_s": 3})
    assert rec.t_queued_s == 0
