"""`rlboost+`: RLBoost (Wu et al., 2025) as it describes itself, ported to asynchronous
agentic rollout (see docs/baselines.md):

* preemptible instances are admitted as soon as each one is ready and has pulled the latest
  weights by version (one group per worker, no cost gate, no waiting for its peers);
* a preempted instance's responses migrate at token level: the generated prefix is kept and
  the response continues on another instance (here: one full prefill, then decode);
* the reserved (training) GPUs are time-shared for rollout whenever training idles, with a
  per-step generation budget re-tuned from the measured training bubble ("adaptive rollout
  offload"; `borrow="budgeted"` in `toggle.py`);
* colocated PD everywhere; no cost gates anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from pearl.control.policies.base import BorrowMode, Policy


@dataclass(frozen=True, slots=True)
class RLBoostPlus(Policy):
    name: str = "rlboost+"
    use_preemptible: bool = True
    gate_expansion: bool = False
    borrow: BorrowMode = "budgeted"
    adapt_pd: bool = False
    modes: tuple[str, ...] = ("colocated",)
    admit_individually: bool = True
