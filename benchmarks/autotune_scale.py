"""Seconds per auto placement search at G = 128, 512, 2048 and 8192 GPUs (docs/autoplace.md).

Targets: G = 2048 under 0.5 s and G = 8192 under 3 s on one core. Two inputs per size, both cost models:
- typical: spec worked example 3 scaled up (actor TP 2; valid data-parallel sizes keep the actor and
  inference to a handful of GPU counts);
- worst case: every model-parallel size 1 and no valid data-parallel size, so every stage may take any GPU
  count and the search evaluates about G^2/2 splits.
`search` times the search alone; `autotune` the whole call (reading the config, checking the placement);
`before` the same call with the collocated block validated the old way, by building the whole placement
(issue 20, "Speed"), measured in the same run, and `speed-up` = before / autotune.
Run: .venv/bin/python benchmarks/autotune_scale.py
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from placement_core.autoplace import autotune, inputs
from placement_core.autoplace.cost import CostModel
from placement_core.autoplace.inputs import COLLOCATED_BLOCK, accepts_placement, read_reasoning
from placement_core.autoplace.search import search_reasoning
from placement_core.jobconfig import read_job

SIZES = (128, 512, 2048, 8192)
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


if __name__ == "__main__":
    main()
