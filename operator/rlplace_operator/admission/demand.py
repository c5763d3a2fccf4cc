"""What a job needs of each of its NodeGroups: its plan on all the groups' ready nodes, as admission's demand.

Planning a job on a large group is the costly step (tens of ms at 1,000 nodes), so the demand is remembered in
the Ledger per job and per input, and shared by jobs that would be planned the same (a burst of one sweep).
Errors are placement_core's: `CapacityError` (the job does not fit even the whole groups: nodes may join) or
`PlacementError` (the spec is wrong); the caller names them on the job.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from placement_core.cluster import ACCELERATOR
from rlplace_operator.admission.ledger import Ledger, PlannedDemand
from rlplace_operator.admission.rules import demand_from_workers
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import PROFILE_ANNOTATION, JobKey
from rlplace_operator.api.rljob import PlacementMode, RLJobSpec
from rlplace_operator.cluster.selection import JobGroup, ready_nodes, untolerated_nodes
from rlplace_operator.cluster.snapshot import indexed
from rlplace_operator.planning.plan import JobPlan, plan_job, profiling_spec, ranked_across, wants_auto_placement

#: RLJobSpec fields that do not change a job's plan (what it runs and how it is queued).
_NOT_PLANNING = frozenset({"ray", "entrypoint", "run", "suspend", "priority", "checkpoint"})


def planning_fields(spec: RLJobSpec) -> str:
    """The spec fields a plan depends on, as one comparable string."""
    return json.dumps({k: v for k, v in dump(spec).items() if k not in _NOT_PLANNING}, sort_keys=True)


def resolved_spec(spec: RLJobSpec, annotations: Mapping[str, str], applied: Sequence[Any]) -> RLJobSpec:
    """The spec to plan the admitted nodes with: auto placement resolved to the entries the search chose, a job
    that profiles first to its collocated profiling run."""
    if spec.auto_placement.profile_first:
        return profiling_spec(spec, annotations, applied)
    if not wants_auto_placement(spec, annotations):
        return spec
    update = {
        "component_placement": list(applied),
        "auto_placement": spec.auto_placement.model_copy(update={"enabled": False}),
    }
    return spec.model_copy(update={**update, "placement_mode": PlacementMode.MODEL_PARALLEL})


def plan_on(
    spec: RLJobSpec,
    annotations: Mapping[str, str],
    groups: Sequence[JobGroup],
    node_index: Mapping[str, Any],
    whole_groups: bool = False,
) -> JobPlan:
    """The job's plan on these groups' nodes (every node the index holds; `whole_groups`: every ready node of the
    job's NodeGroups, see plan_job)."""
    return plan_job(spec, annotations, groups, {n: indexed(node_index, n) for n in node_index}, whole_groups)


#: How a request's resource is named in a message.
_UNITS = {"cpu": "CPUs", "memory": "of memory"}


def _short(request: Mapping[str, str], info: Any) -> str | None:
    """The resource of `request` (cpu, memory) the node has less of (None: it can hold the request)."""
    for resource, asked in request.items():
        have = info.allocatable.get(resource)
        if have is not None and parse_quantity(asked) > parse_quantity(have):
            return resource
    return None


def _largest(resource: str, infos: Sequence[Any]) -> str:
    return max((i.allocatable.get(resource, "0") for i in infos), key=parse_quantity)


def oversized(
    spec: RLJobSpec, groups: Sequence[JobGroup], node_index: Mapping[str, Any]
) -> tuple[str | None, dict[str, str]]:
    """A request no node of the job's groups can ever hold (its worker's or its head's CPU or memory: the job
    cannot run, however long it waits), and the ready nodes too small for its workers, with why (left out of its
    admission, as untolerated taints are)."""
    worker = {"cpu": spec.ray.worker_resources.cpu, "memory": spec.ray.worker_resources.memory}
    head = {"cpu": spec.ray.head_resources.cpu, "memory": spec.ray.head_resources.memory}
    small: dict[str, str] = {}
    every: list[Any] = []
    for group in groups:
        infos = [indexed(node_index, name) for name in ready_nodes(group, node_index)]
        every += infos
        short = {info.name: _short(worker, info) for info in infos}
        for name, resource in short.items():
            if resource is not None:
                small[name] = f"node {name} has less {resource} than a worker of the job asks ({worker[resource]})"
        if infos and all(short.values()):
            resource = next(r for r in short.values() if r)
            largest = _largest(resource, infos)
            return (
                f"a worker pod of the job asks {worker[resource]} {_UNITS[resource]}; no node of NodeGroup "
                f"{group.name} has that many (the largest has {largest})",
                small,
            )
    if every and all(_short(head, info) for info in every):
        resource = _short(head, every[0]) or "cpu"
        return (
            f"the Ray head pod asks {head[resource]} {_UNITS[resource]}; no node of the job's NodeGroups has that "
            f"many (the largest has {_largest(resource, every)})",
            small,
        )
    return None, small


def exchange_groups(spec: RLJobSpec, groups: Sequence[JobGroup]) -> frozenset[str]:
    """The job's NodeGroups whose processes exchange weights (spec.topology.exchangeGroups; by default its GPU
    groups, where the trainer and the rollout run), packed under one domain by admission."""
    listed = spec.topology.exchange_groups if spec.topology is not None else None
    if listed is not None:
        return frozenset(listed)
    return frozenset(group.name for group in groups if group.status.hardware_type == ACCELERATOR)


def planned_demand(
    key: JobKey,
    generation: int | None,
    spec: RLJobSpec,
    annotations: Mapping[str, str],
    groups: Sequence[JobGroup],
    node_index: Mapping[str, Any],
    excluded_by_status: Mapping[str, str],
    ledger: Ledger,
) -> PlannedDemand:
    """What the job needs of each group, from its plan on all the groups' ready nodes (remembered per input).
    `excluded_by_status`: nodes that failed one of its attempts (status.excludedNodes)."""
    ranked = [(group.name, ready_nodes(group, node_index)) for group in groups]
    nodes = tuple((n, tuple(r)) for n, r in ranked)
    infos = {name: indexed(node_index, name) for _, names in ranked for name in names}
    # Nodes whose taints the job's workers do not tolerate (its own, not shared: tolerations are per job) and
    # the nodes that failed one of its attempts (a restart left them out: reconcile/restarts.py).
    excluded = untolerated_nodes(spec, groups, infos)
    excluded.update(excluded_by_status)
    fingerprint = (
        generation,
        annotations.get(PROFILE_ANNOTATION),
        nodes,
        tuple(sorted(excluded.items())),
        planning_fields(spec),  # a re-placement (planning/recommend.py) plans other entries for the same generation
    )
    known = ledger.demand(key, fingerprint)
    if known is not None:
        return known
    # Jobs that would be planned the same (same placement fields, profile and nodes: a burst of one sweep) share
    # one planning.
    shape = (planning_fields(spec), annotations.get(PROFILE_ANNOTATION), nodes)
    shared = ledger.shared_demand(shape)
    if shared is None:
        planned = plan_on(spec, annotations, groups, node_index, whole_groups=True)
        applied = tuple(planned.applied)
        demand = demand_from_workers(
            ranked,
            {w.name for w in planned.workers},
            ranked_across(resolved_spec(spec, annotations, applied)),
            {w.name: len(w.held_gpus) for w in planned.workers},
            {group.name for group in groups if group.spec.dra_driver is not None},
        )
        exchange = exchange_groups(spec, groups)
        demand = tuple(
            dataclasses.replace(d, exchanges=d.group in exchange, cpu_only=group.status.hardware_type is None)
            for d, group in zip(demand, groups, strict=True)
        )
        shared = (demand, applied, planned.predicted_iteration_time)
        ledger.remember_shared_demand(shape, shared)
    demand, applied, predicted = shared
    result = PlannedDemand(demand, resolved_spec(spec, annotations, applied), predicted, excluded)
    ledger.remember_demand(key, fingerprint, result)
    return result
