"""One comparison over several seeds (`pearl simulate --seeds`): each policy's
trajectories/hour per seed, on the means, and the first policy against the others. Pure:
it reads the per-seed documents `SimulationResult.to_json()` makes."""

from __future__ import annotations

import re
from typing import Any


def seeds_summary(docs: list[dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    """One document for a run over several seeds: each policy's trajectories/hour per seed,
    mean, min and max, its mean share of the bound (when measured) and, beside the first
    policy, the ratio of means and the seeds on which it made more trajectories."""
    first = docs[0]
    names = list(first["policies"])
    summary: dict[str, Any] = {}
    for name in names:
        per = [float(d["policies"][name]["trajs_per_hour"]) for d in docs]
        fracs = [d["policies"][name].get("fraction_of_bound") for d in docs]
        entry: dict[str, Any] = {
            "trajs_per_hour": per,
            "mean": sum(per) / len(per),
            "min": min(per),
            "max": max(per),
            "fraction_of_bound_mean": (
                None if any(f is None for f in fracs) else sum(fracs) / len(fracs)
            ),
        }
        summary[name] = entry
    lead = summary[names[0]]
    for name in names[1:]:
        other = summary[name]
        lead.setdefault("against", {})[name] = {
            "ratio_of_means": lead["mean"] / other["mean"] if other["mean"] > 0 else None,
            "seeds_ahead": sum(
                a > b for a, b in zip(lead["trajs_per_hour"], other["trajs_per_hour"], strict=True)
            ),
        }
    return {
        "setting": re.sub(r", seed \d+$", "", first["setting"]),
        "trace": first["trace"],
        "duration_s": first["duration_s"],
        "batch_size": first["batch_size"],
        "seeds": seeds,
        "policies": summary,
        "runs": docs,
    }
