"""Admission in the operator: what the queue needs to know about the cluster, and the reservations.

The rules are in `admission.py` (pure). This module gathers their inputs from kopf indexes (pods bound to
nodes, the nodes each job's RayCluster is pinned to, the RLJobs) and keeps the `Ledger`: the reservations
made by this operator process, under one lock shared by every handler thread, so two jobs admitted at the
same moment never get the same node. After a restart the ledger starts empty and is rebuilt from what exists:
every RayCluster the operator made carries the `rlplace.io/nodes` annotation, and kopf fills the indexes
before any handler runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from rlplace_operator.admission import (
    Admitted,
    Decision,
    GroupDemand,
    JobKey,
    Pool,
    QueuedJob,
    busy_nodes,
    decide,
    fit,
)
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.models import JobPhase, RLJobSpec
from rlplace_operator.names import (
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODES_ANNOTATION,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
)
from rlplace_operator.selection import JobGroup

#: KubeRay's label on the pods of a RayCluster (its value is the RayCluster's name). The operator's own Ray pods
#: also carry the job label, which names the job when the cluster belongs to its RayJob.
RAY_CLUSTER_POD_LABEL = "ray.io/cluster"


#: Phases of jobs that wait for admission: Queued, and new jobs the operator has not reconciled yet (so jobs
#: created at the same moment are admitted in queue order, not in the order their handlers happen to run).
_WAITING_PHASES = {None, "", JobPhase.QUEUED}


def pod_unit_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """The extended resources (names with a `/`, e.g. nvidia.com/gpu) a pod's containers request."""
    requests: dict[str, int] = {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        # Extended resources cannot be overcommitted: a limit alone sets the request to the same value.
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource, quantity in wanted.items():
            if "/" in resource and str(quantity).isdigit() and int(quantity) > 0:
                requests[resource] = requests.get(resource, 0) + int(quantity)
    return requests


@dataclass(frozen=True, slots=True)
class PodUse:
    """A pod bound to a node that requests extended resources."""

    pod: str
    """namespace/name."""
    job: JobKey | None
    """The RLJob whose RayCluster (or RayJob) made the pod, if any."""
    requests: Mapping[str, int]


@kopf.index("", "v1", "pods")
def pod_units_index(
    namespace: str, name: str, spec: kopf.Spec, status: kopf.Status, labels: kopf.Labels, **_: Any
) -> dict[str, PodUse] | None:
    """Bound, unfinished pods that request extended resources, by node: what keeps a node busy."""
    node = spec.get("nodeName")
    if not node or status.get("phase") in ("Succeeded", "Failed"):
        return None
    requests = pod_unit_requests(spec)
    if not requests:
        return None
    job = labels.get(JOB_LABEL) or labels.get(RAY_CLUSTER_POD_LABEL)
    return {node: PodUse(f"{namespace}/{name}", (namespace, job) if job else None, requests)}


@kopf.index(RAY_GROUP, RAY_VERSION, RAYCLUSTER_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def raycluster_nodes_index(
    namespace: str, labels: kopf.Labels, annotations: kopf.Annotations, **_: Any
) -> dict[JobKey, frozenset[str]] | None:
    """The nodes each job's RayCluster is pinned to: what admitted jobs hold (restart-safe)."""
    job, nodes = labels.get(JOB_LABEL), annotations.get(NODES_ANNOTATION)
    if job is None or nodes is None:
        return None
    return {(namespace, job): frozenset(n for n in nodes.split(",") if n)}


@dataclass(frozen=True)
class PlannedDemand:
    """A job planned on all its groups' ready nodes: what it needs, and the spec to plan its admitted nodes
    with (auto placement resolved to the entries the search chose, so the search does not run again on
    the smaller cluster of admitted nodes)."""

    demand: tuple[GroupDemand, ...]
    spec: RLJobSpec
    predicted_iteration_time: float | None
    excluded: Mapping[str, str] = field(default_factory=dict)
    """Nodes of its groups whose taints its workers do not tolerate, and why (selection.untolerated_nodes)."""


@dataclass
class Ledger:
    """Reservations of this operator process and the planned demand of each job, under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    reserved: dict[JobKey, frozenset[str]] = field(default_factory=dict)
    demands: dict[JobKey, tuple[tuple, PlannedDemand]] = field(default_factory=dict)

    def release(self, key: JobKey) -> None:
        with self.lock:
            self.reserved.pop(key, None)

    def forget(self, key: JobKey) -> None:
        with self.lock:
            self.reserved.pop(key, None)
            self.demands.pop(key, None)

    def demand(self, key: JobKey, fingerprint: tuple) -> PlannedDemand | None:
        with self.lock:
            known = self.demands.get(key)
        return known[1] if known is not None and known[0] == fingerprint else None

    def remember_demand(self, key: JobKey, fingerprint: tuple, demand: PlannedDemand) -> None:
        with self.lock:
            self.demands[key] = (fingerprint, demand)


def ready_nodes(group: JobGroup, node_index: kopf.Index) -> list[str]:
    """A group's ready nodes in rank order (the order its status lists them)."""
    return [e.name for e in group.status.nodes if e.ready and indexed(node_index, e.name) is not None]


def groups_with_nodes(groups: Sequence[JobGroup], cluster: Iterable[tuple[str, Sequence[str]]]) -> list[JobGroup]:
    """The job's groups cut down to the nodes admission picked, in the same rank order."""
    picked = dict(cluster)
    result = []
    for group in groups:
        names = set(picked.get(group.name, ()))
        nodes = [e for e in group.status.nodes if e.name in names]
        result.append(JobGroup(group.name, group.spec, group.status.model_copy(update={"nodes": nodes})))
    return result


@dataclass(frozen=True)
class World:
    """What one admission pass reads: the kopf indexes and the groups' ready nodes."""

    rljobs: kopf.Index
    rayclusters: kopf.Index
    pods: kopf.Index
    groups: Mapping[str, Sequence[str]]
    unit_resources: set[str]


def _held(ledger: Ledger, world: World) -> dict[str, JobKey]:
    """Node -> the admitted job that holds it: RayClusters that exist, plus this process's reservations."""
    held: dict[str, JobKey] = {}
    for key in world.rayclusters:
        for node in indexed(world.rayclusters, key) or ():
            held[node] = key
    for key, nodes in list(ledger.reserved.items()):
        # kopf indexes an RLJob before its handlers run, so a job missing from the index was deleted.
        if indexed(world.rljobs, key) is None:
            del ledger.reserved[key]
            ledger.demands.pop(key, None)
            continue
        for node in nodes:
            held.setdefault(node, key)
    return held


def _pod_units(world: World, exclude: JobKey) -> dict[str, dict[str, Mapping[str, int]]]:
    pods: dict[str, dict[str, Mapping[str, int]]] = {}
    for node in world.pods:
        for use in world.pods.get(node, ()):
            if use.job != exclude:
                pods.setdefault(node, {})[use.pod] = use.requests
    return pods


def admit(ledger: Ledger, world: World, job: QueuedJob) -> Decision:
    """Admit `job` now or say where it waits; reserves the nodes of every job this pass admits.

    A job that already holds nodes (its RayCluster exists: an update, or resume after a restart) keeps them
    when its demand still fits them; otherwise it goes through the queue like any other. Waiting jobs whose
    demand this process has not planned yet keep their place (see `admission.decide`).
    """
    with ledger.lock:
        held = _held(ledger, world)
        own = {node for node, key in held.items() if key == job.key}
        others = {node: key for node, key in held.items() if key != job.key}
        busy = busy_nodes(_pod_units(world, job.key), world.unit_resources, others)
        pool = Pool(world.groups, busy)
        if own:
            all_nodes = {node for nodes in world.groups.values() for node in nodes}
            kept = fit(job, pool, set(busy) | (all_nodes - own))
            if not isinstance(kept, tuple):
                ledger.reserved[job.key] = kept.nodes
                return kept
        queue = [job]
        for key in world.rljobs:
            entry = indexed(world.rljobs, key)
            if key == job.key or key in ledger.reserved or entry["status"].get("phase") not in _WAITING_PHASES:
                continue
            known = ledger.demands.get(key)
            demand, excluded = (known[1].demand, known[1].excluded) if known else (None, {})
            queue.append(QueuedJob(key, entry["priority"], entry["created"], demand, excluded))
        decisions = decide(queue, pool)
        for key, decision in decisions.items():
            if isinstance(decision, Admitted):
                ledger.reserved[key] = decision.nodes
        return decisions[job.key]
