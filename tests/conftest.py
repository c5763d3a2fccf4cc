"""Settings for the whole suite."""

from __future__ import annotations

import os

from hypothesis import settings

# CI runs every property test on the same examples (no flakes between a green local run and CI); locally,
# each run draws new ones, which is how the property tests find new cases.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
