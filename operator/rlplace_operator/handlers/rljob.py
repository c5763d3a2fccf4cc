"""RLJob: validate -> cluster from NodeGroups -> plan -> ConfigMap -> RayCluster -> status.

The rule for a job whose RayCluster exists (phase Provisioning or Running): it keeps the nodes it was planned
on. It is re-planned only when its spec changes (a new metadata.generation) or its rlplace.io/profile
annotation changes; never because NodeGroups or nodes changed (that is reported as NodeGroupChanged, see
handlers/nodegroup.py), and never on an operator restart. A change that cannot be applied (an invalid spec or
profile, too few GPUs) leaves it running on its last good plan and is reported on the Validated or Placed
condition, the message and a Warning Event. Suspend and resume (spec.suspend) re-plan it on today's nodes.

This module is the `Provision` action of `reconcile.py`: validate -> demand -> admission (or Queued) -> plan on
the admitted nodes -> ConfigMap and RayCluster or RayJob. It returns the status it wants; `handlers/lifecycle.py`
writes it (the one writer) and holds the kopf handlers.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from placement_core.errors import CapacityError, PlacementError
from rlplace_operator.admission import kueue
from rlplace_operator.admission.rules import JobKey, QueuedJob, Waiting, demand_from_workers
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import (
    API_VERSION,
    PROFILE_ANNOTATION,
    raycluster_name,
    rayjob_name,
)
from rlplace_operator.api.nodegroup import NodeGroupSpec, NodeGroupStatus
from rlplace_operator.api.rljob import Framework, PlacementMode, RLJobSpec
from rlplace_operator.api.status import GpuClaim, JobPhase, RLJobStatus, is_live
from rlplace_operator.builders import framework
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.podtemplate import worker_tolerations
from rlplace_operator.builders.progress import with_progress_reporting
from rlplace_operator.builders.raycluster import build_raycluster, claim_templates
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.cluster.dra import PinError, device_pin
from rlplace_operator.cluster.selection import JobGroup, unit_resource, untolerated_nodes
from rlplace_operator.cluster.taints import Taint
from rlplace_operator.handlers import rayjob
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.handlers.queue import (
    DraNode,
    Ledger,
    PlannedDemand,
    Snapshot,
    World,
    admit,
    dra_node,
    groups_with_nodes,
    ready_nodes,
    status_excluded,
)
from rlplace_operator.handlers.raycluster import mirrored_status, raycluster_ready
from rlplace_operator.kube import Kube
from rlplace_operator.planning import recommend
from rlplace_operator.planning.plan import JobPlan, plan_job, profiling_spec, ranked_across, wants_auto_placement
from rlplace_operator.reconcile import Job, attempt_for_new_child, holds_nodes

#: Retries for causes that can change by themselves (a NodeGroup appears, nodes join, KubeRay is installed):
#: the first after this many seconds, then doubling up to the cap, so a job left Pending for hours costs
#: the API server one request every half minute.
FIRST_RETRY_DELAY = 5.0
MAX_RETRY_DELAY = 30.0


def retry_delay(retry: int) -> float:
    return min(MAX_RETRY_DELAY, FIRST_RETRY_DELAY * 2 ** min(retry, 8))


class _JobStatus:
    """One reconcile's status: read once, changed in memory, written once by `write` (nothing if unchanged).

    An Event is posted when a condition's reason changes, not on every retry of the same cause. A job that
    runs keeps its phase when a change is refused: the refusal goes into the conditions and the message.
    """

    def __init__(self, body: kopf.Body, status: kopf.Status, generation: int | None) -> None:
        self.body = body
        self.before = dict(status)
        self.after = dict(status)
        self.generation = generation
        self.live = is_live(self.before)

    @property
    def conditions(self) -> list[dict]:
        return list(self.after.get("conditions") or [])

    def condition(self, type_: str, ok: bool, reason: str, message: str = "") -> bool:
        """Set a condition; True when its status or reason changed."""
        before = cond.find(self.after.get("conditions"), type_) or {}
        self.after["conditions"] = cond.set_condition(self.conditions, type_, ok, reason, message, self.generation)
        return before.get("reason") != reason or before.get("status") != ("True" if ok else "False")

    def phase(self, phase: JobPhase, message: str | None = None) -> None:
        self.after.update(phase=str(phase), observedGeneration=self.generation)
        self.set(message=cond.short(message) if message else None)

    def set(self, **fields: object) -> None:
        """Set status fields (camelCase); None removes one."""
        for key, value in fields.items():
            if value is None:
                self.after.pop(key, None)
            else:
                self.after[key] = value

    def _refuse(self, condition: str, reason: str, message: str, phase: JobPhase) -> None:
        if self.live:
            message = f"change not applied, the job keeps running its last plan: {message}"
        if self.condition(condition, False, reason, message):
            kopf.warn(self.body, reason=reason, message=cond.short(message))
        if self.live:
            self.set(message=cond.short(message))
        else:
            self.phase(phase, message)

    def fail(self, condition: str, reason: str, message: str) -> kopf.PermanentError:
        """Phase Failed (or, for a running job, the change refused): retrying cannot help until the spec changes."""
        self._refuse(condition, reason, message, JobPhase.FAILED)
        return kopf.PermanentError(message)

    def wait(self, condition: str, reason: str, message: str, retry: int) -> kopf.TemporaryError:
        """Phase Pending (or, for a running job, the change waits): the cause can go away by itself."""
        self._refuse(condition, reason, message, JobPhase.PENDING)
        return kopf.TemporaryError(message, delay=retry_delay(retry))


def _job_groups(spec: RLJobSpec, nodegroup_index: Mapping[str, Any]) -> tuple[list[JobGroup], list[str]]:
    groups, missing = [], []
    for name in spec.node_groups:
        entry = indexed(nodegroup_index, name)
        if entry is None or not entry[1].get("observedGeneration"):
            missing.append(name)
            continue
        groups.append(parsed_group(name, entry))
    return groups, missing


_parsed: dict[str, tuple[object, JobGroup]] = {}
_parsed_lock = threading.Lock()


def parsed_group(name: str, entry: tuple[dict, dict]) -> JobGroup:
    """A NodeGroup's index entry as a JobGroup, parsed once per entry (kopf makes a new entry when the group
    changes): validating a status of 1,000 nodes costs milliseconds, and every admission reads every group."""
    with _parsed_lock:
        known = _parsed.get(name)
    if known is not None and known[0] is entry:
        return known[1]
    group = JobGroup(name, NodeGroupSpec.model_validate(entry[0]), NodeGroupStatus.model_validate(entry[1]))
    with _parsed_lock:
        _parsed[name] = (entry, group)
    return group


def _validated_spec(job: _JobStatus, spec: Mapping[str, Any]) -> RLJobSpec:
    try:
        return RLJobSpec.model_validate(dict(spec))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise job.fail(cond.VALIDATED, cond.INVALID_SPEC, f"spec.{where}: {first['msg']}") from None


def _suspend(job: _JobStatus, kube: Kube, namespace: str, name: str, spec: RLJobSpec) -> None:
    if spec.entrypoint:
        # KubeRay stops the driver and deletes the RayCluster of a suspended RayJob; resuming starts both anew.
        kube.suspend_rayjob(namespace, rayjob_name(name))
        message = "the job is suspended; its driver was stopped and its RayCluster removed"
        job.condition(rayjob.DRIVER_CONDITION, False, cond.SUSPENDED, message)
    else:
        kube.delete_raycluster(namespace, raycluster_name(name))
        message = "the job is suspended; its RayCluster was removed"
    job.condition(cond.RAYCLUSTER_READY, False, cond.SUSPENDED, message)
    job.phase(JobPhase.SUSPENDED, message)
    # A suspended job holds no nodes: the next start plans on the NodeGroups as they are then.
    job.set(rayCluster=None, conditions=[c for c in job.conditions if c.get("type") != cond.NODEGROUP_CHANGED])


def _groups(job: _JobStatus, spec: RLJobSpec, nodegroup_index: Mapping[str, Any], retry: int) -> list[JobGroup]:
    groups, missing = _job_groups(spec, nodegroup_index)
    if missing:
        raise job.wait(cond.VALIDATED, cond.NODEGROUP_NOT_FOUND, f"NodeGroup {', '.join(missing)} not found", retry)
    return groups


def _plan(
    job: _JobStatus,
    spec: RLJobSpec,
    annotations: dict[str, str],
    groups: list[JobGroup],
    node_index: Mapping[str, Any],
    retry: int,
) -> JobPlan:
    """The plan on these groups' nodes, or Pending (a cause that can go away) / Failed (a wrong spec)."""
    try:
        planned = plan_job(spec, annotations, groups, {n: indexed(node_index, n) for n in node_index})
    except CapacityError as err:
        job.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
        raise job.wait(cond.PLACED, cond.INSUFFICIENT_CAPACITY, str(err), retry) from None
    except PlacementError as err:
        raise job.fail(cond.PLACED, cond.PLACEMENT_INVALID, str(err)) from None
    job.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
    return planned


#: RLJobSpec fields that do not change a job's plan (what it runs and how it is queued).
_NOT_PLANNING = frozenset({"ray", "entrypoint", "run", "suspend", "priority", "checkpoint"})


def _planning_fields(spec: RLJobSpec) -> str:
    """The spec fields a plan depends on, as one comparable string."""
    return json.dumps({k: v for k, v in dump(spec).items() if k not in _NOT_PLANNING}, sort_keys=True)


def _resolved(spec: RLJobSpec, annotations: Mapping[str, str], applied: tuple) -> RLJobSpec:
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


def _demand(
    job: _JobStatus,
    key: JobKey,
    spec: RLJobSpec,
    annotations: dict[str, str],
    groups: list[JobGroup],
    node_index: Mapping[str, Any],
    ledger: Ledger,
    retry: int,
) -> PlannedDemand:
    """What the job needs of each group: from its plan on all the groups' ready nodes (cached per input).

    A job that does not fit even then is Pending (nodes may join), as without a queue.
    """
    ranked = [(group.name, ready_nodes(group, node_index)) for group in groups]
    nodes = tuple((n, tuple(r)) for n, r in ranked)
    infos = {name: indexed(node_index, name) for _, names in ranked for name in names}
    # Nodes whose taints the job's workers do not tolerate (its own, not shared: tolerations are per job).
    excluded = untolerated_nodes(spec, groups, infos)
    # ... and the nodes that failed one of its attempts (a restart left them out: reconcile.restart_on_failure).
    excluded.update(status_excluded(job.before, job.generation))
    fingerprint = (
        job.generation,
        annotations.get(PROFILE_ANNOTATION),
        nodes,
        tuple(sorted(excluded.items())),
        _planning_fields(spec),  # a re-placement (recommend.py) plans other entries for the same generation
    )
    known = ledger.demand(key, fingerprint)
    if known is not None:
        return known
    # Jobs that would be planned the same (same placement fields, profile and nodes: a burst of one sweep)
    # share one planning: on a large group it is the costly step (tens of ms at 1,000 nodes).
    shape = (_planning_fields(spec), annotations.get(PROFILE_ANNOTATION), nodes)
    shared = ledger.shared_demand(shape)
    if shared is None:
        planned = _plan(job, spec, annotations, groups, node_index, retry)
        applied = tuple(planned.applied)
        resolved = _resolved(spec, annotations, applied)
        demand = demand_from_workers(
            ranked,
            {w.name for w in planned.workers},
            ranked_across(resolved),
            {w.name: len(w.held_gpus) for w in planned.workers},
            {group.name for group in groups if group.spec.dra_driver is not None},
        )
        shared = (demand, applied, planned.predicted_iteration_time)
        ledger.remember_shared_demand(shape, shared)
    else:
        job.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
    demand, applied, predicted = shared
    result = PlannedDemand(demand, _resolved(spec, annotations, applied), predicted, excluded)
    ledger.remember_demand(key, fingerprint, result)
    return result


def _waits(
    job: _JobStatus, reason: str, event: str, waiting_for: str, message: str, position: int | None = None
) -> None:
    """Phase Queued, saying what the job waits for (and its place in rlplace's queue); an Event `event` when what
    it waits for changes."""
    waiting_for = cond.short(waiting_for)
    job.condition(cond.ADMITTED, False, reason, message)
    if job.before.get("waitingFor") != waiting_for:
        kopf.info(job.body, reason=event, message=cond.short(message))
    job.phase(JobPhase.QUEUED, message)
    job.set(queuePosition=position, waitingFor=waiting_for)


def _queued(job: _JobStatus, waiting: Waiting) -> None:
    """Queued in rlplace's own queue, with the position."""
    message = f"waiting for {waiting.reason} (position {waiting.position} in the queue)"
    _waits(job, cond.QUEUED, cond.QUEUED, waiting.reason, message, waiting.position)


def _provision(job: _JobStatus, kube: Kube, spec: RLJobSpec, planned: JobPlan, retry: int, attempt: int) -> dict:
    """Apply the ConfigMap and the RayCluster, or with an entrypoint the RayJob (adopted by the job); returns
    the live RayCluster or RayJob."""
    kind, served = (
        ("RayJob", kube.rayjob_crd_installed) if spec.entrypoint else ("RayCluster", kube.raycluster_crd_installed)
    )
    if not served():
        message = f"the ray.io {kind} CRD is not installed (install KubeRay)"
        raise job.wait(cond.RAYCLUSTER_READY, cond.KUBERAY_MISSING, message, retry)
    name, namespace = job.body["metadata"]["name"], job.body["metadata"]["namespace"]
    pod_gpus = {w.rank: w.held_gpus for w in planned.workers if w.pin is not None}
    configmap = build_placement_configmap(name, planned.plan, framework.probe_data(spec), pod_gpus)
    templates = claim_templates(name, planned.workers)
    child = (
        build_rayjob(name, spec, planned.workers, attempt)
        if spec.entrypoint
        else build_raycluster(name, spec, planned.workers)
    )
    child = with_progress_reporting(child, name, kube.progress_url, workers=spec.framework is Framework.VERL)
    kopf.adopt([configmap, child, *templates], owner=job.body)
    if kueue.queue_name(job.body["metadata"].get("labels") or {}) is not None:
        child = kueue.for_kueue(child)
    kube.apply_configmap(namespace, configmap)
    # The claim templates before the pods that name them (a pod whose template is missing is not scheduled);
    # templates of an earlier pin are immutable and no longer named: they go.
    for template in templates:
        kube.create_claim_template(namespace, template)
    kube.delete_claim_templates(namespace, name, keep={t["metadata"]["name"] for t in templates})
    return kube.apply_rayjob(namespace, child) if spec.entrypoint else kube.apply_raycluster(namespace, child)


_PROFILE_PATH = ("metadata", "annotations", PROFILE_ANNOTATION)


def _at(value: object, path: tuple[str, ...]) -> object:
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def profile_changed(diff: kopf.Diff | None) -> bool:
    """Whether kopf's diff changes the profile annotation; a diff entry may name it, or a map holding it (the
    first annotation of an object is added as the whole `metadata.annotations`)."""
    for _, field, old, new in diff or ():
        field = tuple(field)
        if field[: len(_PROFILE_PATH)] == _PROFILE_PATH:
            return True
        if _PROFILE_PATH[: len(field)] == field:
            rest = _PROFILE_PATH[len(field) :]
            if _at(old, rest) != _at(new, rest):
                return True
    return False


#: The admission World of each live Snapshot: a queue pass admits every job of its snapshot against the same one.
_ADMISSION_WORLDS: weakref.WeakKeyDictionary[Snapshot, World] = weakref.WeakKeyDictionary()
_ADMISSION_WORLDS_LOCK = threading.Lock()


def admission_world(snapshot: Snapshot) -> World:
    """What admission reads, from one snapshot of the indexes (built once per snapshot: at 1,000 nodes it walks
    every group's nodes, and a pass admits each of its jobs against it)."""
    with _ADMISSION_WORLDS_LOCK:
        world = _ADMISSION_WORLDS.get(snapshot)
        if world is None:
            world = _ADMISSION_WORLDS[snapshot] = _admission_world(snapshot)
        return world


def _admission_world(snapshot: Snapshot) -> World:
    groups, resources = {}, set()
    taints: dict[str, tuple[Taint, ...]] = {}
    tainted_in: dict[str, set[str]] = {}
    dra_nodes: dict[str, DraNode] = {}
    for name in snapshot.nodegroups:
        group = parsed_group(name, indexed(snapshot.nodegroups, name))
        groups[name] = ready_nodes(group, snapshot.nodes)
        dra = group.spec.dra_driver
        for node in groups[name]:
            info = indexed(snapshot.nodes, node)
            if info is not None and info.taints:
                taints[node] = info.taints
                tainted_in.setdefault(node, set()).add(name)
            if dra is not None and info is not None:
                dra_nodes[node] = dra_node(info.devices(dra.driver), dra.driver, snapshot.claims)
        resource = unit_resource(group.spec)
        if resource:
            resources.add(resource)
    frozen = {node: frozenset(names) for node, names in tainted_in.items()}
    return World(
        snapshot.rljobs, snapshot.rayclusters, snapshot.pods, groups, resources, taints, frozen, dra_nodes=dra_nodes
    )


def _admitted_plan(
    job: _JobStatus,
    key: JobKey,
    spec: RLJobSpec,
    annotations: dict[str, str],
    ledger: Ledger,
    snapshot: Snapshot,
    retry: int,
    kube: Kube,
) -> JobPlan | None:
    """Demand -> admission (rlplace's queue, or Kueue for a job that names a LocalQueue): the plan on the nodes
    the job was admitted to, or None when it is Queued."""
    groups = _groups(job, spec, snapshot.nodegroups, retry)
    demand = _demand(job, key, spec, annotations, groups, snapshot.nodes, ledger, retry)
    queue = kueue.queue_name(job.body["metadata"].get("labels") or {})
    gpus: dict[str, tuple[int, ...]] = {}
    if queue is not None:
        shared = [group.name for group in groups if group.spec.dra_driver is not None]
        if shared:
            message = (
                f"NodeGroup {shared[0]} allocates GPUs through DRA, which rlplace does not yet admit through Kueue: "
                "drop the kueue.x-k8s.io/queue-name label or use a devicePlugin NodeGroup"
            )
            raise job.fail(cond.ADMITTED, cond.KUEUE_UNSUPPORTED, message)
        granted = _kueue_admission(job, key, spec, groups, demand, kube, snapshot, queue, retry)
        if granted is None:
            return None
        cluster, nodes = granted, frozenset(n for _, names in granted for n in names)
        with ledger.lock:  # rlplace's own queue must not hand these nodes to another job
            ledger.reserved[key] = nodes
        admitted_by = "Kueue granted"
    else:
        created = job.body["metadata"]["creationTimestamp"]
        queued = QueuedJob(key, spec.priority, created, demand.demand, demand.excluded)
        decision = admit(ledger, admission_world(snapshot), queued)
        if isinstance(decision, Waiting):
            _queued(job, decision)
            return None
        cluster, nodes, admitted_by = decision.cluster, decision.worker_nodes, "admission picked"
        gpus = dict(decision.gpus)
    planned = _plan(job, demand.spec, {}, groups_with_nodes(groups, cluster), snapshot.nodes, retry)
    planned = dataclasses.replace(planned, predicted_iteration_time=demand.predicted_iteration_time)
    if not {w.name for w in planned.workers} <= nodes or any(
        len(w.held_gpus) != len(gpus[w.name]) for w in planned.workers if w.name in gpus
    ):
        # Only when a group mixes node sizes: the plan on the picked nodes differs from the one on all nodes.
        ledger.release(key)
        raise job.wait(cond.PLACED, cond.NODES_DIFFER, f"the free nodes {admitted_by} do not fit the placement", retry)
    if gpus:
        planned = _pinned(job, spec, planned, groups, snapshot, gpus)
    processes = sum(c.processes for c in planned.summary.components)
    job.condition(cond.PLACED, True, cond.PLACEMENT_APPLIED, f"{processes} processes on {len(planned.workers)} nodes")
    if queue is None and job.condition(cond.ADMITTED, True, cond.ADMITTED, f"reserved {len(planned.workers)} nodes"):
        kopf.info(
            job.body, reason=cond.ADMITTED, message=f"reserved nodes {', '.join(w.name for w in planned.workers)}"
        )
    return planned


def _pinned(
    job: _JobStatus,
    spec: RLJobSpec,
    planned: JobPlan,
    groups: list[JobGroup],
    snapshot: Snapshot,
    gpus: Mapping[str, tuple[int, ...]],
) -> JobPlan:
    """The plan with the exact GPUs admission reserved on each DRA node pinned on its worker (the k-th of the
    plan's GPUs on the node is the k-th reserved one, so the plan's order is kept)."""
    if spec.framework_job:
        message = (
            f"NodeGroup of node {min(gpus)} allocates GPUs through DRA; framework jobs run on devicePlugin NodeGroups "
            "only for now (their GPU numbering is the framework's)"
        )
        raise job.fail(cond.PLACED, cond.PLACEMENT_INVALID, message)
    settings = {}
    for group in groups:
        dra = group.spec.dra_driver
        if dra is not None:
            for entry in group.status.nodes:
                settings.setdefault(entry.name, dra)
    attempt = attempt_for_new_child(job.before, job.generation)
    workers = []
    for worker in planned.workers:
        if worker.name in gpus:
            info = indexed(snapshot.nodes, worker.name)
            dra = settings[worker.name]
            try:
                pin = device_pin(
                    job.body["metadata"]["name"], worker.rank, attempt, dra, info.devices(dra.driver), gpus[worker.name]
                )
            except (PinError, IndexError) as err:
                raise job.fail(cond.PLACED, cond.PLACEMENT_INVALID, str(err)) from None
            worker = dataclasses.replace(worker, pin=pin, requests={})
        workers.append(worker)
    # A pod that claims its GPUs uses those only, not its node's.
    gpus = sum(len(w.pin.host_gpus) if w.pin is not None else w.gpus for w in workers)
    return dataclasses.replace(planned, workers=workers, gpus=gpus)


def _pod_sets(
    job: _JobStatus, spec: RLJobSpec, groups: list[JobGroup], demand: PlannedDemand, node_index: Mapping[str, Any]
) -> list[kueue.PodSet]:
    """The job's Kueue PodSets: per NodeGroup its plan uses, that many whole-node worker pods."""
    pod_sets = []
    by_name = {group.name: group for group in groups}
    for group_demand in demand.demand:
        if not group_demand.used:
            continue
        group = by_name[group_demand.group]
        ranked = ready_nodes(group, node_index)
        resource = unit_resource(group.spec)
        units = {indexed(node_index, ranked[i]).count(resource) for i in group_demand.used} if resource else set()
        if len(units) > 1:
            raise job.fail(
                cond.ADMITTED,
                cond.KUEUE_UNSUPPORTED,
                f"NodeGroup {group.name} has nodes of {' and '.join(map(str, sorted(units)))} {resource}: a Kueue PodSet "
                "is pods of one size, so give each node size its own NodeGroup",
            )
        requests = {"cpu": spec.ray.worker_resources.cpu, "memory": spec.ray.worker_resources.memory}
        if resource and units and max(units) > 0:
            requests[resource] = str(max(units))
        tolerations = tuple(worker_tolerations(spec, [group.name]))
        pod_sets.append(
            kueue.PodSet(group.name, len(group_demand.used), requests, group.spec.node_selector, tolerations)
        )
    if len(pod_sets) > kueue.MAX_POD_SETS:
        raise job.fail(
            cond.ADMITTED,
            cond.KUEUE_UNSUPPORTED,
            f"the job uses {len(pod_sets)} NodeGroups; a Kueue Workload holds at most {kueue.MAX_POD_SETS}",
        )
    return pod_sets


def _kueue_waits(job: _JobStatus, waiting_for: str, message: str) -> None:
    """Queued until Kueue admits the job, saying what Kueue says. A preempted job keeps reason Preempted until it
    is admitted again."""
    before = cond.find(job.conditions, cond.ADMITTED) or {}
    preempted = before.get("status") == "False" and before.get("reason") == cond.PREEMPTED
    reason = cond.PREEMPTED if preempted else cond.WAITING_FOR_KUEUE
    _waits(job, reason, cond.WAITING_FOR_KUEUE, waiting_for, message)


def _cluster_queue_problem(kube: Kube, namespace: str, queue: str) -> tuple[str | None, str | None]:
    """The LocalQueue's ClusterQueue, and why it admits nothing now (missing, stopped, inactive), if so."""
    local = kube.get_localqueue(namespace, queue)
    if local is None:
        return None, f"LocalQueue {namespace}/{queue} not found"
    cluster_queue = (local.get("spec") or {}).get("clusterQueue")
    body = kube.get_clusterqueue(cluster_queue) if cluster_queue else None
    if body is None:
        return cluster_queue, f"ClusterQueue {cluster_queue} of LocalQueue {namespace}/{queue} not found"
    if ((body.get("spec") or {}).get("stopPolicy") or "None") != "None":
        return cluster_queue, f"ClusterQueue {cluster_queue} is stopped (stopPolicy {body['spec']['stopPolicy']})"
    active = next((c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == "Active"), None)
    if active is not None and active.get("status") != "True":
        return (
            cluster_queue,
            f"ClusterQueue {cluster_queue} is inactive: {active.get('message') or active.get('reason')}",
        )
    return cluster_queue, None


def _kueue_admission(
    job: _JobStatus,
    key: JobKey,
    spec: RLJobSpec,
    groups: list[JobGroup],
    demand: PlannedDemand,
    kube: Kube,
    snapshot: Snapshot,
    queue: str,
    retry: int,
) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """The nodes Kueue granted the job, per NodeGroup in rank order; None while it waits (Queued, saying why).

    The job's Workload is made on the first look; a new demand (a new spec) makes a new Workload and deletes
    the job's others."""
    namespace, name = key
    if not kube.kueue_installed():
        message = f"the job names LocalQueue {queue} but Kueue is not installed (no kueue.x-k8s.io/v1beta2 Workloads)"
        raise job.wait(cond.ADMITTED, cond.KUEUE_MISSING, message, retry)
    pod_sets = _pod_sets(job, spec, groups, demand, snapshot.nodes)
    workload_name = kueue.workload_name(name, pod_sets)
    body = kube.get_workload(namespace, workload_name)
    queue_checked: tuple[str | None, str | None] | None = None
    if body is None:
        queue_checked = cluster_queue, problem = _cluster_queue_problem(kube, namespace, queue)
        if problem is not None and cluster_queue is None:
            raise job.wait(cond.ADMITTED, cond.LOCALQUEUE_NOT_FOUND, problem, retry)
        priority = None
        priority_class = (job.body["metadata"].get("labels") or {}).get(kueue.PRIORITY_CLASS_LABEL)
        if priority_class:
            found = kube.get_workload_priority_class(priority_class)
            if found is None:
                message = f"WorkloadPriorityClass {priority_class} not found"
                raise job.wait(cond.ADMITTED, cond.PRIORITY_CLASS_NOT_FOUND, message, retry)
            priority = kueue.Priority(priority_class, int(found.get("value") or 0))
        for other in kube.job_workloads(namespace, name):
            if other["metadata"]["name"] != workload_name:
                kube.delete_workload(namespace, other["metadata"]["name"])
        workload = kueue.build_workload(name, queue, pod_sets, priority)
        kopf.adopt(workload, owner=job.body)
        body = kube.create_workload(namespace, workload)
    state = kueue.WorkloadState.of(body)
    job.set(kueue={"workload": state.name, **({"clusterQueue": state.cluster_queue} if state.cluster_queue else {})})
    evicting = state.evicted and state.holds_quota
    if not state.admitted or evicting:
        cluster_queue, problem = queue_checked or _cluster_queue_problem(kube, namespace, queue)
        said = problem or state.pending_message or "Kueue has not looked at it yet"
        if evicting:
            said = f"its eviction to end ({state.evicted_reason}: {state.evicted_message})"
        where = f"ClusterQueue {cluster_queue}" if cluster_queue else f"LocalQueue {queue}"
        _kueue_waits(
            job, f"Kueue ({where}): {said}", f"waiting for Kueue to admit Workload {state.name} ({where}): {said}"
        )
        return None
    try:
        hosts = state.hosts()
    except kueue.AssignmentError as err:
        raise job.wait(cond.ADMITTED, cond.KUEUE_UNSUPPORTED, str(err), retry) from None
    cluster, flavors = [], {}
    for pod_set in pod_sets:
        granted = set(hosts.get(kueue.pod_set_name(pod_set.group), ()))
        group = next(g for g in groups if g.name == pod_set.group)
        # In the group's rank order: the plan numbers its nodes in that order.
        cluster.append((group.name, tuple(e.name for e in group.status.nodes if e.name in granted)))
        grant = state.grants.get(kueue.pod_set_name(pod_set.group))
        if grant is not None and grant.flavors:
            flavors[group.name] = grant.flavors.get(unit_resource(group.spec) or "cpu") or next(
                iter(grant.flavors.values())
            )
    job.set(kueue={"workload": state.name, "clusterQueue": state.cluster_queue, "flavors": flavors})
    said = ", ".join(f"{g} from {f}" for g, f in flavors.items())
    message = f"admitted by Kueue (ClusterQueue {state.cluster_queue}): {said}"
    if job.condition(cond.ADMITTED, True, cond.ADMITTED_BY_KUEUE, message):
        kopf.info(job.body, reason=cond.ADMITTED_BY_KUEUE, message=message)
    return tuple(cluster)


def provision(
    job: Job, kube: Kube, ledger: Ledger, snapshot: Snapshot, retry: int
) -> tuple[dict[str, Any], kopf.TemporaryError | kopf.PermanentError | None]:
    """Validate -> demand -> admission (or Queued) -> plan on the admitted nodes -> children; returns the status
    wanted (wire form) and the error to raise once it is written (Temporary: look again later; Permanent: the
    spec is wrong). See the module's rule and docs/admission.md."""
    metadata = {
        "namespace": job.namespace,
        "name": job.name,
        "uid": job.uid,
        "creationTimestamp": job.created,
        "annotations": dict(job.annotations),
        # kopf.adopt copies the owner's labels onto the children: the RayCluster (or RayJob) carries them.
        "labels": dict(job.labels),
    }
    body = {"apiVersion": API_VERSION, "kind": "RLJob", "metadata": metadata}
    status = _JobStatus(kopf.Body(body), job.status, job.generation)
    try:
        _provision_job(status, job, kube, ledger, snapshot, retry)
    except (kopf.TemporaryError, kopf.PermanentError) as err:
        return status.after, err
    return status.after, None


def _same_spec_status(job: _JobStatus) -> RLJobStatus | None:
    """The job's status when it describes the current spec (a re-placement or a waiting recommendation is
    for that spec only); None for a new spec, or a status this operator's model cannot read."""
    if job.before.get("observedGeneration") != job.generation:
        return None
    try:
        return RLJobStatus.model_validate({k: v for k, v in job.before.items() if v is not None})
    except ValidationError:
        return None


def _provision_job(job: _JobStatus, observed: Job, kube: Kube, ledger: Ledger, snapshot: Snapshot, retry: int) -> None:
    namespace, name = observed.namespace, observed.name
    job_spec = _validated_spec(job, observed.spec)
    if job_spec.suspend:
        _suspend(job, kube, namespace, name, job_spec)
        ledger.release((namespace, name))
        return
    annotations = dict(job.body["metadata"].get("annotations") or {})
    # A re-placement from measured step times (recommend.py) is planned instead of the spec's placement.
    status = _same_spec_status(job)
    replaced = recommend.replaced_spec(job_spec, status) if status is not None else job_spec
    predicted: float | None = None
    as_written = job_spec
    if status is not None and replaced is not job_spec:
        annotations.pop(PROFILE_ANNOTATION, None)
        replacements = status.replacements
        waiting = recommend.at_restart(job_spec, status, cond.now())
        if waiting is not None:
            replacements = recommend.with_replacement(status, waiting)
            job.set(replacements=[dump(r) for r in replacements], recommendation=None)
            status = status.model_copy(update={"replacements": replacements, "recommendation": None})
        predicted = replacements[-1].predicted_iteration_seconds
        job_spec = replaced
    planned = _admitted_plan(job, (namespace, name), job_spec, annotations, ledger, snapshot, retry, kube)
    if planned is None:
        return
    if predicted is not None:
        planned = dataclasses.replace(planned, predicted_iteration_time=predicted)
    # A restart's or a re-placement's new attempt keeps its number (counted when it was decided); else a new
    # RayJob's driver is attempt 1 again.
    attempt = attempt_for_new_child(job.before, job.generation)
    live = _provision(job, kube, job_spec, planned, retry, attempt)
    job.set(
        placement=dump(planned.summary),
        appliedPlacement=[dump(e) for e in planned.applied],
        predictedIterationTime=planned.predicted_iteration_time,
        gpus=planned.gpus,
        nodes=len(planned.workers),
        gpuClaims=[
            dump(
                GpuClaim(
                    node=w.name,
                    devices=[d.name for d in w.pin.devices],
                    host_gpus=list(w.pin.host_gpus),
                    template=w.pin.template,
                )
            )
            for w in planned.workers
            if w.pin is not None
        ]
        or None,
        queuePosition=None,
        waitingFor=None,
        retryAfter=None,
    )
    if job.before.get("observedGeneration") != job.generation:
        # A new spec starts a new history, with every node again and no recommendation.
        job.set(
            restarts=None,
            provisioningRetries=None,
            restartCount=None,
            excludedNodes=None,
            recommendation=None,
            replacements=None,
        )
    if job_spec.entrypoint and not holds_nodes(job.before):
        # A new RayJob: its driver's first submission is attempt 1 again (not a restart of the last one), unless
        # it is a restart's new attempt.
        job.set(attempts=attempt if attempt > 1 else None, driverStartTime=None, driverEndTime=None)
    # The new plan is on the NodeGroups as they are now: an earlier NodeGroupChanged no longer applies.
    job.set(conditions=[c for c in job.conditions if c.get("type") != cond.NODEGROUP_CHANGED])
    profiled = recommend.profiling_condition(as_written, status if status is not None else RLJobStatus())
    if profiled is not None:
        job.condition(recommend.PROFILED, *profiled)
    elif cond.find(job.conditions, recommend.PROFILED) is not None:  # a spec that no longer profiles first
        job.set(conditions=[c for c in job.conditions if c.get("type") != recommend.PROFILED])
    if job_spec.entrypoint:
        driver = rayjob.driver_status(
            job.after, live, None, namespace, name, job_spec.run.submission_mode, job.generation
        )
        phase, message = driver.pop("phase"), driver.pop("message")
        job.set(**driver)
        job.phase(JobPhase(phase), message)
        kopf.info(
            job.body, reason=cond.PLACEMENT_APPLIED, message=f"{planned.summary.mode} placement applied; RayJob {name}"
        )
        return
    job.set(rayCluster=live["metadata"]["name"])
    mirrored = mirrored_status({"conditions": job.conditions}, raycluster_ready(live), job.generation)
    job.set(conditions=mirrored["conditions"])
    job.phase(mirrored["phase"])
    kopf.info(
        job.body, reason=cond.PLACEMENT_APPLIED, message=f"{planned.summary.mode} placement applied; RayCluster {name}"
    )
