"""An RLJob -> its plan: the placement_core config, auto placement, the plan data, the worker pods.

Pure: it takes the job, its NodeGroups and the node index, and returns what the handler writes. Errors are
placement_core's: `CapacityError` (more nodes could fix it) or `PlacementError` (the spec is wrong).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement_core.cluster import ACCELERATOR, Cluster
from placement_core.components import ComponentPlacement
from placement_core.errors import PlacementError
from placement_core.plan import build_plan, component_placement
from rlplace_operator.builders.raycluster import WorkerNode
from rlplace_operator.models import (
    ComponentSummary,
    PlacementEntry,
    PlacementMode,
    ResolvedPlacement,
    RLJobSpec,
)
from rlplace_operator.names import PROFILE_ANNOTATION
from rlplace_operator.selection import JobGroup, NodeInfo, job_cluster, unit_resource


@dataclass
class JobPlan:
    """Everything the handler needs to write for one job."""

    plan: dict
    applied: list[PlacementEntry]
    predicted_iteration_time: float | None
    workers: list[WorkerNode]
    summary: ResolvedPlacement
    gpus: int


def profile_of(spec: RLJobSpec, annotations: Mapping[str, str]) -> dict | None:
    """Profiled costs from the rlplace.io/profile annotation (JSON) or spec.profile, in autoplace's keys."""
    raw = annotations.get(PROFILE_ANNOTATION)
    if raw is not None:
        try:
            profile = json.loads(raw)
        except json.JSONDecodeError as err:
            raise PlacementError(f"annotation {PROFILE_ANNOTATION} is not valid JSON: {err.msg}") from None
        if not isinstance(profile, dict):
            raise PlacementError(f"annotation {PROFILE_ANNOTATION} must be a JSON object with actor_cost, ...")
        return profile
    if spec.profile is not None:
        return spec.profile.model_dump(exclude_none=True)
    return None


def wants_auto_placement(spec: RLJobSpec, annotations: Mapping[str, str]) -> bool:
    return spec.auto_placement or PROFILE_ANNOTATION in annotations


def placement_config(
    spec: RLJobSpec, entries: Sequence[PlacementEntry], cluster: Cluster, profile: Mapping | None
) -> dict:
    """The job in the config shape `rlplace plan` and `rlplace autotune` read."""
    mp, algorithm = spec.model_parallel, spec.algorithm
    inference_model = {
        key: value
        for key, value in (
            ("tensor_model_parallel_size", mp.inference_tensor_parallel_size),
            ("pipeline_model_parallel_size", mp.inference_pipeline_parallel_size),
        )
        if value is not None
    }
    placement = {
        e.components: {"node_group": e.node_group, "placement": e.placement} if e.node_group else e.placement
        for e in entries
    }
    config: dict = {
        "runner": {"task_type": "reasoning" if spec.placement_mode is PlacementMode.MODEL_PARALLEL else "embodied"},
        "cluster": {
            "num_nodes": cluster.num_nodes,
            "accelerators_per_node": [n.num_accelerators for n in cluster.nodes],
            "component_placement": placement,
        },
        "actor": {
            "model": {
                "tensor_model_parallel_size": mp.actor_tensor_parallel_size,
                "context_model_parallel_size": mp.actor_context_parallel_size,
                "pipeline_model_parallel_size": mp.actor_pipeline_parallel_size,
            }
        },
        "rollout": {
            "tensor_parallel_size": mp.rollout_tensor_parallel_size,
            "pipeline_parallel_size": mp.rollout_pipeline_parallel_size,
            "max_running_requests": algorithm.max_running_requests,
        },
        "inference": {"model": inference_model},
        "algorithm": {
            "recompute_logprobs": algorithm.recompute_logprobs,
            "group_size": algorithm.group_size,
            "n_minibatches": algorithm.n_minibatches,
        },
        "data": {"rollout_batch_size": algorithm.rollout_batch_size},
    }
    if profile is not None:
        config["profile_data"] = dict(profile)
    return config


def _auto_entries(config: dict) -> tuple[list[PlacementEntry], float]:
    from placement_core.autoplace import autotune

    # The operator's auto placement is the reasoning search (collocated or disaggregated model-parallel).
    result = autotune({**config, "runner": {"task_type": "reasoning"}})
    entries = [
        PlacementEntry(components=key, placement=str(value)) for key, value in result.component_placement.items()
    ]
    return entries, result.total_cost


def plan_job(
    spec: RLJobSpec, annotations: Mapping[str, str], groups: Sequence[JobGroup], nodes: Mapping[str, NodeInfo]
) -> JobPlan:
    cluster = job_cluster(groups, nodes)
    entries: list[PlacementEntry] = list(spec.component_placement)
    predicted = None
    kind = "model-parallel" if spec.placement_mode is PlacementMode.MODEL_PARALLEL else "hybrid"
    if wants_auto_placement(spec, annotations):
        profile = profile_of(spec, annotations)
        if profile is None:
            raise PlacementError(
                "auto placement needs profiled costs: set spec.profile or the rlplace.io/profile annotation"
            )
        entries, predicted = _auto_entries(placement_config(spec, entries, cluster, profile))
        kind = "model-parallel"
    placed = component_placement(placement_config(spec, entries, cluster, None), cluster, kind)
    plan = build_plan(placed, isolate_accelerator=spec.isolate_accelerators, with_env=True)
    workers = worker_nodes(plan, cluster, groups, nodes)
    return JobPlan(
        plan=plan,
        applied=entries,
        predicted_iteration_time=predicted,
        workers=workers,
        summary=summarize(placed, plan),
        gpus=sum(worker.gpus for worker in workers),
    )


def summarize(placed: ComponentPlacement, plan: Mapping) -> ResolvedPlacement:
    """Per component: processes, GPUs (distinct accelerators it holds), and nodes in rank order."""
    components = []
    for name, component in plan["components"].items():
        nodes = list(dict.fromkeys(p["node_name"] for p in component["processes"]))
        gpus = sum(1 for unit in placed.get_units(name) if unit[2] == ACCELERATOR)
        components.append(ComponentSummary(name=name, processes=component["world_size"], gpus=gpus, nodes=nodes))
    return ResolvedPlacement(mode=plan["mode"], components=components)


def worker_nodes(
    plan: Mapping, cluster: Cluster, groups: Sequence[JobGroup], nodes: Mapping[str, NodeInfo]
) -> list[WorkerNode]:
    """One worker per node any process uses, requesting every unit the job's groups count on it."""
    used = sorted({p["cluster_node_rank"] for c in plan["components"].values() for p in c["processes"]})
    # Membership as sets: with 1,000 nodes a scan of every group's node list per node would be quadratic.
    members = [(group, {e.name for e in group.status.nodes}) for group in groups]
    workers = []
    for rank in used:
        node = cluster.nodes[rank]
        info = nodes[node.name]
        requests: dict[str, int] = {}
        env: dict[str, str] = {}
        for group, names in members:
            if node.name in names:
                resource = unit_resource(group.spec)
                count = info.count(resource) if resource else 0
                if count:
                    requests[resource] = count
                env.update({v.name: v.value for v in group.spec.env})
        workers.append(WorkerNode(rank, node.name, node.num_accelerators, requests, env))
    return workers
