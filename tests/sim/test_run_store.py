"""Finished simulations kept on disk (`pearl.sim.run_store`): found again only under the
same config and code, read back instead of simulated, and a damaged entry simulated again."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl.sim import compare, run_store
from pearl.sim.compare import run_simulation
from pearl.sim.config import SimConfig
from pearl.sim.run_store import RunStore

SMALL = {
    "trace.static_gpus": 2,
    "trace.duration_s": 300.0,
    "rollout.batch_size": 8,
    "policies": ["fixed:colocated", "pearl"],
}


def _cfg(**more: object) -> SimConfig:
    return SimConfig().with_updates(**SMALL, **more)


def test_the_key_is_the_config_and_whether_the_bound_is_asked(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    a = store.key(_cfg(), with_bound=False)
    assert a == store.key(_cfg(), with_bound=False)
    assert a != store.key(_cfg(), with_bound=True)
    assert a != store.key(_cfg(seed=1), with_bound=False)
    assert a != store.key(_cfg(**{"engine.max_num_seqs": 64}), with_bound=False)


def test_the_key_follows_the_files_the_config_names(tmp_path: Path) -> None:
    """A model, GPU or trace file edited under the same name is another setting."""
    import json

    from model_files import hf_config, write_hf_config

    model = write_hf_config(tmp_path / "mine", "qwen3-8b")
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"name": "t", "duration_s": 600, "changes": [
        {"time_s": 0, "num_gpus": 2}]}))  # fmt: skip
    card = tmp_path / "card.yaml"
    card.write_text("bf16_tflops: 989\nhbm_tb_s: 3.35\nhbm_gb: 85\nnvlink_gb_s_per_dir: 450\n")
    store = RunStore(tmp_path / "runs")
    cfg = SimConfig().with_updates(
        **{"cluster.model": str(model), "cluster.gpu": str(card), "trace.trace": str(trace)}
    )
    keys = [store.key(cfg, with_bound=False)]
    assert keys[0] == store.key(cfg, with_bound=False)
    model.write_text(json.dumps(hf_config("qwen3-8b", num_hidden_layers=32)))
    keys.append(store.key(cfg, with_bound=False))
    card.write_text("bf16_tflops: 989\nhbm_tb_s: 4.8\nhbm_gb: 150\nnvlink_gb_s_per_dir: 450\n")
    keys.append(store.key(cfg, with_bound=False))
    trace.write_text(json.dumps({"name": "t", "duration_s": 600, "changes": [
        {"time_s": 0, "num_gpus": 3}]}))  # fmt: skip
    keys.append(store.key(cfg, with_bound=False))
    assert len(set(keys)) == 4


def test_a_stored_setting_is_read_back_not_simulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RunStore(tmp_path / "runs")
    cfg = _cfg()
    with run_store.use(store):
        first = run_simulation(cfg, with_bound=False)
    assert store.num_written == 1 and len(store) == 1

    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated a stored setting again")

    monkeypatch.setattr(compare, "_simulate", no_simulation)
    seen: list[str] = []
    with run_store.use(RunStore(tmp_path / "runs")) as again:
        kept = run_simulation(cfg, with_bound=False, progress=lambda s, d, t: seen.append(s))
    assert again is not None and again.num_read == 1
    assert kept.to_json() == first.to_json()
    assert [r.log.history for r in kept.runs] == [r.log.history for r in first.runs]
    assert len(seen) == 2 and all("(stored)" in s for s in seen)
    # per-turn telemetry is not kept, so a stored result cannot pass for a run directory
    assert first.runs[0].turns and not kept.runs[0].turns
    with pytest.raises(ValueError, match="keeps no telemetry"):
        kept.write(tmp_path / "out")
    # another setting is not in the store; outside `use` nothing is read
    with pytest.raises(AssertionError, match="simulated a stored setting again"):
        with run_store.use(store):
            run_simulation(_cfg(seed=1), with_bound=False)
    with pytest.raises(AssertionError):
        run_simulation(cfg, with_bound=False)
    assert run_store.active() is None


def test_a_damaged_entry_is_reported_and_simulated_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = RunStore(tmp_path)
    cfg = _cfg()
    with run_store.use(store):
        first = run_simulation(cfg, with_bound=False)
    path = store.path(store.key(cfg, with_bound=False))
    path.write_bytes(path.read_bytes()[:100])  # damaged (writes are atomic; a copy may not be)
    with run_store.use(store):
        again = run_simulation(cfg, with_bound=False)
    err = capsys.readouterr().err
    assert str(path) in err and "simulating it again" in err
    assert again.to_json() == first.to_json()
    assert store.get(cfg, with_bound=False) is not None  # overwritten whole


def test_a_static_rate_behind_the_bound_is_kept_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ladder's breakdown and the bound measure static runs (`static_rate`); a rerun
    reads their rates back instead of running them again."""
    from pearl.sim import bound

    cfg = _cfg()
    monkeypatch.setattr(bound, "RATE_CACHE", {})
    with run_store.use(RunStore(tmp_path)):
        first = bound.static_rate(cfg, 2, "fixed:colocated", 300.0)
    assert len(list(tmp_path.glob("rate-*.pkl"))) == 1
    assert len(RunStore(tmp_path)) == 1  # a part counts as a stored simulation

    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("ran a static run the store holds")

    monkeypatch.setattr(bound, "RATE_CACHE", {})
    monkeypatch.setattr(bound, "run_policy", no_run)
    with run_store.use(RunStore(tmp_path)):
        assert bound.static_rate(cfg, 2, "fixed:colocated", 300.0) == first
    monkeypatch.setattr(bound, "RATE_CACHE", {})
    with pytest.raises(AssertionError, match="ran a static run"):
        bound.static_rate(cfg, 2, "fixed:colocated", 300.0)  # no store: measured again


def test_a_part_is_made_once_a_store_and_kept_apart_by_kind_and_key(tmp_path: Path) -> None:
    """`kept_or_made`: with no store it makes every time; with one it makes a (kind, key)
    once, and another kind or key is another part."""
    made: list[str] = []

    def make(what: str) -> list[str]:
        made.append(what)
        return [what]

    assert run_store.kept_or_made("makespans", "k", lambda: make("a")) == ["a"]
    assert run_store.kept_or_made("makespans", "k", lambda: make("a")) == ["a"]
    assert made == ["a", "a"]
    made.clear()
    with run_store.use(RunStore(tmp_path)) as store:
        assert run_store.kept_or_made("makespans", "k", lambda: make("a")) == ["a"]
        assert run_store.kept_or_made("makespans", "k", lambda: make("b")) == ["a"]
        assert run_store.kept_or_made("profile", "k", lambda: make("c")) == ["c"]
        assert run_store.kept_or_made("makespans", "k2", lambda: make("d")) == ["d"]
        assert store is not None and store.num_written == 3
    assert made == ["a", "c", "d"]
    assert len(RunStore(tmp_path)) == 3
    with pytest.raises(ValueError, match="kind is a word"):
        RunStore(tmp_path).get_part("../x", "k")
