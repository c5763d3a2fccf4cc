"""GPU utilisation of a mixed queue with and without node sharing (DRA), through rlplace's own admission rules.

    .venv/bin/python benchmarks/dra_utilisation.py [--nodes 8] [--jobs 400] [--seed 1]

A queue of `--jobs` single-node jobs of 1, 2, 4 and 8 GPUs (equally many of each size, in a random order) with
random run times (uniform 60-600 s, whatever the size) arrives at once on `--nodes` nodes of 8 GPUs. An
event simulation runs the operator's admission (`admission.decide`, the same queue order, all-or-nothing and
no-starvation rules the operator runs) at every job end, twice over the same queue:

- devicePlugin: a job takes its whole node (its pod requests all of the node's nvidia.com/gpu);
- dra: a job takes only the GPUs it plans to use, so jobs pack onto partly used nodes.

Printed per mode: the makespan, GPU utilisation (GPU-seconds the jobs use / (nodes x 8 x makespan)), and the
p50/p95 wait from arrival to admission; then the ratios dra / devicePlugin of the same queue. The simulation
covers admission only (no API server, no pods): the time a pod takes to be bound is measured by
benchmarks/dra_burst.py. Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
from dataclasses import dataclass

from rlplace_operator.admission.rules import Admitted, GroupDemand, Pool, QueuedJob, decide

GPUS_PER_NODE = 8
SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Job:
    name: str
    gpus: int
    seconds: float


def queue_of(jobs: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    sizes = [SIZES[i % len(SIZES)] for i in range(jobs)]
    rng.shuffle(sizes)
    return [Job(f"job-{i:04d}", gpus, rng.uniform(60, 600)) for i, gpus in enumerate(sizes)]


def simulate(jobs: list[Job], nodes: int, shared: bool) -> tuple[float, float, list[float]]:
    """(makespan, utilisation, waits) of the queue under the operator's admission."""
    names = [f"node-{i}" for i in range(nodes)]
    free = {name: set(range(GPUS_PER_NODE)) for name in names}
    busy: dict[str, str] = {}
    waiting = {job.name: job for job in jobs}
    ends: list[tuple[float, str, str, tuple[int, ...]]] = []
    now, used_gpu_seconds, waits = 0.0, 0.0, []
    while waiting or ends:
        queue = [
            QueuedJob(
                ("bench", job.name),
                0,
                job.name,  # created in name order: the arrival order
                (GroupDemand("gpu", 1, frozenset({0}), ((0, job.gpus),) if shared else None),),
            )
            for job in waiting.values()
        ]
        pool = Pool({"gpu": names}, dict(busy), {n: tuple(sorted(g)) for n, g in free.items()} if shared else {})
        for key, decision in decide(queue, pool).items():
            if not isinstance(decision, Admitted):
                continue
            job = waiting.pop(key[1])
            waits.append(now)
            used_gpu_seconds += job.gpus * job.seconds
            if shared:
                ((node, gpus),) = decision.gpus
                free[node] -= set(gpus)
            else:
                (node,) = decision.nodes
                busy[node], gpus = job.name, ()
            heapq.heappush(ends, (now + job.seconds, job.name, node, gpus))
        if not ends:
            raise SystemExit(f"{len(waiting)} jobs can never start")
        now, _, node, gpus = heapq.heappop(ends)
        if shared:
            free[node] |= set(gpus)
        else:
            busy.pop(node)
    return now, used_gpu_seconds / (nodes * GPUS_PER_NODE * now), waits


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    jobs = queue_of(args.jobs, args.seed)
    print(f"{args.jobs} jobs of {'/'.join(map(str, SIZES))} GPUs (60-600 s each) on {args.nodes} nodes of 8 GPUs")
    results = {}
    for mode, shared in (("devicePlugin", False), ("dra", True)):
        makespan, utilisation, waits = simulate(jobs, args.nodes, shared)
        results[mode] = (makespan, utilisation, statistics.median(waits), percentile(waits, 0.95))
        print(
            f"  {mode:>12}: makespan {makespan:8.0f} s  GPU utilisation {utilisation:6.1%}  "
            f"wait p50 {results[mode][2]:7.0f} s  p95 {results[mode][3]:7.0f} s"
        )
    base, dra = results["devicePlugin"], results["dra"]
    print(
        f"  dra / devicePlugin: makespan {dra[0] / base[0]:.2f}x, utilisation {dra[1] / base[1]:.2f}x, "
        f"wait p50 {dra[2] / base[2]:.2f}x, p95 {dra[3] / base[3]:.2f}x"
    )


if __name__ == "__main__":
    main()
