"""rlplace's own queue: which waiting jobs start now on which free nodes, from what the operator's indexes hold.

The rules are in `rules.py` (pure). This module gathers their inputs from a `Snapshot` (pods bound to nodes, the
nodes each job's RayCluster is pinned to, the GPUs allocated claims hold, the RLJobs) and the `Ledger`'s
reservations, runs them, and reserves what they admit (docs/admission.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlplace_operator.admission import admitter
from rlplace_operator.admission.ledger import Ledger, PlannedDemand
from rlplace_operator.admission.rules import (
    Admitted,
    Decision,
    JobKey,
    Pool,
    QueuedJob,
    busy_nodes,
    decide,
    fit,
)
from rlplace_operator.api.status import JobPhase
from rlplace_operator.cluster.dra import Device
from rlplace_operator.cluster.selection import GPU_RESOURCE, JobGroup, ready_nodes, unit_resource, untolerated_among
from rlplace_operator.cluster.snapshot import Snapshot, indexed
from rlplace_operator.cluster.taints import Taint

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
class AdmissionWorld:
    """What one admission pass reads: copies of the kopf indexes (`copy_index`) and the groups' ready nodes."""

    rljobs: Mapping[JobKey, Any]
    rayclusters: Mapping[JobKey, Any]
    pods: Mapping[str, Any]
    groups: Mapping[str, Sequence[str]]
    unit_resources: set[str]
    #: The ready nodes of the groups that have taints: node -> its taints. Read fresh by each pass: taints come and
    #: go (a node's not-ready taint until it is Ready, a `kubectl taint` removed).
    taints: Mapping[str, tuple[Taint, ...]] = field(default_factory=dict)
    #: Those same nodes -> the groups they are in.
    tainted_in: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: `tainted_now`'s answers in this world, by the demands' tolerations_key (filled as they are asked).
    untolerated: dict[tuple[tuple[str, ...], str], dict[str, str]] = field(default_factory=dict, compare=False)
    #: Ready nodes of DRA groups -> their GPUs in host order and who holds which: claims (by job, None for
    #: others' claims) as the cluster's allocated claims say.
    dra_nodes: Mapping[str, DraNode] = field(default_factory=dict)
    #: Ready nodes of the groups -> their network domains (rules.Pool.domains), from their topology labels; only
    #: nodes that have one.
    domains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Group -> its network levels, widest first (rules.Pool.levels: the NodeGroup's status.topology.levels).
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Ready nodes of the groups that have GPUs (rules.Pool.gpu_nodes).
    gpu_nodes: frozenset[str] = frozenset()
    #: The groups' nodes by network domain (rules.Pool.memo), built when first asked and shared by the pools of
    #: this snapshot's admissions.
    layouts: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class DraNode:
    """A ready node of a DRA group as admission sees it: its GPU count and which GPUs allocated claims hold."""

    gpus: int
    claimed: Mapping[int, JobKey | None]
    """Host GPU number -> the job whose worker pod's claim holds it (None: a claim of no RLJob)."""


def dra_node(devices: Sequence[Device], driver: str, claims: Mapping[tuple[str, str], list[Any]]) -> DraNode:
    """One DRA node's GPUs and the claims that hold them (from the resourceclaim_index copy)."""
    pools = {d.pool for d in devices}
    position = {(d.pool, d.name): i for i, d in enumerate(devices)}
    claimed: dict[int, JobKey | None] = {}
    for pool in pools:
        for held in claims.get((driver, pool), ()):
            for device in held:
                at = position.get((device.pool, device.device))
                if at is not None:
                    namespace = device.claim.split("/", 1)[0]
                    claimed[at] = (namespace, device.job) if device.job else None
    return DraNode(len(devices), claimed)


def _held(ledger: Ledger, world: AdmissionWorld) -> tuple[dict[str, JobKey], dict[str, dict[int, JobKey]]]:
    """Node -> the admitted job that holds it, and DRA node -> GPU -> the job that holds it: RayClusters that
    exist, plus this process's reservations."""
    held: dict[str, JobKey] = {}
    gpus: dict[str, dict[int, JobKey]] = {}
    for key in world.rayclusters:
        holding = indexed(world.rayclusters, key)
        if holding is None:
            continue
        for node in holding.nodes:
            held[node] = key
        for node, ids in holding.gpus.items():
            gpus.setdefault(node, {}).update(dict.fromkeys(ids, key))
    for key, nodes in list(ledger.reserved.items()):
        # kopf indexes an RLJob before its handlers run, so a job missing from the index was deleted.
        if indexed(world.rljobs, key) is None:
            del ledger.reserved[key]
            ledger.reserved_gpus.pop(key, None)
            ledger.demands.pop(key, None)
            continue
        for node in nodes:
            held.setdefault(node, key)
        for node, ids in ledger.reserved_gpus.get(key, {}).items():
            for gpu in ids:
                gpus.setdefault(node, {}).setdefault(gpu, key)
    return held, gpus


def free_gpus(
    world: AdmissionWorld, held_gpus: Mapping[str, Mapping[int, JobKey]], skip: JobKey | None = None
) -> dict[str, tuple[int, ...]]:
    """DRA node -> its GPUs no claim and no admitted job holds (`skip`'s own left out: they count as free for
    it)."""
    free = {}
    for node, info in world.dra_nodes.items():
        taken = {g for g, key in info.claimed.items() if key is None or key != skip}
        taken |= {g for g, key in held_gpus.get(node, {}).items() if key != skip}
        free[node] = tuple(g for g in range(info.gpus) if g not in taken)
    return free


def _pod_units(world: AdmissionWorld, exclude: JobKey | None) -> dict[str, dict[str, Mapping[str, int]]]:
    """Node -> pod -> the units it requests, but for the pods of job `exclude` (None: every pod, also those of no
    job: a pod of another user makes its node busy for the queue pass as for one job's admission)."""
    pods: dict[str, dict[str, Mapping[str, int]]] = {}
    for node in world.pods:
        for use in world.pods.get(node, ()):
            if exclude is None or use.job != exclude:
                pods.setdefault(node, {})[use.pod] = use.requests
    return pods


def _backing_off(status: Mapping[str, Any]) -> bool:
    """A Queued job whose retryAfter (set after a provisioning failure that may pass) is still ahead."""
    retry_after = status.get("retryAfter")
    if not retry_after or status.get("phase") != JobPhase.QUEUED:
        return False
    return dt.datetime.fromisoformat(retry_after.replace("Z", "+00:00")) > dt.datetime.now(dt.UTC)


def status_excluded(status: Mapping[str, Any], generation: int | None) -> dict[str, str]:
    """Nodes that failed one of the job's attempts of this spec (status.excludedNodes), with why: left out of its
    plans like the nodes whose taints it does not tolerate."""
    if status.get("observedGeneration") != generation:
        return {}  # a new spec starts with every node again
    return {
        e["name"]: f"node {e['name']} is left out for this job ({e.get('reason') or 'it failed an attempt'})"
        for e in status.get("excludedNodes") or []
        if e.get("name")
    }


def tainted_now(planned: PlannedDemand, world: AdmissionWorld) -> dict[str, str]:
    """The nodes whose taints the job's workers do not tolerate, as the pass sees them (never the ones found
    when the job was planned: a job held off a node by a taint that has gone since would wait forever).
    Worked out once per world for all the jobs with the same groups and pod settings: every admission reads
    every waiting job's, and a burst of 1,000 jobs on fresh (not-ready tainted) nodes spent most of the
    operator's time redoing it under the ledger's lock."""
    if not world.taints:
        return {}
    key = planned.tolerations_key
    found = world.untolerated.get(key)
    if found is None:
        own = set(planned.spec.node_groups)
        membership = {node: sorted(groups & own) for node, groups in world.tainted_in.items()}
        found = world.untolerated[key] = untolerated_among(planned.spec, membership, world.taints)
    return found


def _waiting_queue(ledger: Ledger, world: AdmissionWorld, skip: JobKey | None) -> list[QueuedJob]:
    """The jobs that wait for admission, each with its demand if this process planned it."""
    queue = []
    for key in world.rljobs:
        entry = indexed(world.rljobs, key)
        if key == skip or key in ledger.reserved or entry["status"].get("phase") not in _WAITING_PHASES:
            continue
        if admitter.by_workload(entry.get("labels") or {}):
            continue  # its Workload's admitter admits it, not this queue
        if _backing_off(entry["status"]):
            continue  # backing off after a provisioning failure: it holds no place in the queue until then
        known = ledger.demands.get(key)
        demand, excluded = (known[1].demand, tainted_now(known[1], world)) if known else (None, {})
        excluded = {**excluded, **status_excluded(entry["status"], entry.get("generation"))}
        within = known[1].spec.required_topology_level if known else None
        queue.append(QueuedJob(key, entry["priority"], entry["created"], demand, excluded, within))
    return queue


def pool_of(world: AdmissionWorld, busy: Mapping[str, str], free: Mapping[str, tuple[int, ...]]) -> Pool:
    """The pool an admission decides on: the world's groups and domains, who keeps which node busy, the free GPUs."""
    return Pool(world.groups, busy, free, world.domains, world.levels, world.gpu_nodes, world.layouts)


def queue_pass(ledger: Ledger, world: AdmissionWorld) -> dict[JobKey, Decision]:
    """One admission decision for every waiting job (one `decide` over the whole queue); the nodes of each job
    it admits are reserved, so that job's reconcile finds them its own."""
    with ledger.lock:
        held, held_gpus = _held(ledger, world)
        busy = busy_nodes(_pod_units(world, None), world.unit_resources, held)
        pool = pool_of(world, busy, free_gpus(world, held_gpus))
        decisions = decide(_waiting_queue(ledger, world, None), pool)
        for key, decision in decisions.items():
            if isinstance(decision, Admitted):
                ledger.reserve(key, decision)
        return decisions


@dataclass(frozen=True)
class GroupGpus:
    """A NodeGroup's capacity as the queue sees it: GPUs (hardware units) of its ready nodes, those admitted
    jobs hold, and those nobody holds (a device-plugin node counts free only while no pod takes a unit of it)."""

    total: int
    admitted: int
    free: int
    nodes: int
    ready_nodes: int


def group_gpus(ledger: Ledger, snapshot: Snapshot) -> dict[str, GroupGpus]:
    """Per NodeGroup of `snapshot`, its GPUs admitted and free (the metrics' view of what a pass admits from)."""
    world = admission_world(ledger, snapshot)
    with ledger.lock:
        held, held_gpus = _held(ledger, world)
    busy = busy_nodes(_pod_units(world, None), world.unit_resources, held)
    free_dra = free_gpus(world, held_gpus)
    result = {}
    for name, ready in _ready_units(ledger, snapshot, world).items():
        admitted = free = 0
        for node, units in ready:
            if node in world.dra_nodes:
                admitted += len(held_gpus.get(node, {}))
                free += len(free_dra.get(node, ()))
            elif node in held:
                admitted += units
            elif node not in busy:
                free += units
        total = sum(units for _, units in ready)
        nodes = len(ledger.group(name, indexed(snapshot.nodegroups, name)).status.nodes)
        result[name] = GroupGpus(total, admitted, free, nodes, len(ready))
    return result


def _ready_units(ledger: Ledger, snapshot: Snapshot, world: AdmissionWorld) -> dict[str, list[tuple[str, int]]]:
    """Per NodeGroup, its ready nodes in rank order with the hardware units each has (its status's count)."""
    ready = {}
    for name in snapshot.nodegroups:
        units = {e.name: e.units for e in ledger.group(name, indexed(snapshot.nodegroups, name)).status.nodes}
        ready[name] = [(node, units.get(node, 0)) for node in world.groups.get(name, [])]
    return ready


def requested_gpus(ledger: Ledger, snapshot: Snapshot) -> dict[JobKey, int]:
    """Per job whose demand this process planned, the GPUs it asks for: on a DRA group the GPUs its plan uses per
    node, on others every GPU of each node it needs (its workers take whole nodes), the node at each position
    being the group's ready node there now."""
    ready = _ready_units(ledger, snapshot, admission_world(ledger, snapshot))
    with ledger.lock:
        demands = [(key, planned) for key, (_, planned) in ledger.demands.items()]
    asked = {}
    for key, planned in demands:
        total = 0
        for group in planned.demand:
            if group.cpu_only:
                continue
            if group.gpus is not None:
                total += sum(gpus for _, gpus in group.gpus)
                continue
            nodes = ready.get(group.group, [])
            total += sum(nodes[at][1] for at in group.used if at < len(nodes))
        asked[key] = total
    return asked


def held_by_others(ledger: Ledger, world: AdmissionWorld, key: JobKey, nodes: Iterable[str]) -> dict[str, JobKey]:
    """Of `nodes`, those another job holds (its RayCluster, or this process's reservation for it) -> that job.
    For nodes another admitter (Kueue) granted `key`: rlplace's queue may have given one to a job of its own a
    moment before the grant, and the two would then hold one node."""
    with ledger.lock:
        held, _ = _held(ledger, world)
    return {node: held[node] for node in nodes if node in held and held[node] != key}


def admit(ledger: Ledger, world: AdmissionWorld, job: QueuedJob, reserve: bool = True) -> Decision:
    """Admit `job` now or say where it waits; reserves the nodes of every job this pass admits (`reserve` False:
    only says what it would decide, as the elastic loop asks before it grows a running job).

    A job that already holds nodes (its RayCluster exists: an update, or resume after a restart) keeps them
    when its demand still fits them; otherwise it goes through the queue like any other. Waiting jobs whose
    demand this process has not planned yet keep their place (see `rules.decide`).
    """
    with ledger.lock:
        held, held_gpus = _held(ledger, world)
        own = {node for node, key in held.items() if key == job.key}
        own_gpus = {
            node: tuple(sorted(g for g, key in ids.items() if key == job.key)) for node, ids in held_gpus.items()
        }
        own_gpus = {node: ids for node, ids in own_gpus.items() if ids}
        others = {node: key for node, key in held.items() if key != job.key}
        busy = busy_nodes(_pod_units(world, job.key), world.unit_resources, others)
        # Its own GPUs count as free for it, as its own nodes do (a re-placement's new pods replace its old ones).
        pool = pool_of(world, busy, free_gpus(world, held_gpus, job.key))
        if own or own_gpus:
            all_nodes = {node for nodes in world.groups.values() for node in nodes}
            kept = fit(job, pool, set(busy) | (all_nodes - own - set(own_gpus)), own_gpus)
            if not isinstance(kept, tuple):
                if reserve:
                    ledger.reserve(job.key, kept)
                return kept
        # Only the jobs ahead of it decide where it goes (or its place): a burst of new jobs costs each one a
        # pass over the few still waiting ahead of it, not over the whole queue.
        ahead = [other for other in _waiting_queue(ledger, world, job.key) if other.order() < job.order()]
        decisions = decide([job, *ahead], pool)
        for key, decision in decisions.items():
            if reserve and isinstance(decision, Admitted):
                ledger.reserve(key, decision)
        return decisions[job.key]


def spare_node(
    ledger: Ledger, world: AdmissionWorld, key: JobKey, group: str, nodes: frozenset[str], lost: str
) -> str | None:
    """A node to replace the job's lost node `lost` with (its Replace ranks move there: docs/replace.md): a ready,
    untainted node of `group` that no job holds and no pod uses, the nearest to the lost one in the network (its
    rack, else its block: the job's ranks there were packed together), then the first in rank order. The job then
    holds `nodes` with `lost` swapped for it, so no other admission takes it meanwhile; None when the group has
    none free."""
    with ledger.lock:
        held, _ = _held(ledger, world)
        busy = busy_nodes(_pod_units(world, None), world.unit_resources, held)
        where = world.domains.get(lost, ())

        def nearness(node: str) -> int:
            """How many of the lost node's domains, widest first, the node shares (0: none, or no labels)."""
            path = world.domains.get(node, ())
            shared = 0
            while shared < min(len(path), len(where)) and path[shared] and path[shared] == where[shared]:
                shared += 1
            return shared

        free = [
            node
            for node in world.groups.get(group, ())
            if node not in busy and node not in nodes and node != lost and node not in world.taints
        ]
        if not free:
            return None
        node = max(free, key=nearness)  # the first of the nearest, in rank order
        ledger.reserved[key] = (nodes - {lost}) | {node}
        return node


def admission_world(ledger: Ledger, snapshot: Snapshot) -> AdmissionWorld:
    """What admission reads, from one snapshot of the indexes (built once per snapshot: at 1,000 nodes it walks
    every group's nodes, and a pass admits each of its jobs against it)."""
    with ledger.lock:
        world = ledger.worlds.get(snapshot)
    if world is None:
        world = _admission_world(ledger, snapshot)
        with ledger.lock:
            ledger.worlds[snapshot] = world
    return world


def _admission_world(ledger: Ledger, snapshot: Snapshot) -> AdmissionWorld:
    groups, resources = {}, set()
    taints: dict[str, tuple[Taint, ...]] = {}
    tainted_in: dict[str, set[str]] = {}
    dra_nodes: dict[str, DraNode] = {}
    domains: dict[str, tuple[str, ...]] = {}
    levels: dict[str, tuple[str, ...]] = {}
    gpu_nodes: set[str] = set()
    for name in snapshot.nodegroups:
        group = ledger.group(name, indexed(snapshot.nodegroups, name))
        groups[name] = ready_nodes(group, snapshot.nodes)
        levels[name] = group.levels
        dra = group.spec.dra_driver
        for node in groups[name]:
            info = indexed(snapshot.nodes, node)
            if info is not None and info.taints:
                taints[node] = info.taints
                tainted_in.setdefault(node, set()).add(name)
            if dra is not None and info is not None:
                dra_nodes[node] = dra_node(info.devices(dra.driver), dra.driver, snapshot.claims)
            if info is not None and (info.count(GPU_RESOURCE) or info.slices):
                gpu_nodes.add(node)
            # A node in two groups of other levels has its first group's domains (groups rarely share nodes).
            path = info.network_path(levels[name]) if info is not None and node not in domains else ()
            if any(path):
                domains[node] = path
        resource = unit_resource(group.spec)
        if resource:
            resources.add(resource)
    frozen = {node: frozenset(names) for node, names in tainted_in.items()}
    return AdmissionWorld(
        snapshot.rljobs,
        snapshot.rayclusters,
        snapshot.pods,
        groups,
        resources,
        taints,
        frozen,
        dra_nodes=dra_nodes,
        domains=domains,
        levels=levels,
        gpu_nodes=frozenset(gpu_nodes),
    )
