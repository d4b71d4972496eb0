"""Hypothesis profiles: `make test` draws fresh examples each run (and replays a failing one
from .hypothesis/); CI (`.ci/run`, HYPOTHESIS_PROFILE=ci) draws the same examples every
run, so a clean clone's verdict does not hang on a rare draw. A failure found locally is
fixed in the code or the test, never by the profile."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
