"""Static baselines: a fixed PD configuration on a fixed pool, no elasticity of any kind.

* `fixed:colocated`: every worker colocated.
* `fixed:disagg:P:D` (or `fixed:disaggregated:P:D`): a fixed P:D split, scaled to the
  budget (ratio kept, at least one of each).

They take no offered GPU, borrow nothing and never switch; `pearl simulate --static-gpus`
and the ablation compare configurations with them, and `pearl run` accepts them too.
"""

from __future__ import annotations

from dataclasses import dataclass

from pearl.control.policies.roll import Roll


@dataclass(frozen=True, slots=True)
class FixedColocated(Roll):
    """ROLL's knobs (no elasticity, colocated) under a static baseline's name."""

    name: str = "fixed:colocated"


@dataclass(frozen=True, slots=True)
class FixedDisagg(Roll):
    """ROLL's knobs with a fixed P:D split instead of colocation."""

    name: str = "fixed:disagg:1:1"
    modes: tuple[str, ...] = ("disaggregated",)
    fixed_ratio: tuple[int, int] | None = (1, 1)

    @classmethod
    def with_ratio(cls, p: int, d: int, name: str | None = None) -> FixedDisagg:
        if p < 1 or d < 1:
            raise ValueError(
                f"bad ratio in '{name or f'fixed:disagg:{p}:{d}'}': P and D must be >= 1"
            )
        return cls(name=name or f"fixed:disagg:{p}:{d}", fixed_ratio=(p, d))
