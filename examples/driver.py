"""A minimal driver for a RayCluster made by the rlplace operator: start the plan's workers, print what each sees.

Run it in the head pod (the operator mounts the plan in /etc/rlplace):

    python examples/driver.py                       # plan from $RLPLACE_PLAN, $RLPLACE_PLAN_DIR or the mount
    python examples/driver.py --plan plan.json      # a plan saved with `rlplace plan --format json`
    python examples/driver.py --plan plan.json --simulate   # no cluster: simulate the plan's nodes locally

Each worker reports the placement environment it was started with, so a person can check that every rank
landed on the planned node and GPUs before a real training job does.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from placement_core import launcher
from placement_core.launcher import LaunchError, LaunchPlan

#: The components a reasoning job starts; others in the plan are started only when named with --components.
DEFAULT_COMPONENTS = ("actor", "rollout", "reward")
COLUMNS = (
    "component",
    "RANK",
    "WORLD_SIZE",
    "NODE_RANK",
    "CLUSTER_NODE_RANK",
    "CUDA_VISIBLE_DEVICES",
    "MASTER_ADDR",
    "host",
)


class EnvReporter:
    """Stands in for a real worker: it only reports what its process sees."""

    def report(self) -> dict[str, str]:
        seen = {key: os.environ.get(key, "") for key in COLUMNS[1:-1]}
        return {**seen, "host": socket.gethostname()}


def report(plan: LaunchPlan, components: Sequence[str]) -> list[dict[str, str]]:
    """Start every component's workers together, ask each rank what it sees, shut them down."""
    groups = launcher.launch_all(plan, dict.fromkeys(components, EnvReporter))
    try:
        calls = {name: group.call("report") for name, group in groups.items()}
        return [{"component": name, **seen} for name, call in calls.items() for seen in call.get(timeout=120)]
    finally:
        for group in groups.values():
            group.shutdown()


def pick_components(plan: LaunchPlan, wanted: Sequence[str] | None) -> list[str]:
    """The named components, or those of DEFAULT_COMPONENTS the plan has (all of its own if none)."""
    if wanted:
        for name in wanted:
            plan.processes(name)
        return list(wanted)
    present = [name for name in DEFAULT_COMPONENTS if name in plan.plan.names]
    return present or list(plan.plan.names)


def simulated_gpus(plan: LaunchPlan) -> list[int]:
    """GPUs per node for --simulate: enough for the highest GPU any process sees (8 when it sees none)."""
    num_nodes = 1 + max(p.node_rank for _, p in plan.plan.processes())
    gpus = [0] * num_nodes
    for _, process in plan.plan.processes():
        visible = [int(v) for v in process.placement.visible_accelerators]
        gpus[process.node_rank] = max(gpus[process.node_rank], 1 + max(visible, default=7))
    return gpus


def print_table(rows: list[dict[str, str]]) -> None:
    widths = [max(len(col), *(len(row[col]) for row in rows)) for col in COLUMNS]
    for line in [dict(zip(COLUMNS, COLUMNS, strict=True)), *rows]:
        print("  ".join(line[col].ljust(width) for col, width in zip(COLUMNS, widths, strict=True)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", help="plan JSON file (default: $RLPLACE_PLAN, $RLPLACE_PLAN_DIR, the mount)")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    parser.add_argument("--components", nargs="+", help="components to start (default: actor rollout reward)")
    parser.add_argument("--simulate", action="store_true", help="simulate the plan's nodes on this machine")
    args = parser.parse_args(argv)
    try:
        plan = launcher.load_plan(Path(args.plan).read_bytes()) if args.plan else launcher.read_plan()
        components = pick_components(plan, args.components)
        if args.simulate:
            with launcher.simulated_cluster(simulated_gpus(plan)):
                rows = report(plan, components)
        else:
            import ray

            ray.init(address=args.address, logging_level="WARNING")
            rows = report(plan, components)
    except (LaunchError, ConnectionError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
