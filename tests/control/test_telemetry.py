"""The telemetry schema: round trips, validation, and errors that name file, line and field."""

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.control.telemetry import TelemetryError, TurnRecord, WorkerStepRecord
from pearl.control.telemetry_jsonl import TelemetryMeta, parse_jsonl, read_jsonl, write_jsonl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "telemetry.jsonl"


def turn(**kw) -> TurnRecord:
    base = dict(
        traj_id="t0", turn=0, step=0, weight_version=3, prefill_worker="w0",
        decode_worker="w1", roles=("prefill", "decode"), new_prefill_tokens=900,
        cached_prefix_tokens=100, decode_tokens=250, context_tokens=1000,
        t_queued_s=0.0, t_prefill_start_s=0.5, t_prefill_end_s=0.6, t_kv_start_s=0.6,
        t_kv_end_s=0.65, t_decode_start_s=0.7, t_decode_end_s=3.0, t_env_start_s=3.0,
        t_env_end_s=4.5,
    )  # fmt: skip
    base.update(kw)
    return TurnRecord(**base)


STEP = WorkerStepRecord("w1", "decode", 0, 1.0, 12, 0, 12, 48000, 0.021)


def test_round_trip_and_derived_durations():
    rec = turn()
    buf = io.StringIO()
    assert write_jsonl(buf, [rec, STEP], TelemetryMeta("qwen3-8b", "h100-sxm", 2)) == 3
    tel = parse_jsonl(buf.getvalue().splitlines())
    assert tel.turns == (rec,) and tel.worker_steps == (STEP,)
    assert tel.meta == TelemetryMeta("qwen3-8b", "h100-sxm", 2)
    assert rec.prefill_s == pytest.approx(0.1) and rec.kv_s == pytest.approx(0.05)
    assert rec.env_s == pytest.approx(1.5) and rec.t_end_s == 4.5


def test_colocated_and_last_turn_have_null_pairs():
    rec = turn(roles=("colocated",), decode_worker="w0", t_kv_start_s=None, t_kv_end_s=None,
               t_env_start_s=None, t_env_end_s=None)  # fmt: skip
    assert rec.kv_s is None and rec.env_s is None and rec.t_end_s == 3.0
    assert TurnRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (dict(decode_tokens=-1), "decode_tokens"),
        (dict(new_prefill_tokens=2000), "context_tokens"),
        (dict(t_prefill_start_s=-1.0), "t_prefill_start_s"),
        (dict(t_decode_end_s=0.1), "t_decode_end_s"),
        (dict(t_kv_end_s=None), "t_kv_end_s"),
        (dict(roles=("driver",)), "roles"),
        (dict(turn=1.5), "turn"),
    ],
)
def test_invalid_turns_name_the_field(change, field):
    with pytest.raises(TelemetryError) as err:
        turn(**change)
    assert err.value.field == field


def test_worker_step_validation():
    with pytest.raises(TelemetryError, match="role"):
        replace(STEP, role="trainer")
    with pytest.raises(TelemetryError, match="step_time_s"):
        replace(STEP, step_time_s=-0.1)


def _lines(*docs) -> list[str]:
    return [json.dumps(d) for d in docs]


def test_errors_name_source_line_and_field():
    good = turn().to_json()
    bad = dict(good, decode_tokens=-5)
    with pytest.raises(TelemetryError) as err:
        parse_jsonl(_lines(good, bad), "run.jsonl")
    assert str(err.value).startswith("run.jsonl:line 2: field 'decode_tokens'")
    missing = {k: v for k, v in good.items() if k != "t_queued_s"}
    with pytest.raises(TelemetryError, match="line 1: field 't_queued_s': missing"):
        parse_jsonl(_lines(missing), "run.jsonl")
    with pytest.raises(TelemetryError, match="field 'colour': unknown field"):
        parse_jsonl(_lines(dict(good, colour="red")), "run.jsonl")
    with pytest.raises(TelemetryError, match="line 3: not valid JSON"):
        parse_jsonl(["", "# comment", "{nope"], "run.jsonl")
    with pytest.raises(TelemetryError, match="field 'kind'"):
        parse_jsonl(_lines({"kind": "span"}), "run.jsonl")


def test_missing_file(tmp_path):
    with pytest.raises(TelemetryError, match="file not found"):
        read_jsonl(tmp_path / "none.jsonl")


def test_example_file_reads_by_step():
    tel = read_jsonl(EXAMPLE)
    assert tel.meta.model == "qwen3-8b" and tel.steps() == [0, 1]
    for step, turns, steps in tel.by_step():
        assert turns and steps
        assert all(t.step == step for t in turns) and all(w.step == step for w in steps)
    assert {t.roles for t in tel.turns} == {("colocated",), ("prefill", "decode")}


def test_worker_step_kv_capacity_is_optional_and_checked():
    doc = STEP.to_json()
    assert doc["kv_capacity_tokens"] is None
    doc.pop("kv_capacity_tokens")
    assert WorkerStepRecord.from_json(doc) == STEP  # older files without the field still read
    doc["kv_capacity_tokens"] = 120_000
    assert WorkerStepRecord.from_json(doc).kv_capacity_tokens == 120_000
    doc["kv_capacity_tokens"] = -1
    with pytest.raises(TelemetryError) as err:
        WorkerStepRecord.from_json(doc, source="t.jsonl", location="line 3")
    assert err.value.field == "kv_capacity_tokens" and "t.jsonl:line 3" in str(err.value)


_t = st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False)
_maybe_t = st.one_of(st.none(), _t)


@given(
    times=st.tuples(_t, _maybe_t, _maybe_t, _maybe_t, _maybe_t, _maybe_t, _t),
    context=st.integers(0, 10_000),
    new=st.one_of(st.none(), st.integers(0, 20_000)),
    cached=st.integers(-5, 20_000),
    decode=st.integers(0, 5_000),
)
def test_the_one_turn_record_constructor_always_yields_a_valid_record(
    times, context, new, cached, decode
):
    """Whatever either world measured (skewed clocks, missing phases, recomputed prefill),
    `turn_record` returns a record the schema accepts: times in order, context counted once."""
    from pearl.control.telemetry import turn_record

    q, ps, pe, ks, ke, ds, de = times
    rec = turn_record(
        traj_id="t",
        turn=0,
        step=0,
        weight_version=0,
        prefill_worker="w0",
        decode_worker="w0",
        roles=("colocated",),
        context_tokens=context,
        new_prefill_tokens=new,
        cached_prefix_tokens=cached,
        decode_tokens=decode,
        t_queued_s=q,
        t_prefill_start_s=ps,
        t_prefill_end_s=pe,
        t_kv_start_s=ks,
        t_kv_end_s=ke,
        t_decode_start_s=ds,
        t_decode_end_s=de,
    )
    assert rec.t_queued_s <= rec.t_prefill_start_s <= rec.t_prefill_end_s
    assert rec.t_prefill_end_s <= rec.t_decode_start_s <= rec.t_decode_end_s
    assert (rec.t_kv_start_s is None) == (rec.t_kv_end_s is None)
    assert rec.new_prefill_tokens + rec.cached_prefix_tokens <= rec.context_tokens
    assert rec.context_tokens == max(context, 1)
    if new is None:
        assert rec.new_prefill_tokens + rec.cached_prefix_tokens == rec.context_tokens
    assert TurnRecord.from_json(rec.to_json()) == rec
