"""`seeds_summary`: per-seed figures, means and the first policy against the others."""

from __future__ import annotations

import pytest

from pearl.sim.over_seeds import seeds_summary


def _doc(seed: int, a: float, b: float, frac: float | None) -> dict:
    return {
        "setting": f"qwen3-8b on h100-sxm, trace seg1, batch 64, max len 32768, seed {seed}",
        "trace": "seg1",
        "duration_s": 7200.0,
        "batch_size": 64,
        "seed": seed,
        "policies": {
            "pearl": {"trajs_per_hour": a, "fraction_of_bound": frac},
            "rlboost+": {"trajs_per_hour": b, "fraction_of_bound": frac},
        },
    }


def test_hand_computed_summary() -> None:
    docs = [_doc(0, 1100.0, 1000.0, 0.9), _doc(1, 980.0, 1000.0, 0.8)]
    out = seeds_summary(docs, [0, 1])
    assert out["setting"].endswith("max len 32768") and out["seeds"] == [0, 1]
    pearl = out["policies"]["pearl"]
    assert pearl["trajs_per_hour"] == [1100.0, 980.0]
    assert (pearl["mean"], pearl["min"], pearl["max"]) == (1040.0, 980.0, 1100.0)
    assert pearl["fraction_of_bound_mean"] == pytest.approx(0.85)
    against = pearl["against"]["rlboost+"]
    assert against["ratio_of_means"] == pytest.approx(1.04) and against["seeds_ahead"] == 1
    assert "against" not in out["policies"]["rlboost+"]
    assert out["runs"] == docs


def test_a_missing_bound_on_any_seed_leaves_the_mean_share_out() -> None:
    out = seeds_summary([_doc(0, 1.0, 1.0, 0.9), _doc(1, 1.0, 1.0, None)], [0, 1])
    assert out["policies"]["pearl"]["fraction_of_bound_mean"] is None
