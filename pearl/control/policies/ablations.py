"""PEARL ablations: each turns one mechanism off (or fixes it) and keeps the rest.

* `pearl-colocated`: no PD adaptation (colocated only); elasticity and gates as PEARL.
* `pearl-disagg:P:D`: a fixed P:D split, scaled to the budget (ratio kept, at least one
  of each); no mode or ratio switching.
* `pearl-no-borrow`: never borrows training GPUs.
* `pearl-ungated`: borrows whenever training idles (no borrow gate).
"""

from __future__ import annotations

from dataclasses import dataclass

from pearl.control.policies.base import BorrowMode
from pearl.control.policies.pearl import Pearl


@dataclass(frozen=True, slots=True)
class PearlColocated(Pearl):
    name: str = "pearl-colocated"
    modes: tuple[str, ...] = ("colocated",)
    adapt_pd: bool = False


@dataclass(frozen=True, slots=True)
class PearlFixedDisagg(Pearl):
    name: str = "pearl-disagg:1:1"
    modes: tuple[str, ...] = ("disaggregated",)
    fixed_ratio: tuple[int, int] | None = (1, 1)
    adapt_pd: bool = False

    @classmethod
    def with_ratio(cls, p: int, d: int) -> PearlFixedDisagg:
        if p < 1 or d < 1:
            raise ValueError("P and D must be >= 1")
        return cls(name=f"pearl-disagg:{p}:{d}", fixed_ratio=(p, d))


@dataclass(frozen=True, slots=True)
class PearlNoBorrow(Pearl):
    name: str = "pearl-no-borrow"
    borrow: BorrowMode = "never"


@dataclass(frozen=True, slots=True)
class PearlUngated(Pearl):
    name: str = "pearl-ungated"
    borrow: BorrowMode = "always"


# -- the ladder from RLBoost+ to PEARL (`pearl experiment ladder`): one mechanism per rung --
@dataclass(frozen=True, slots=True)
class LadderExpansion(Pearl):
    """RLBoost+ with PEARL's inter-scale rebuilder: gated expansion, one group per
    expansion admitted atomically; still colocated and budgeted borrowing as RLBoost+."""

    name: str = "ladder-expansion"
    borrow: BorrowMode = "budgeted"
    adapt_pd: bool = False
    modes: tuple[str, ...] = ("colocated",)


@dataclass(frozen=True, slots=True)
class LadderPD(Pearl):
    """The rung above plus PEARL's PD decisions (mode and ratio by the decision engine);
    borrowing still RLBoost+'s budgeted one. PEARL adds the gated borrow on top."""

    name: str = "ladder-pd"
    borrow: BorrowMode = "budgeted"
