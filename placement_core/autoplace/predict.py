"""Pricing a placement someone already wrote (`rlplace cost`), under the same models the search uses.

The placement is parsed by the placement classes, so `rlplace cost` accepts exactly the placements the
framework accepts; each component's GPU count then goes through the same cost functions as the search's, so
the time `rlplace autotune` predicts for its block is the time `rlplace cost` prints for it.

One case lies outside the search space and is priced here all the same: a disaggregated reasoning placement
without an inference component (recompute_logprobs on), where the actor recomputes log-probs on its own GPUs;
that pipeline stage runs inference then training for each batch.
"""

from __future__ import annotations

from dataclasses import replace

from placement_core.autoplace.cost import CostModel, StageCost, collocated_total, pipelined_total, stage_costs
from placement_core.autoplace.embodied import EMBODIED_CHAIN, collocated_schedule, hybrid_schedule, read_embodied
from placement_core.autoplace.inputs import read_reasoning
from placement_core.autoplace.search import COLLOCATED, DISAGGREGATED, Schedule
from placement_core.cluster import ACCELERATOR
from placement_core.components import HybridComponentPlacement, ModelParallelComponentPlacement, PlacementMode
from placement_core.errors import PlacementError
from placement_core.jobconfig import Job


def _own_placement(job: Job) -> None:
    if not job.placement:
        raise PlacementError("the config has no 'cluster.component_placement' to price")


def predict_reasoning(job: Job, model: CostModel) -> Schedule:
    """A reasoning job's placement, parsed by ModelParallelComponentPlacement, priced stage by stage."""
    task = read_reasoning(job)
    _own_placement(job)
    placement = ModelParallelComponentPlacement.from_entries(job.placement, job.cluster, job.model_parallel)
    costs = {cost.stage.name: cost for cost in stage_costs(task, model)}
    rbs = task.rollout_batch_size
    mode = placement.placement_mode
    if mode is PlacementMode.COLLOCATED:
        rng = _range(placement.get_hardware_ranks("actor"))
        values = tuple(_per_batch(costs[name], _count(rng)) for name in task.chain)
        return Schedule(COLLOCATED, task.chain, (rng,) * len(values), values, collocated_total(values, rbs), 1)
    if mode is not PlacementMode.DISAGGREGATED:
        raise PlacementError(f"rlplace cost models collocated and disaggregated placements, not {mode.value} ones")
    present = [name for name in task.chain if name in placement.components]
    ranges = {name: _range(placement.get_hardware_ranks(name)) for name in present}
    ranges.setdefault("inference", ranges["actor"])  # no inference component: the actor does it (docstring)
    values = {name: _per_batch(costs[name], _count(ranges[name])) for name in task.chain}
    stages = [values[name] for name in present]
    if "inference" in task.chain and "inference" not in present:
        stages[present.index("actor")] += values["inference"]
    return Schedule(
        DISAGGREGATED,
        task.chain,
        tuple(ranges[name] for name in task.chain),
        tuple(values[name] for name in task.chain),
        pipelined_total(stages, rbs),
        len(present),
    )


def _per_batch(cost: StageCost, gpus: int) -> float:
    value = cost(gpus)
    if value is None:
        raise PlacementError(
            f"component '{cost.stage.name}' on {gpus} GPUs has no cost under the {cost.model.value} model: "
            f"{cost.why_not(gpus)}"
        )
    return value


def _count(rng: tuple[int, int]) -> int:
    return rng[1] - rng[0] + 1


def _range(ranks: list[int]) -> tuple[int, int]:
    return (min(ranks), max(ranks))


def predict_embodied(job: Job) -> Schedule:
    """An embodied job's placement: env and rollout collocated on all GPUs or on disjoint ones, actor on all."""
    task = read_embodied(job)
    _own_placement(job)
    placement = HybridComponentPlacement.from_entries(job.placement, job.cluster)
    missing = [name for name in EMBODIED_CHAIN if name not in placement.components]
    if missing:
        raise PlacementError(f"an embodied placement needs env, rollout and actor; missing: {', '.join(missing)}")
    units = {}
    for name in EMBODIED_CHAIN:
        units[name] = placement.get_units(name)
        if any(kind != ACCELERATOR for _, _, kind in units[name]):
            raise PlacementError(f"component '{name}' is not placed on GPUs; rlplace cost models GPU placements")
    G = task.num_gpus
    if len(units["actor"]) != G:
        raise PlacementError(f"the embodied cost model runs the actor on all {G} GPUs, not {len(units['actor'])}")
    if units["env"] == units["rollout"] and len(units["env"]) == G:
        schedule = collocated_schedule(task)
    elif not units["env"] & units["rollout"]:
        schedule = hybrid_schedule(task, len(units["env"]), len(units["rollout"]))
    else:
        raise PlacementError("env and rollout must share all GPUs (collocated) or use disjoint GPUs (pipelined)")
    if schedule is None:
        raise PlacementError(
            f"env on {len(units['env'])} GPUs and rollout on {len(units['rollout'])} GPUs are outside the profile "
            f"(data.env_num {task.env_num} must split evenly, within the largest profiled load)"
        )
    ranks = {name: sorted(placement.get_hardware_ranks(name)) for name in schedule.names}
    return replace(schedule, ranges=tuple(_range(ranks[name]) for name in schedule.names))
