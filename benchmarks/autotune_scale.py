"""Seconds per auto placement search at G = 128, 512, 2048 and 8192 GPUs (docs/autoplace.md).

Targets: G = 2048 under 0.5 s and G = 8192 under 3 s on one core. Two inputs per size, both cost models:
- typical: spec worked example 3 scaled up (actor TP 2; valid data-parallel sizes keep the actor and
  inference to a handful of GPU counts);
- worst case: every model-parallel size 1 and no valid data-parallel size, so every stage may take any GPU
  count and the search evaluates about G^2/2 splits.
`search` times the search alone; `autotune` the whole call (reading the config, checking the placement);
`before` the same call with the collocated block validated the old way, by building the whole placement
(issue 20, "Speed"), measured in the same run, and `speed-up` = before / autotune.
Then node groups of different GPUs (docs/autoplace.md, "Node groups of different GPUs"): G = 64, 256 and
1,024 GPUs split evenly over 2 or 3 GPU types (a800 80 GB, 4090 24 GB, h20 96 GB) with per-type costs,
memory limits and the weight sync, beside the single-type search on the same G in the same run (goal: under
1 s at 256 and under 10 s at 1,024). `typical` and `worst` as above. Last, the same node-group jobs with the
actor's collectives priced by rack and block, beside the same job with the weight sync alone.
Run: .venv/bin/python benchmarks/autotune_scale.py
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from placement_core.autoplace import autotune, inputs
from placement_core.autoplace.cost import CostModel
from placement_core.autoplace.hetero import (
    PRICED_POINTS_LIMIT,
    HeteroTask,
    priced_points,
    read_hetero,
    search_hetero,
)
from placement_core.autoplace.inputs import COLLOCATED_BLOCK, accepts_placement, read_reasoning
from placement_core.autoplace.search import search_reasoning
from placement_core.jobconfig import read_job

SIZES = (128, 512, 2048, 8192)
HETERO_SIZES = (64, 256, 1024)
TYPES = (("a800", 80, 1.0), ("4090", 24, 1.9), ("h20", 96, 1.4))  # label, GB per GPU, time relative to a800
REPEATS = 3


def config(gpus: int, worst: bool) -> dict:
    return {
        "runner": {"task_type": "reasoning"},
        "cluster": {"num_nodes": gpus // 8, "accelerators_per_node": 8},
        "actor": {"model": {"tensor_model_parallel_size": 1 if worst else 2}},
        "rollout": {"tensor_parallel_size": 1, "max_running_requests": 128},
        # worst: rbs*gs/nmb = 3 is never a multiple of dp*gs, so no data-parallel size is valid.
        "algorithm": {"group_size": 2, "n_minibatches": 2} if worst else {"group_size": 16, "n_minibatches": 4},
        "data": {"rollout_batch_size": 3 if worst else 512},
        "profile_data": {"actor_cost": 101, "inference_cost": 10, "rollout_cost": 224},
    }


def best_of(run) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


@contextmanager
def validated_by_building(job_of: dict) -> Iterator[None]:
    """autotune as it was before: `actor,rollout,reward: all` checked by building it with the placement class."""
    job = read_job(job_of)
    with mock.patch.object(inputs, "collocated_fits", lambda *_: accepts_placement(job, COLLOCATED_BLOCK)):
        yield


def main() -> None:
    print(
        f"{'G':>6} {'input':<10} {'model':<8} {'search s':>9} {'autotune s':>11} {'before s':>9} {'speed-up':>8}"
        "  placement"
    )
    for gpus in SIZES:
        for worst in (False, True):
            raw = config(gpus, worst)
            task = read_reasoning(read_job(raw))
            for model in CostModel:
                search_s = best_of(lambda: search_reasoning(task, model))  # noqa: B023
                # The whole call from the config, as `rlplace autotune` makes it.
                total_s = best_of(lambda: autotune(read_job(raw), model))  # noqa: B023
                with validated_by_building(raw):
                    before_s = best_of(lambda: autotune(read_job(raw), model))  # noqa: B023
                    before = autotune(read_job(raw), model)
                result = autotune(read_job(raw), model)
                assert result.to_json() == before.to_json(), "the fast validation changed an answer"
                where = ", ".join(f"{k}: {v}" for k, v in result.component_placement.items())
                label = "worst" if worst else "typical"
                print(
                    f"{gpus:>6} {label:<10} {model.value:<8} {search_s:>9.4f} {total_s:>11.4f} {before_s:>9.4f} "
                    f"{before_s / total_s:>7.2f}x  {where}"
                )


def hetero_config(gpus: int, types: int, worst: bool) -> dict:
    """`config(gpus, worst)` over `types` node groups of equal size, with per-type costs and memory."""
    raw = config(gpus, worst)
    nodes = gpus // 8
    groups, costs = [], {"actor": {}, "inference": {}, "rollout": {}}
    for index, (label, memory, slowdown) in enumerate(TYPES[:types]):
        first, last = index * nodes // types, (index + 1) * nodes // types - 1
        groups.append({"label": label, "node_ranks": f"{first}-{last}", "accelerator_memory_gb": memory})
        for name, base in (("actor", 101), ("inference", 10), ("rollout", 224)):
            costs[name][label] = round(base * slowdown, 1)
    raw["cluster"]["node_groups"] = groups
    raw["profile_data"] = {f"{name}_cost_by_type": by_type for name, by_type in costs.items()} | {
        "actor_memory_gb": 56,
        "rollout_memory_gb": 20,
        "inference_memory_gb": 16,
        "model_size_gb": 14,
    }
    return raw


def fresh(task: HeteroTask) -> HeteroTask:
    """The same task without its cost tables built (HeteroTask.tables is cached), so each timed search builds
    them as a first search does."""
    return dataclasses.replace(task)


def placement_text(component_placement: dict) -> str:
    """`rollout,reward: a800 0-23, actor: a800 24-31`: a placement over node groups on one line."""
    return ", ".join(
        f"{k}: {v['node_group']} {v['placement']}" if isinstance(v, dict) else f"{k}: {v}"
        for k, v in component_placement.items()
    )


def hetero_main() -> None:
    print()
    print("node groups of different GPUs, the single-type search on the same G alongside (ratio = autotune / 1-type)")
    print(
        f"{'G':>6} {'types':>5} {'input':<8} {'model':<8} {'search s':>9} {'autotune s':>11} {'1-type s':>9} "
        f"{'ratio':>7}  placement"
    )
    for gpus, types, worst, model in itertools.product(HETERO_SIZES, (2, 3), (False, True), CostModel):
        raw = hetero_config(gpus, types, worst)
        task = read_hetero(read_job(raw), model)
        search_s = best_of(lambda: search_hetero(fresh(task)))  # noqa: B023
        total_s = best_of(lambda: autotune(read_job(raw), model))  # noqa: B023
        plain = config(gpus, worst)
        single_s = best_of(lambda: autotune(read_job(plain), model))  # noqa: B023
        result = autotune(read_job(raw), model)
        where = placement_text(result.component_placement)
        label = "worst" if worst else "typical"
        print(
            f"{gpus:>6} {types:>5} {label:<8} {model.value:<8} {search_s:>9.4f} {total_s:>11.4f} "
            f"{single_s:>9.4f} {total_s / single_s:>6.1f}x  {where}"
        )


def network_main() -> None:
    """The same node-group jobs with the network priced (racks of 4 nodes, blocks of 32): the actor's collectives and
    the weight sync, the weight sync alone, and neither (no levels: the node-group search of before), in one run
    (ratio = with both / without levels)."""
    print()
    print("with racks and blocks: the actor's collectives and the weight sync priced where the ranges lie")
    print(
        f"{'G':>6} {'types':>5} {'input':<8} {'search s':>9} {'sync s':>9} {'no levels s':>12} {'ratio':>7}  exact  "
        "placement"
    )
    for gpus, types, worst in itertools.product(HETERO_SIZES, (2, 3), (False, True)):
        raw = hetero_config(gpus, types, worst)
        plain = read_hetero(read_job(raw), CostModel.scaling)
        raw["profile_data"]["network_levels"] = {"block": 32, "rack": 4}
        sync_only = read_hetero(read_job(raw), CostModel.scaling)
        raw["profile_data"]["actor_collective_gb"] = 28
        task = read_hetero(read_job(raw), CostModel.scaling)
        search_s = best_of(lambda: search_hetero(fresh(task)))  # noqa: B023
        sync_s = best_of(lambda: search_hetero(fresh(sync_only)))  # noqa: B023
        plain_s = best_of(lambda: search_hetero(fresh(plain)))  # noqa: B023
        exact = "yes" if priced_points(task) <= PRICED_POINTS_LIMIT else "caps"
        where = placement_text(autotune(read_job(raw)).component_placement)
        label = "worst" if worst else "typical"
        print(
            f"{gpus:>6} {types:>5} {label:<8} {search_s:>9.4f} {sync_s:>9.4f} {plain_s:>12.4f} "
            f"{search_s / plain_s:>6.1f}x  {exact:<5}  {where}"
        )


if __name__ == "__main__":
    main()
    hetero_main()
    network_main()
