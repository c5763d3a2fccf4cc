"""RLJob: validate -> cluster from NodeGroups -> plan -> ConfigMap -> RayCluster -> status.

One reconcile serves create, update (a spec or profile-annotation change re-plans) and resume after an
operator restart; children have fixed names, so running it twice changes nothing.
"""

from __future__ import annotations

from typing import Any

import kopf
from pydantic import ValidationError

from placement_core.errors import CapacityError, PlacementError
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.conditions import set_condition
from rlplace_operator.handlers import rayjob
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.handlers.raycluster import mirrored_status, raycluster_ready
from rlplace_operator.k8s import Kube
from rlplace_operator.models import GROUP, VERSION, JobPhase, NodeGroupSpec, NodeGroupStatus, RLJobSpec, dump
from rlplace_operator.names import RLJOB_PLURAL, raycluster_name, rayjob_name
from rlplace_operator.planning import JobPlan, plan_job
from rlplace_operator.selection import JobGroup

#: Retries for causes that can change by themselves (a NodeGroup appears, nodes join, KubeRay is installed):
#: the first after this many seconds, then doubling up to the cap, so a job left Pending for hours costs
#: the API server one request every half minute.
FIRST_RETRY_DELAY = 5.0
MAX_RETRY_DELAY = 30.0


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


def _suspend(job: _JobStatus, kube: Kube, namespace: str, name: str, spec: RLJobSpec) -> None:
    if spec.entrypoint:
        # KubeRay stops the driver and deletes the RayCluster of a suspended RayJob; resuming starts both anew.
        kube.suspend_rayjob(namespace, rayjob_name(name))
        message = "the job is suspended; its driver was stopped and its RayCluster removed"
    else:
        kube.delete_raycluster(namespace, raycluster_name(name))
        message = "the job is suspended; its RayCluster was removed"
    job.condition("RayClusterReady", False, "Suspended", message)
    job.phase(JobPhase.SUSPENDED, message)
    job.patch.status["rayCluster"] = None


def _plan(
    job: _JobStatus,
    spec: RLJobSpec,
    annotations: dict[str, str],
    node_index: kopf.Index,
    nodegroup_index: kopf.Index,
    retry: int,
) -> JobPlan:
    """The plan on the live cluster, or Pending (a cause that can go away) / Failed (a wrong spec)."""
    groups, missing = _job_groups(spec, nodegroup_index)
    if missing:
        raise job.wait("Validated", "NodeGroupNotFound", f"NodeGroup {', '.join(missing)} not found", retry)
    job.condition("Validated", True, "SpecValid", "spec and NodeGroups are valid")
    try:
        planned = plan_job(spec, annotations, groups, {n: indexed(node_index, n) for n in node_index})
    except CapacityError as err:
        raise job.wait("Placed", "InsufficientCapacity", str(err), retry) from None
    except PlacementError as err:
        raise job.fail("Placed", "PlacementInvalid", str(err)) from None
    processes = sum(c.processes for c in planned.summary.components)
    job.condition("Placed", True, "Placed", f"{processes} processes on {len(planned.workers)} nodes")
    return planned


def _provision(job: _JobStatus, kube: Kube, spec: RLJobSpec, planned: JobPlan, retry: int) -> dict:
    """Apply the ConfigMap and the RayCluster, or with an entrypoint the RayJob (adopted by the job); returns
    the live RayCluster or RayJob."""
    kind, served = (
        ("RayJob", kube.rayjob_crd_installed) if spec.entrypoint else ("RayCluster", kube.raycluster_crd_installed)
    )
    if not served():
        message = f"the ray.io {kind} CRD is not installed (install KubeRay)"
        raise job.wait("RayClusterReady", "KubeRayMissing", message, retry)
    name, namespace = job.body["metadata"]["name"], job.body["metadata"]["namespace"]
    configmap = build_placement_configmap(name, planned.plan)
    child = (
        build_rayjob(name, spec, planned.workers) if spec.entrypoint else build_raycluster(name, spec, planned.workers)
    )
    kopf.adopt([configmap, child], owner=job.body)
    kube.apply_configmap(namespace, configmap)
    return kube.apply_rayjob(namespace, child) if spec.entrypoint else kube.apply_raycluster(namespace, child)


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
    retry: int,
    **_: Any,
) -> None:
    """Validate -> plan on the live cluster -> ConfigMap and RayCluster -> status."""
    kube: Kube = memo.kube
    if _driver_done(spec, status, meta.get("generation")):
        return  # the driver ended for this spec: nothing to re-plan (an operator restart must not re-run it)
    job = _JobStatus(body, status, patch, meta.get("generation"))
    job_spec = _validated_spec(job, spec)
    if job_spec.suspend:
        _suspend(job, kube, namespace, name, job_spec)
        return
    planned = _plan(job, job_spec, dict(meta.get("annotations") or {}), node_index, nodegroup_index, retry)
    live = _provision(job, kube, job_spec, planned, retry)
    patch.status.update(
        placement=dump(planned.summary),
        appliedPlacement=[dump(e) for e in planned.applied],
        predictedIterationTime=planned.predicted_iteration_time,
        gpus=planned.gpus,
        nodes=len(planned.workers),
    )
    if job_spec.entrypoint:
        driver = rayjob.driver_status(
            {**dict(status), "conditions": job.conditions}, live, None, namespace, name,
            job_spec.run.submission_mode, job.generation,
        )  # fmt: skip
        patch.status.update(driver, observedGeneration=job.generation)
        job.conditions = driver["conditions"]
        kopf.info(body, reason="Placed", message=f"{planned.summary.mode} placement applied; RayJob {name}")
        return
    patch.status["rayCluster"] = live["metadata"]["name"]
    mirrored = mirrored_status({"conditions": job.conditions}, raycluster_ready(live), job.generation)
    job.conditions = mirrored["conditions"]
    patch.status["conditions"] = job.conditions
    job.phase(mirrored["phase"])
    kopf.info(body, reason="Placed", message=f"{planned.summary.mode} placement applied; RayCluster {name}")


def _driver_done(spec: kopf.Spec, status: kopf.Status, generation: int | None) -> bool:
    """A job whose driver ended (Succeeded, or Failed after it was submitted) for the current spec."""
    ended = status.get("phase") == JobPhase.SUCCEEDED or (
        status.get("phase") == JobPhase.FAILED and status.get("rayJob") is not None
    )
    return bool(spec.get("entrypoint")) and ended and status.get("observedGeneration") == generation
