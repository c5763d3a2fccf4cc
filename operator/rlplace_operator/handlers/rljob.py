"""RLJob: validate -> cluster from NodeGroups -> plan -> ConfigMap -> RayCluster -> status.

The rule for a job whose RayCluster exists (phase Provisioning or Running): it keeps the nodes it was planned
on. It is re-planned only when its spec changes (a new metadata.generation) or its rlplace.io/profile
annotation changes; never because NodeGroups or nodes changed (that is reported as NodeGroupChanged, see
handlers/nodegroup.py), and never on an operator restart. A change that cannot be applied (an invalid spec or
profile, too few GPUs) leaves it running on its last good plan and is reported on the Validated or Placed
condition, the message and a Warning Event. Suspend and resume (spec.suspend) re-plan it on today's nodes.

Status is written once per reconcile, as the merge patch from the status read to the one wanted: an unchanged
job costs no write and no Event.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from placement_core.errors import CapacityError, PlacementError
from rlplace_operator import conditions as cond
from rlplace_operator.admission import JobKey, QueuedJob, Waiting, demand_from_workers
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.handlers import rayjob
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
    is_live,
)
from rlplace_operator.names import (
    NODEGROUP_PLURAL,
    PROFILE_ANNOTATION,
    RLJOB_PLURAL,
    raycluster_name,
    rayjob_name,
    worker_pods_selector,
)
from rlplace_operator.planning import JobPlan, plan_job, ranked_across, wants_auto_placement
from rlplace_operator.selection import JobGroup, unit_resource, untolerated_nodes

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

    def write(self, kube: Kube) -> None:
        kube.write_rljob_status(self.body, self.before, self.after)


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
        raise job.fail(cond.VALIDATED, cond.INVALID_SPEC, f"spec.{where}: {first['msg']}") from None


def _suspend(job: _JobStatus, kube: Kube, namespace: str, name: str, spec: RLJobSpec) -> None:
    if spec.entrypoint:
        # KubeRay stops the driver and deletes the RayCluster of a suspended RayJob; resuming starts both anew.
        kube.suspend_rayjob(namespace, rayjob_name(name))
        message = "the job is suspended; its driver was stopped and its RayCluster removed"
    else:
        kube.delete_raycluster(namespace, raycluster_name(name))
        message = "the job is suspended; its RayCluster was removed"
    job.condition(cond.RAYCLUSTER_READY, False, cond.SUSPENDED, message)
    job.phase(JobPhase.SUSPENDED, message)
    # A suspended job holds no nodes: the next start plans on the NodeGroups as they are then.
    job.set(rayCluster=None, conditions=[c for c in job.conditions if c.get("type") != cond.NODEGROUP_CHANGED])


def _groups(job: _JobStatus, spec: RLJobSpec, nodegroup_index: kopf.Index, retry: int) -> list[JobGroup]:
    groups, missing = _job_groups(spec, nodegroup_index)
    if missing:
        raise job.wait(cond.VALIDATED, cond.NODEGROUP_NOT_FOUND, f"NodeGroup {', '.join(missing)} not found", retry)
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
        planned = plan_job(spec, annotations, groups, {n: indexed(node_index, n) for n in node_index})
    except CapacityError as err:
        job.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
        raise job.wait(cond.PLACED, cond.INSUFFICIENT_CAPACITY, str(err), retry) from None
    except PlacementError as err:
        raise job.fail(cond.PLACED, cond.PLACEMENT_INVALID, str(err)) from None
    job.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
    return planned


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
    infos = {name: indexed(node_index, name) for _, names in ranked for name in names}
    excluded = untolerated_nodes(spec, groups, infos)
    fingerprint = (
        job.generation,
        annotations.get(PROFILE_ANNOTATION),
        tuple((n, tuple(r)) for n, r in ranked),
        tuple(sorted(excluded.items())),
    )
    known = ledger.demand(key, fingerprint)
    if known is not None:
        return known
    planned = _plan(job, spec, annotations, groups, node_index, retry)
    resolved = spec
    if wants_auto_placement(spec, annotations):
        update = {"component_placement": planned.applied, "auto_placement": False}
        resolved = spec.model_copy(update={**update, "placement_mode": PlacementMode.MODEL_PARALLEL})
    demand = demand_from_workers(ranked, {w.name for w in planned.workers}, ranked_across(resolved))
    result = PlannedDemand(demand, resolved, planned.predicted_iteration_time, excluded)
    ledger.remember_demand(key, fingerprint, result)
    return result


def _queued(job: _JobStatus, waiting: Waiting) -> None:
    """Phase Queued with the position and what the job waits for; an Event when that changes."""
    message = f"waiting for {waiting.reason} (position {waiting.position} in the queue)"
    before = job.before.get("waitingFor")
    job.condition(cond.ADMITTED, False, cond.QUEUED, message)
    if before != waiting.reason:
        kopf.info(job.body, reason=cond.QUEUED, message=message)
    job.phase(JobPhase.QUEUED, message)
    job.set(queuePosition=waiting.position, waitingFor=waiting.reason)


def _provision(job: _JobStatus, kube: Kube, spec: RLJobSpec, planned: JobPlan, retry: int) -> dict:
    """Apply the ConfigMap and the RayCluster, or with an entrypoint the RayJob (adopted by the job); returns
    the live RayCluster or RayJob."""
    kind, served = (
        ("RayJob", kube.rayjob_crd_installed) if spec.entrypoint else ("RayCluster", kube.raycluster_crd_installed)
    )
    if not served():
        message = f"the ray.io {kind} CRD is not installed (install KubeRay)"
        raise job.wait(cond.RAYCLUSTER_READY, cond.KUBERAY_MISSING, message, retry)
    name, namespace = job.body["metadata"]["name"], job.body["metadata"]["namespace"]
    configmap = build_placement_configmap(name, planned.plan)
    child = (
        build_rayjob(name, spec, planned.workers) if spec.entrypoint else build_raycluster(name, spec, planned.workers)
    )
    kopf.adopt([configmap, child], owner=job.body)
    kube.apply_configmap(namespace, configmap)
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


def needs_plan(status: Mapping, generation: int | None, diff: kopf.Diff | None, kube: Kube, body: Mapping) -> bool:
    """Whether the job must be (re-)planned: it does not run, or its spec or profile annotation changed, or
    its RayCluster (or RayJob) is gone. A running job with none of these keeps its plan (one read, no write)."""
    if not is_live(status) or status.get("observedGeneration") != generation:
        return True
    if profile_changed(diff):
        return True
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    if (body.get("spec") or {}).get("entrypoint"):
        return kube.get_rayjob(namespace, rayjob_name(name)) is None
    return kube.get_raycluster(namespace, status["rayCluster"]) is None


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


def _admitted_plan(
    job: _JobStatus,
    key: JobKey,
    spec: RLJobSpec,
    annotations: dict[str, str],
    memo: kopf.Memo,
    indexes: Mapping[str, kopf.Index],
    node_index: kopf.Index,
    retry: int,
) -> JobPlan | None:
    """Demand -> admission: the plan on the nodes the job was admitted to, or None when it is Queued."""
    ledger: Ledger = memo.ledger
    groups = _groups(job, spec, indexes["nodegroup_index"], retry)
    demand = _demand(job, key, spec, annotations, groups, node_index, ledger, retry)
    created = job.body["metadata"]["creationTimestamp"]
    decision = admit(
        ledger, _world(indexes, node_index), QueuedJob(key, spec.priority, created, demand.demand, demand.excluded)
    )
    if isinstance(decision, Waiting):
        _queued(job, decision)
        return None
    planned = _plan(job, demand.spec, {}, groups_with_nodes(groups, decision.cluster), node_index, retry)
    planned = dataclasses.replace(planned, predicted_iteration_time=demand.predicted_iteration_time)
    if not {w.name for w in planned.workers} <= decision.nodes:
        # Only when a group mixes node sizes: the plan on the picked nodes differs from the one on all nodes.
        ledger.release(key)
        raise job.wait(
            cond.PLACED, cond.NODES_DIFFER, "the free nodes admission picked do not fit the placement", retry
        )
    processes = sum(c.processes for c in planned.summary.components)
    job.condition(cond.PLACED, True, cond.PLACEMENT_APPLIED, f"{processes} processes on {len(planned.workers)} nodes")
    if job.condition(cond.ADMITTED, True, cond.ADMITTED, f"reserved {len(planned.workers)} nodes"):
        kopf.info(
            job.body, reason=cond.ADMITTED, message=f"reserved nodes {', '.join(w.name for w in planned.workers)}"
        )
    return planned


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
    memo: kopf.Memo,
    node_index: kopf.Index,
    nodegroup_index: kopf.Index,
    rljob_index: kopf.Index,
    raycluster_nodes_index: kopf.Index,
    pod_units_index: kopf.Index,
    diff: kopf.Diff | None = None,
    retry: int = 0,
    **_: Any,
) -> None:
    """Validate -> demand -> admission (or Queued) -> plan on the admitted nodes -> children -> status (see
    the module's rule and docs/admission.md)."""
    kube: Kube = memo.kube
    if _driver_done(spec, status, meta.get("generation")):
        return  # the driver ended for this spec: nothing to re-plan (an operator restart must not re-run it)
    job = _JobStatus(body, status, meta.get("generation"))
    try:
        job_spec = _validated_spec(job, spec)
        if job_spec.suspend:
            _suspend(job, kube, namespace, name, job_spec)
            memo.ledger.release((namespace, name))
            return
        if not needs_plan(status, job.generation, diff, kube, body):
            return
        indexes = {
            "nodegroup_index": nodegroup_index,
            "rljob_index": rljob_index,
            "raycluster_nodes_index": raycluster_nodes_index,
            "pod_units_index": pod_units_index,
        }
        annotations = dict(meta.get("annotations") or {})
        planned = _admitted_plan(job, (namespace, name), job_spec, annotations, memo, indexes, node_index, retry)
        if planned is None:
            return
        live = _provision(job, kube, job_spec, planned, retry)
        job.set(
            placement=dump(planned.summary),
            appliedPlacement=[dump(e) for e in planned.applied],
            predictedIterationTime=planned.predicted_iteration_time,
            gpus=planned.gpus,
            nodes=len(planned.workers),
            queuePosition=None,
            waitingFor=None,
        )
        # The new plan is on the NodeGroups as they are now: an earlier NodeGroupChanged no longer applies.
        job.set(conditions=[c for c in job.conditions if c.get("type") != cond.NODEGROUP_CHANGED])
        if job_spec.entrypoint:
            driver = rayjob.driver_status(
                job.after, live, None, namespace, name, job_spec.run.submission_mode, job.generation
            )
            phase, message = driver.pop("phase"), driver.pop("message")
            job.set(**driver)
            job.phase(JobPhase(phase), message)
            kopf.info(
                body, reason=cond.PLACEMENT_APPLIED, message=f"{planned.summary.mode} placement applied; RayJob {name}"
            )
            return
        job.set(rayCluster=live["metadata"]["name"])
        mirrored = mirrored_status({"conditions": job.conditions}, raycluster_ready(live), job.generation)
        job.set(conditions=mirrored["conditions"])
        job.phase(mirrored["phase"])
        kopf.info(
            body, reason=cond.PLACEMENT_APPLIED, message=f"{planned.summary.mode} placement applied; RayCluster {name}"
        )
    finally:
        job.write(kube)


# A timer on NodeGroups, not on RLJobs: kopf puts a finalizer on every object a timer watches, and a Queued job
# holds nothing the operator must clean up, so deleting it must not need the operator. Each Queued job is
# looked at by the timer of its first NodeGroup only.
@kopf.timer(GROUP, VERSION, NODEGROUP_PLURAL, interval=QUEUE_RECHECK_SECONDS)
def nodegroup_queue_recheck(name: str, memo: kopf.Memo, rljob_index: kopf.Index, **kwargs: Any) -> None:
    """Queued jobs look at the queue again every few seconds: nodes freed, jobs deleted, priorities."""
    kube: Kube = memo.kube
    for key in rljob_index:
        entry = indexed(rljob_index, key)
        if entry is None or entry["nodeGroups"][:1] != [name] or entry["status"].get("phase") != JobPhase.QUEUED:
            continue
        namespace, job_name = key
        job = kube.get_rljob(namespace, job_name)  # fresh: the reconcile writes its status from this one
        if job is None or (job.get("status") or {}).get("phase") != JobPhase.QUEUED:
            continue
        with contextlib.suppress(kopf.TemporaryError, kopf.PermanentError):  # written to its status already
            rljob_reconcile(
                name=job_name,
                namespace=namespace,
                body=kopf.Body(job),
                spec=job["spec"],
                meta=job["metadata"],
                status=job.get("status") or {},
                memo=memo,
                rljob_index=rljob_index,
                **{k: v for k, v in kwargs.items() if k.endswith("_index")},
            )


@kopf.on.delete(GROUP, VERSION, RLJOB_PLURAL, optional=True)
def rljob_release(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A deleted job's reservation goes (its RayCluster goes with it through the garbage collector)."""
    ledger: Ledger = memo.ledger
    ledger.forget((namespace, name))


def _bound_in_time(status: Mapping) -> bool | None:
    """None when the bind bound has not passed since admission (or the job was not admitted)."""
    admitted = cond.find(status.get("conditions"), cond.ADMITTED)
    if admitted is None or admitted.get("status") != "True":
        return None
    since = dt.datetime.fromisoformat(admitted["lastTransitionTime"].replace("Z", "+00:00"))
    return None if (dt.datetime.now(dt.UTC) - since).total_seconds() < BIND_TIMEOUT_SECONDS else True


# A timer on NodeGroups, not on RLJobs: kopf puts a finalizer on every object a timer watches, and deleting a
# job must not need the operator (NodeGroups carry one already, for their status resync).
@kopf.timer(GROUP, VERSION, NODEGROUP_PLURAL, interval=BIND_CHECK_SECONDS)
def nodegroup_bind_watchdog(name: str, memo: kopf.Memo, rljob_index: kopf.Index, **_: Any) -> None:
    """All or nothing after admission too: a Provisioning job of this group whose worker pods are not all
    bound BIND_TIMEOUT_SECONDS after admission gives its nodes back and queues again."""
    kube: Kube = memo.kube
    ledger: Ledger = memo.ledger
    for key in rljob_index:
        entry = indexed(rljob_index, key)
        status = entry["status"]
        if name not in entry["nodeGroups"] or status.get("phase") != JobPhase.PROVISIONING:
            continue
        if _bound_in_time(status) is None:
            continue
        namespace, job_name = key
        bound = [node for node in kube.worker_pod_nodes(namespace, worker_pods_selector(job_name)) if node]
        expected = status.get("nodes") or 0
        if len(bound) >= expected:
            continue
        if status.get("rayJob"):
            kube.delete_rayjob(namespace, rayjob_name(job_name))
        else:
            kube.delete_raycluster(namespace, raycluster_name(job_name))
        ledger.release(key)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RLJob",
            "metadata": {"name": job_name, "namespace": namespace, "uid": entry["uid"]},
        }
        job = _JobStatus(kopf.Body(body), status, entry["generation"])
        message = (
            f"{len(bound)} of {expected} worker pods bound {BIND_TIMEOUT_SECONDS:.0f} s after admission (another "
            "workload took a node): gave the nodes back and queued again"
        )
        if job.condition(cond.ADMITTED, False, cond.BIND_TIMEOUT, message):
            kopf.warn(body, reason=cond.BIND_TIMEOUT, message=message)
        job.condition(cond.RAYCLUSTER_READY, False, cond.BIND_TIMEOUT, message)
        job.phase(JobPhase.QUEUED, message)
        job.set(rayCluster=None, rayJob=None, queuePosition=None, waitingFor=None)
        job.write(kube)


def _driver_done(spec: kopf.Spec, status: kopf.Status, generation: int | None) -> bool:
    """A job whose driver ended (Succeeded, or Failed after it was submitted) for the current spec."""
    ended = status.get("phase") == JobPhase.SUCCEEDED or (
        status.get("phase") == JobPhase.FAILED and status.get("rayJob") is not None
    )
    return bool(spec.get("entrypoint")) and ended and status.get("observedGeneration") == generation
