"""How planning time grows with the cluster: parse a placement and build every process's Placement.

The cluster is N nodes x 8 GPUs (G = 8N GPUs) with

    actor,rollout: all                  G processes, one GPU each, both components on one strategy
    inference: 0-{G-1}:0-{2G-1}         2G processes, two per GPU
    reward: 0-{G-1}:0-{G/2-1}           G/2 processes, two GPUs each

i.e. 4.5 G processes (36,864 at N = 1024). A run is `component_placement(config)` (the cluster section and the
grammar, which also places every component once to check it) plus `get_placement` for every component, in
one thread; the best of a few runs is printed. `cpu s` is the CPU time of this process (what one core spends,
steady on a busy machine), `wall s` the elapsed time. Planning should grow linearly with the cluster, so the
1024/128 ratio should be close to 8; CPython's cyclic garbage collector, which scans the ever larger heap of
live Placement records, adds a few tenths to it.

    .venv/bin/python benchmarks/plan_scale.py [--nodes 16,128,1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import time

from placement_core.components import component_placement

GPUS_PER_NODE = 8


def scale_config(num_nodes: int) -> dict:
    gpus = GPUS_PER_NODE * num_nodes
    return {
        "cluster": {
            "num_nodes": num_nodes,
            "accelerators_per_node": GPUS_PER_NODE,
            "component_placement": {
                "actor,rollout": "all",
                "inference": f"0-{gpus - 1}:0-{2 * gpus - 1}",
                "reward": f"0-{gpus - 1}:0-{gpus // 2 - 1}",
            },
        }
    }


def plan_once(num_nodes: int) -> tuple[float, float, int]:
    """CPU and wall seconds for one parse + every get_placement, and the number of processes placed."""
    config = scale_config(num_nodes)
    gc.collect()
    start_cpu, start_wall = time.process_time(), time.perf_counter()
    placement = component_placement(config, kind="hybrid")
    processes = sum(len(placement.get_placement(name)) for name in placement.components)
    return time.process_time() - start_cpu, time.perf_counter() - start_wall, processes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="16,128,1024", help="comma-separated node counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the best is printed")
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    best: dict[int, float] = {}
    print(f"{'nodes':>6} {'GPUs':>6} {'processes':>10} {'cpu s':>8} {'wall s':>8} {'processes/s':>12}")
    for num_nodes in sizes:
        runs = [plan_once(num_nodes) for _ in range(args.repeat)]
        cpu = min(r[0] for r in runs)
        wall = min(r[1] for r in runs)
        processes = runs[0][2]
        best[num_nodes] = cpu
        print(
            f"{num_nodes:>6} {GPUS_PER_NODE * num_nodes:>6} {processes:>10} {cpu:>8.4f} {wall:>8.4f} "
            f"{processes / cpu:>12,.0f}"
        )
    if 128 in best and 1024 in best:
        print(f"growth 1024 vs 128 nodes (cpu): {best[1024] / best[128]:.1f}x (8x = linear)")


if __name__ == "__main__":
    main()
