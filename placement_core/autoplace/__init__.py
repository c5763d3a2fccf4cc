"""Auto placement (docs/autoplace.md): from a collocated profile to the placement with the shortest iteration.

Public API (what `rlplace autotune`, `rlplace cost` and the operator call):

    from placement_core.autoplace import autotune, predict_cost
    from placement_core.jobconfig import read_job

    job = read_job(config)                          # or a Job built from typed values (the operator does)
    result = autotune(job)                          # or autotune(job, "linear")
    result.mode                                     # "collocated" | "disaggregated" | "hybrid" (embodied)
    result.total_cost, result.collocated_cost       # predicted seconds per iteration (collocated may be None)
    result.component_placement                      # {"rollout,reward": "0-79", "inference": "80-95", ...}
    result.components["actor"].gpus, .per_batch     # (96, 127), seconds per batch
    result.to_json()                                # what `rlplace autotune --format json` prints

    predict_cost(job)                               # seconds per iteration of the job's own placement

`cost_model` is `"scaling"` (default) or `"linear"`; it applies to reasoning chains, while embodied tasks use
curve fits of their profiled points.

Modules: `inputs` checks the job's profile and sizes, `cost` holds both cost models, `search` the exact search,
`hetero` the model and exact search over node groups of different GPUs (used when a job gives per-type data),
`embodied` the curve fits and the embodied search, `predict` prices a given placement, `report` the printed
block and JSON. Every bad input is a
`PlacementError` with a one-line message.
"""

from __future__ import annotations

from placement_core.autoplace.cost import CostModel, parse_cost_model
from placement_core.autoplace.embodied import read_embodied, search_embodied
from placement_core.autoplace.hetero import pick, read_hetero, search_hetero, summarize, wants_hetero
from placement_core.autoplace.inputs import read_reasoning
from placement_core.autoplace.predict import predict_embodied, predict_reasoning
from placement_core.autoplace.report import AutotuneResult, ComponentChoice, build_result
from placement_core.autoplace.search import (
    COLLOCATED,
    DISAGGREGATED,
    HYBRID,
    Progress,
    Schedule,
    pick_best,
    search_reasoning,
)
from placement_core.errors import PlacementError
from placement_core.jobconfig import EMBODIED, Job

__all__ = [
    "MODES",
    "AutotuneResult",
    "ComponentChoice",
    "CostModel",
    "Schedule",
    "autotune",
    "predict",
    "predict_cost",
]


def autotune(
    job: Job, cost_model: str | CostModel = CostModel.scaling, *, progress: Progress | None = None
) -> AutotuneResult:
    """The placement with the shortest predicted iteration time over the search space of docs/autoplace.md.

    Raises PlacementError for bad input and when no placement of the space is possible.
    """
    model = parse_cost_model(cost_model)
    if wants_hetero(job):
        return _autotune_hetero(job, model, progress)
    if job.task_type == EMBODIED:
        task = read_embodied(job)
        schedules = search_embodied(task, progress)
        chain, num_gpus, num_nodes = "env -> rollout -> actor", task.num_gpus, task.num_nodes
    else:
        task = read_reasoning(job)
        schedules = search_reasoning(task, model, progress)
        chain, num_gpus, num_nodes = " -> ".join(task.chain), task.num_gpus, task.num_nodes
    best = pick_best(list(schedules.values()))
    if best is None:
        raise PlacementError(_no_placement_message(chain, num_gpus, job))
    return build_result(job.task_type, schedules, best, num_gpus, num_nodes, model.value)


def _autotune_hetero(job: Job, model: CostModel, progress: Progress | None) -> AutotuneResult:
    """Node groups of different GPUs (autoplace/hetero.py): which group(s) and how many GPUs per component."""
    if job.task_type == EMBODIED:
        raise PlacementError(
            "per-type profile data (_cost_by_type, _memory_gb, _collective_gb, model_size_gb, sync_bandwidth_gb_s, "
            "collocated_offload, network_levels) is for reasoning tasks; embodied auto placement does not read it"
        )
    task = read_hetero(job, model)
    schedules = search_hetero(task, progress)
    best = pick(list(schedules.values()))
    if best is None:
        groups = ", ".join(f"{p.label} ({p.accelerator_type}, {p.gpus} GPUs)" for p in task.pools)
        raise PlacementError(
            f"no valid placement for {' -> '.join(task.chain)} on node groups {groups}: no group fits every "
            "component collocated, and no split gives each component a group whose GPU memory holds it and a GPU "
            "count it allows (rlplace autotune --explain shows each component per group)"
        )
    return build_result(
        job.task_type,
        schedules,
        best,
        task.base.num_gpus,
        task.base.num_nodes,
        model.value,
        hetero=summarize(task),
    )


def _no_placement_message(chain: str, num_gpus: int, job: Job) -> str:
    if job.task_type == EMBODIED:
        why = (
            "env needs data.env_num to split evenly over its GPUs and rollout whole engines, each within the "
            "largest profiled load (profile_data.env_profile_data, rollout_profile_data)"
        )
    else:
        why = (
            "collocating needs 'actor,rollout,reward: all' to be valid and the profile measured on all GPUs, and "
            "no split gives every component a GPU count it allows (a multiple of its model-parallel size, a valid "
            "data-parallel size, no more GPUs than it was profiled on, rollout engines within nodes)"
        )
    return f"no valid placement for {chain} on {num_gpus} GPUs: {why}"


def predict_cost(job: Job, cost_model: str | CostModel = CostModel.scaling) -> float:
    """Predicted seconds per iteration of the job's own placement (what `rlplace cost` prints)."""
    return predict(job, cost_model).total


def predict(job: Job, cost_model: str | CostModel = CostModel.scaling) -> Schedule:
    """The job's own placement as a Schedule (ranges, seconds per batch, total) under autotune's model."""
    model = parse_cost_model(cost_model)
    if wants_hetero(job):
        raise PlacementError(
            "rlplace cost prices placements under the single-type model; this job gives per-type data "
            "(node groups' accelerator_type/accelerator_memory_gb or per-type profile keys): use rlplace autotune "
            "--explain for its predictions"
        )
    if job.task_type == EMBODIED:
        return predict_embodied(job)
    return predict_reasoning(job, model)


#: The modes a result or a Schedule can have.
MODES = (COLLOCATED, DISAGGREGATED, HYBRID)
