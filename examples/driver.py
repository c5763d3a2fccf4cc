"""The RLJob examples' driver: start the plan's actor, rollout and reward processes where the plan says, have
each verify its own binding, run two components' calls concurrently, and print what every process saw.

It is placement_core's reference driver (placement_core/launcher/demo.py), which the example RLJobs run as
`python -m placement_core.launcher.demo` because the Ray image has rlplace installed but not this folder:

    python examples/driver.py                       # in the head pod: the plan the operator mounted
    python examples/driver.py --plan plan.json --simulate   # offline: `rlplace plan --format json` output
    python examples/driver.py --tamper rollout:0:CUDA_VISIBLE_DEVICES=7   # watch verification catch it
"""

from __future__ import annotations

import sys

from placement_core.launcher.demo import main

if __name__ == "__main__":
    sys.exit(main())
