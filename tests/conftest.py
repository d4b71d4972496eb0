"""Hypothesis profiles: `make test` draws fresh examples each run (and replays a failing one
from .hypothesis/); CI (`.ci/run`, HYPOTHESIS_PROFILE=ci) draws the same examples every
run, so a clean clone's verdict does not hang on a rare draw. A failure found locally is
fixed in the code or the test, never by the profile.

Neither profile has hypothesis's per-example deadline (200 ms by default): a shared 2-core
machine can take longer on any example, and a timing limit in a unit test fails on load,
not on a defect (speed is measured by the benchmarks under bench/)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("default", deadline=None)
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
