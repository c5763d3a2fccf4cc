"""RLJob: validate -> cluster from NodeGroups -> plan -> ConfigMap -> RayCluster -> status.

One reconcile serves create, update (a spec or profile-annotation change re-plans) and resume after an
operator restart; children have fixed names, so running it twice changes nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from placement_core.errors import CapacityError, PlacementError
from rlplace_operator.admission import JobKey, QueuedJob, Waiting, demand_from_workers
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.conditions import set_condition
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.handlers.queue import Ledger, PlannedDemand, World, admit, groups_with_nodes, ready_nodes
from rlplace_operator.handlers.raycluster import mirrored_status, raycluster_ready
from rlplace_operator.k8s import Kube
from rlplace_operator.models import (
    GROUP,
    VERSION,
    JobPhase,
    NodeGroupSpec,
    NodeGroupStatus,
    PlacementMode,
    RLJobSpec,
    dump,
)
from rlplace_operator.names import PROFILE_ANNOTATION, RLJOB_PLURAL, raycluster_name
from rlplace_operator.planning import JobPlan, plan_job, ranked_across, wants_auto_placement
from rlplace_operator.selection import JobGroup, unit_resource

#: Retries for causes that can change by themselves (a NodeGroup appears, nodes join, KubeRay is installed):
#: the first after this many seconds, then doubling up to the cap, so a job left Pending for hours costs
#: the API server one request every half minute.
FIRST_RETRY_DELAY = 5.0
MAX_RETRY_DELAY = 30.0
#: A job whose worker pods are not all bound this long after admission (another workload took a node in
#: between) gives its nodes back and queues again. Checked every BIND_CHECK_SECONDS, so no job holds a
#: partial cluster for more than BIND_TIMEOUT_SECONDS + BIND_CHECK_SECONDS (35 s).
BIND_TIMEOUT_SECONDS = 30.0
BIND_CHECK_SECONDS = 5.0
#: How often a Queued job looks at the queue again (so a freed node is used within about this long).
QUEUE_RECHECK_SECONDS = 2.0


def retry_delay(retry: int) -> float:
    return min(MAX_RETRY_DELAY, FIRST_RETRY_DELAY * 2 ** min(retry, 8))


class _JobStatus:
    """One reconcile's status changes, accumulated on kopf's patch; conditions kept in order.

    An Event is posted when a condition's reason changes, not on every retry of the same cause.
    """

    def __init__(self, body: kopf.Body, status: kopf.Status, patch: kopf.Patch, generation: int | None) -> None:
        self.body = body
        self.conditions = list(status.get("conditions") or [])
        self.patch = patch
        self.generation = generation

    def condition(self, type_: str, ok: bool, reason: str, message: str = "") -> bool:
        """Set a condition; True when its status or reason changed."""
        before = next((c for c in self.conditions if c.get("type") == type_), {})
        self.conditions = set_condition(self.conditions, type_, ok, reason, message, self.generation)
        self.patch.status["conditions"] = self.conditions
        return before.get("reason") != reason or before.get("status") != ("True" if ok else "False")

    def phase(self, phase: JobPhase, message: str | None = None) -> None:
        self.patch.status.update(phase=str(phase), message=message, observedGeneration=self.generation)

    def fail(self, condition: str, reason: str, message: str) -> kopf.PermanentError:
        """Phase Failed: retrying cannot help until the spec changes."""
        if self.condition(condition, False, reason, message):
            kopf.warn(self.body, reason=reason, message=message)
        self.phase(JobPhase.FAILED, message)
        return kopf.PermanentError(message)

    def wait(self, condition: str, reason: str, message: str, retry: int) -> kopf.TemporaryError:
        """Phase Pending: the cause can go away by itself, so try again later."""
        if self.condition(condition, False, reason, message):
            kopf.warn(self.body, reason=reason, message=message)
        self.phase(JobPhase.PENDING, message)
        return kopf.TemporaryError(message, delay=retry_delay(retry))


def _job_groups(spec: RLJobSpec, nodegroup_index: kopf.Index) -> tuple[list[JobGroup], list[str]]:
    groups, missing = [], []
    for name in spec.node_groups:
        entry = indexed(nodegroup_index, name)
        if entry is None or not entry[1].get("observedGeneration"):
            missing.append(name)
            continue
        group_spec, group_status = entry
        groups.append(
            JobGroup(name, NodeGroupSpec.model_validate(group_spec), NodeGroupStatus.model_validate(group_status))
        )
    return groups, missing


def _validated_spec(job: _JobStatus, spec: kopf.Spec) -> RLJobSpec:
    try:
        return RLJobSpec.model_validate(dict(spec))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise job.fail("Validated", "InvalidSpec", f"spec.{where}: {first['msg']}") from None


def _suspend(job: _JobStatus, kube: Kube, namespace: str, name: str) -> None:
    kube.delete_raycluster(namespace, raycluster_name(name))
    job.condition("RayClusterReady", False, "Suspended", "the job is suspended; its RayCluster was removed")
    job.phase(JobPhase.SUSPENDED)
    job.patch.status["rayCluster"] = None


def _groups(job: _JobStatus, spec: RLJobSpec, nodegroup_index: kopf.Index, retry: int) -> list[JobGroup]:
    groups, missing = _job_groups(spec, nodegroup_index)
    if missing:
        raise job.wait("Validated", "NodeGroupNotFound", f"NodeGroup {', '.join(missing)} not found", retry)
    job.condition("Validated", True, "SpecValid", "spec and NodeGroups are valid")
    return groups


def _plan(
    job: _JobStatus,
    spec: RLJobSpec,
    annotations: dict[str, str],
    groups: list[JobGroup],
    node_index: kopf.Index,
    retry: int,
) -> JobPlan:
    """The plan on these groups' nodes, or Pending (a cause that can go away) / Failed (a wrong spec)."""
    try:
        return plan_job(spec, annotations, groups, {n: indexed(node_index, n) for n in node_index})
    except CapacityError as err:
        raise job.wait("Placed", "InsufficientCapacity", str(err), retry) from None
    except PlacementError as err:
        raise job.fail("Placed", "PlacementInvalid", str(err)) from None


def _demand(
    job: _JobStatus,
    key: JobKey,
    spec: RLJobSpec,
    annotations: dict[str, str],
    groups: list[JobGroup],
    node_index: kopf.Index,
    ledger: Ledger,
    retry: int,
) -> PlannedDemand:
    """What the job needs of each group: from its plan on all the groups' ready nodes (cached per input).

    A job that does not fit even then is Pending (nodes may join), as without a queue.
    """
    ranked = [(group.name, ready_nodes(group, node_index)) for group in groups]
    fingerprint = (job.generation, annotations.get(PROFILE_ANNOTATION), tuple((n, tuple(r)) for n, r in ranked))
    known = ledger.demand(key, fingerprint)
    if known is not None:
        return known
    planned = _plan(job, spec, annotations, groups, node_index, retry)
    resolved = spec
    if wants_auto_placement(spec, annotations):
        update = {"component_placement": planned.applied, "auto_placement": False}
        resolved = spec.model_copy(update={**update, "placement_mode": PlacementMode.MODEL_PARALLEL})
    demand = demand_from_workers(ranked, {w.name for w in planned.workers}, ranked_across(resolved))
    result = PlannedDemand(demand, resolved, planned.predicted_iteration_time)
    ledger.remember_demand(key, fingerprint, result)
    return result


def _queued(job: _JobStatus, waiting: Waiting) -> None:
    """Phase Queued with the position and what the job waits for; an Event when that changes."""
    message = f"waiting for {waiting.reason} (position {waiting.position} in the queue)"
    before = job.body.get("status", {}).get("waitingFor")
    job.condition("Admitted", False, "Queued", message)
    if before != waiting.reason:
        kopf.info(job.body, reason="Queued", message=message)
    job.phase(JobPhase.QUEUED, message)
    job.patch.status.update(queuePosition=waiting.position, waitingFor=waiting.reason)


def _provision(job: _JobStatus, kube: Kube, spec: RLJobSpec, planned: JobPlan, retry: int) -> dict:
    """Apply the ConfigMap and the RayCluster (adopted by the job); returns the live RayCluster."""
    if not kube.raycluster_crd_installed():
        message = "the ray.io RayCluster CRD is not installed (install KubeRay)"
        raise job.wait("RayClusterReady", "KubeRayMissing", message, retry)
    name, namespace = job.body["metadata"]["name"], job.body["metadata"]["namespace"]
    configmap = build_placement_configmap(name, planned.plan)
    raycluster = build_raycluster(name, spec, planned.workers)
    # adopt also copies the job's labels, so gang-scheduler labels (docs/admission.md) reach the RayCluster.
    kopf.adopt([configmap, raycluster], owner=job.body)
    kube.apply_configmap(namespace, configmap)
    return kube.apply_raycluster(namespace, raycluster)


def _world(indexes: Mapping[str, kopf.Index], node_index: kopf.Index) -> World:
    groups, resources = {}, set()
    for name in indexes["nodegroup_index"]:
        spec, status = indexed(indexes["nodegroup_index"], name)
        group = JobGroup(name, NodeGroupSpec.model_validate(spec), NodeGroupStatus.model_validate(status))
        groups[name] = ready_nodes(group, node_index)
        resource = unit_resource(group.spec)
        if resource:
            resources.add(resource)
    return World(
        indexes["rljob_index"], indexes["raycluster_nodes_index"], indexes["pod_units_index"], groups, resources
    )


@kopf.on.create(GROUP, VERSION, RLJOB_PLURAL, retries=None)
@kopf.on.update(GROUP, VERSION, RLJOB_PLURAL, retries=None)
@kopf.on.resume(GROUP, VERSION, RLJOB_PLURAL, retries=None)
def rljob_reconcile(
    name: str,
    namespace: str,
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    node_index: kopf.Index,
    nodegroup_index: kopf.Index,
    rljob_index: kopf.Index,
    raycluster_nodes_index: kopf.Index,
    pod_units_index: kopf.Index,
    retry: int = 0,
    **_: Any,
) -> None:
    """Validate -> demand -> admission (or Queued) -> plan on the admitted nodes -> children -> status."""
    kube: Kube = memo.kube
    ledger: Ledger = memo.ledger
    key = (namespace, name)
    job = _JobStatus(body, status, patch, meta.get("generation"))
    job_spec = _validated_spec(job, spec)
    if job_spec.suspend:
        _suspend(job, kube, namespace, name)
        ledger.release(key)
        return
    annotations = dict(meta.get("annotations") or {})
    groups = _groups(job, job_spec, nodegroup_index, retry)
    demand = _demand(job, key, job_spec, annotations, groups, node_index, ledger, retry)
    indexes = {
        "nodegroup_index": nodegroup_index,
        "rljob_index": rljob_index,
        "raycluster_nodes_index": raycluster_nodes_index,
        "pod_units_index": pod_units_index,
    }
    queued = QueuedJob(key, job_spec.priority, meta["creationTimestamp"], demand.demand)
    decision = admit(ledger, _world(indexes, node_index), queued)
    if isinstance(decision, Waiting):
        _queued(job, decision)
        return
    admitted_groups = groups_with_nodes(groups, decision.cluster)
    planned = _plan(job, demand.spec, {}, admitted_groups, node_index, retry)
    planned = dataclasses.replace(planned, predicted_iteration_time=demand.predicted_iteration_time)
    if not {w.name for w in planned.workers} <= decision.nodes:
        # Only when a group mixes node sizes: the plan on the picked nodes differs from the one on all nodes.
        ledger.release(key)
        raise job.wait("Placed", "NodesDiffer", "the free nodes admission picked do not fit the placement", retry)
    processes = sum(c.processes for c in planned.summary.components)
    job.condition("Placed", True, "Placed", f"{processes} processes on {len(planned.workers)} nodes")
    if job.condition("Admitted", True, "Admitted", f"reserved {len(planned.workers)} nodes"):
        kopf.info(body, reason="Admitted", message=f"reserved nodes {', '.join(w.name for w in planned.workers)}")
    live = _provision(job, kube, job_spec, planned, retry)
    patch.status.update(
        placement=dump(planned.summary),
        appliedPlacement=[dump(e) for e in planned.applied],
        predictedIterationTime=planned.predicted_iteration_time,
        gpus=planned.gpus,
        nodes=len(planned.workers),
        rayCluster=live["metadata"]["name"],
        queuePosition=None,
        waitingFor=None,
    )
    mirrored = mirrored_status({"conditions": job.conditions}, raycluster_ready(live), job.generation)
    job.conditions = mirrored["conditions"]
    patch.status["conditions"] = job.conditions
    job.phase(mirrored["phase"])
    kopf.info(body, reason="Placed", message=f"{planned.summary.mode} placement applied; RayCluster {name}")


def _is_queued(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") == JobPhase.QUEUED


@kopf.timer(GROUP, VERSION, RLJOB_PLURAL, interval=QUEUE_RECHECK_SECONDS, when=_is_queued)
def rljob_queue_recheck(**kwargs: Any) -> None:
    """Queued jobs look at the queue again every few seconds: nodes freed, jobs deleted, priorities."""
    rljob_reconcile(**kwargs)


@kopf.on.delete(GROUP, VERSION, RLJOB_PLURAL, optional=True)
def rljob_release(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A deleted job's reservation goes (its RayCluster goes with it through the garbage collector)."""
    ledger: Ledger = memo.ledger
    ledger.forget((namespace, name))


def _provisioning(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") == JobPhase.PROVISIONING


@kopf.timer(GROUP, VERSION, RLJOB_PLURAL, interval=BIND_CHECK_SECONDS, when=_provisioning)
def rljob_bind_watchdog(
    name: str,
    namespace: str,
    body: kopf.Body,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """All or nothing after admission too: worker pods that cannot bind in time -> give back, queue again."""
    admitted = next((c for c in status.get("conditions") or [] if c.get("type") == "Admitted"), None)
    if admitted is None or admitted.get("status") != "True":
        return
    since = dt.datetime.fromisoformat(admitted["lastTransitionTime"].replace("Z", "+00:00"))
    if (dt.datetime.now(dt.UTC) - since).total_seconds() < BIND_TIMEOUT_SECONDS:
        return
    kube: Kube = memo.kube
    bound = [node for node in kube.worker_pod_nodes(namespace, raycluster_name(name)) if node]
    expected = status.get("nodes") or 0
    if len(bound) >= expected:
        return
    kube.delete_raycluster(namespace, raycluster_name(name))
    ledger: Ledger = memo.ledger
    ledger.release((namespace, name))
    job = _JobStatus(body, status, patch, meta.get("generation"))
    message = (
        f"{len(bound)} of {expected} worker pods bound {BIND_TIMEOUT_SECONDS:.0f} s after admission (another "
        "workload took a node): gave the nodes back and queued again"
    )
    if job.condition("Admitted", False, "BindTimeout", message):
        kopf.warn(body, reason="BindTimeout", message=message)
    job.condition("RayClusterReady", False, "BindTimeout", message)
    job.phase(JobPhase.QUEUED, message)
    patch.status.update(rayCluster=None, queuePosition=None, waitingFor=None)
