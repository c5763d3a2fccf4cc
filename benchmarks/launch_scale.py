"""Time to start 64 workers on 4 simulated nodes: the rlplace launcher against plain Ray `num_gpus=1` actors.

The launcher does more than plain Ray (reads the plan, checks the cluster, pins each actor to a node and GPUs
with custom resources, ships a per-process environment, verifies each process's binding), so this measures
what that costs: both ways of shipping the environment (LaunchOptions.env_via: `constructor`, the default, sets
it in the actor before the worker class is loaded; `runtime_env`, the former default, has Ray start each
process with it, one worker pool per process) and both ways of holding an actor to its node (pin_node_by:
Ray's label selector or the node's custom resource). `--ship-code` runs every
side with placement_core sent to the workers as `launcher.connect` does for stock Ray images. All sides run in the same
simulated cluster, in a palindrome order (plain, runtime_env, ..., runtime_env, plain) so none gets the warm
caches; the figure is the median per side. Target: the default launcher within 1.2x of plain Ray.

    .venv/bin/python benchmarks/launch_scale.py [--nodes 4] [--workers 64] [--rounds 1] [--sides plain constructor]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from placement_core import contract, launcher
from placement_core.components import component_placement
from placement_core.plan import Plan, build_plan

TARGET_RATIO = 1.2
#: Side -> (label, LaunchOptions fields); plain Ray uses none.
SIDES: dict[str, tuple[str, dict[str, object]]] = {
    "plain": ("plain Ray actors (num_gpus=1)", {}),
    "constructor": ("launcher (default: env set in the actor, node label)", {}),
    "runtime_env": ("launcher, env_via=runtime_env (the former default)", {"env_via": "runtime_env"}),
    "resource": ("launcher, pinned by node resource", {"pin_node_by": "resource"}),
    "noverify": ("launcher, verify=False (what verification costs)", {"verify": False}),
}


class Worker:
    """As small as an actor gets, so the time is all placement and process start."""

    def ping(self) -> int:
        return 1


def make_plan(nodes: int, gpus_per_node: int) -> Plan:
    """One exclusive process per GPU on every node: what the operator would store for `actor: all`."""
    config = {
        "cluster": {"num_nodes": nodes, "accelerators_per_node": gpus_per_node, "component_placement": {"actor": "all"}}
    }
    return build_plan(component_placement(config))


def time_plain(workers: int) -> float:
    """Plain Ray: `num_gpus=1` actors; Ray picks the node and sets CUDA_VISIBLE_DEVICES itself."""
    import ray

    actor_class = ray.remote(Worker).options(num_cpus=0, num_gpus=1)
    start = time.perf_counter()
    actors = [actor_class.remote() for _ in range(workers)]
    ray.get([a.__ray_ready__.remote() for a in actors])
    elapsed = time.perf_counter() - start
    for actor in actors:
        ray.kill(actor)
    return elapsed


def time_launcher(plan: Plan, side: str) -> float:
    """The launcher, from the stored plan to every actor up and verified (plan parsing and cluster check
    included)."""
    options = launcher.LaunchOptions(free_timeout_s=60, **SIDES[side][1])
    start = time.perf_counter()
    group = launcher.launch(plan, "actor", Worker, options=options)
    elapsed = time.perf_counter() - start
    group.shutdown()
    return elapsed


def wait_idle(workers: int) -> None:
    """Let killed actors' processes exit and their GPUs return, so each run starts from the same state."""
    import ray

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        free = ray.available_resources()
        rlplace_free = sum(v for k, v in free.items() if contract.parse_gpu_resource(k))
        if free.get("GPU", 0) >= workers and rlplace_free >= workers:
            break
        time.sleep(0.2)
    time.sleep(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--ship-code", action="store_true", help="send placement_core in the job's runtime_env")
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs per side")
    parser.add_argument("--sides", nargs="+", choices=list(SIDES), default=list(SIDES), help="what to time")
    args = parser.parse_args(argv)
    sides = list(dict.fromkeys(["plain", *args.sides]))  # plain Ray is the baseline of every ratio
    if args.workers % args.nodes:
        parser.error("--workers must be a multiple of --nodes")
    gpus = args.workers // args.nodes
    plan = make_plan(args.nodes, gpus)
    times: dict[str, list[float]] = {side: [] for side in sides}
    with launcher.simulated_cluster([gpus] * args.nodes, ship_code=args.ship_code):
        for _ in range(args.rounds):
            for side in (*sides, *reversed(sides)):
                wait_idle(args.workers)
                times[side].append(time_plain(args.workers) if side == "plain" else time_launcher(plan, side))
    medians = {side: statistics.median(runs) for side, runs in times.items()}
    print(
        f"{args.workers} workers on {args.nodes} simulated nodes ({gpus} fake GPUs each), median of {2 * args.rounds}"
        + (", placement_core shipped in the job's runtime_env" if args.ship_code else "")
    )
    for side in sides:
        label = SIDES[side][0]
        runs = ", ".join(f"{t:.2f}" for t in times[side])
        target = f" (target <= {TARGET_RATIO}x)" if side == "constructor" else ""
        ratio = "" if side == "plain" else f"   {medians[side] / medians['plain']:.2f}x plain{target}"
        print(f"  {label:<58} {medians[side]:6.2f} s{ratio}   runs: {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
