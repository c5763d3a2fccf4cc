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

from collections.abc import Mapping
from typing import Any

import kopf
from pydantic import ValidationError

from placement_core.errors import CapacityError, PlacementError
from rlplace_operator import conditions as cond
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.handlers.raycluster import mirrored_status, raycluster_ready
from rlplace_operator.k8s import Kube
from rlplace_operator.models import GROUP, VERSION, JobPhase, NodeGroupSpec, NodeGroupStatus, RLJobSpec, dump, is_live
from rlplace_operator.names import PROFILE_ANNOTATION, RLJOB_PLURAL, raycluster_name
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


def _suspend(job: _JobStatus, kube: Kube, namespace: str, name: str) -> None:
    kube.delete_raycluster(namespace, raycluster_name(name))
    job.condition(cond.RAYCLUSTER_READY, False, cond.SUSPENDED, "the job is suspended; its RayCluster was removed")
    job.phase(JobPhase.SUSPENDED)
    # A suspended job holds no nodes: the next start plans on the NodeGroups as they are then.
    job.set(rayCluster=None, conditions=[c for c in job.conditions if c.get("type") != cond.NODEGROUP_CHANGED])


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
        raise job.wait(cond.VALIDATED, cond.NODEGROUP_NOT_FOUND, f"NodeGroup {', '.join(missing)} not found", retry)
    try:
        planned = plan_job(spec, annotations, groups, {n: indexed(node_index, n) for n in node_index})
    except CapacityError as err:
        job.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
        raise job.wait(cond.PLACED, cond.INSUFFICIENT_CAPACITY, str(err), retry) from None
    except PlacementError as err:
        raise job.fail(cond.PLACED, cond.PLACEMENT_INVALID, str(err)) from None
    job.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
    processes = sum(c.processes for c in planned.summary.components)
    job.condition(cond.PLACED, True, cond.PLACEMENT_APPLIED, f"{processes} processes on {len(planned.workers)} nodes")
    return planned


def _provision(job: _JobStatus, kube: Kube, spec: RLJobSpec, planned: JobPlan, retry: int) -> dict:
    """Apply the ConfigMap and the RayCluster (adopted by the job); returns the live RayCluster."""
    if not kube.raycluster_crd_installed():
        message = "the ray.io RayCluster CRD is not installed (install KubeRay)"
        raise job.wait(cond.RAYCLUSTER_READY, cond.KUBERAY_MISSING, message, retry)
    name, namespace = job.body["metadata"]["name"], job.body["metadata"]["namespace"]
    configmap = build_placement_configmap(name, planned.plan)
    raycluster = build_raycluster(name, spec, planned.workers)
    kopf.adopt([configmap, raycluster], owner=job.body)
    kube.apply_configmap(namespace, configmap)
    return kube.apply_raycluster(namespace, raycluster)


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
    its RayCluster is gone. A running job with none of these keeps its plan (one read, no write)."""
    if not is_live(status) or status.get("observedGeneration") != generation:
        return True
    if profile_changed(diff):
        return True
    return kube.get_raycluster(body["metadata"]["namespace"], status["rayCluster"]) is None


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
    diff: kopf.Diff,
    memo: kopf.Memo,
    node_index: kopf.Index,
    nodegroup_index: kopf.Index,
    retry: int,
    **_: Any,
) -> None:
    """Validate -> plan on the live cluster -> ConfigMap and RayCluster -> status (see the module's rule)."""
    kube: Kube = memo.kube
    job = _JobStatus(body, status, meta.get("generation"))
    try:
        job_spec = _validated_spec(job, spec)
        if job_spec.suspend:
            _suspend(job, kube, namespace, name)
            return
        if not needs_plan(status, job.generation, diff, kube, body):
            return
        planned = _plan(job, job_spec, dict(meta.get("annotations") or {}), node_index, nodegroup_index, retry)
        live = _provision(job, kube, job_spec, planned, retry)
        job.set(
            placement=dump(planned.summary),
            appliedPlacement=[dump(e) for e in planned.applied],
            predictedIterationTime=planned.predicted_iteration_time,
            gpus=planned.gpus,
            nodes=len(planned.workers),
            rayCluster=live["metadata"]["name"],
        )
        # The new plan is on the NodeGroups as they are now: an earlier NodeGroupChanged no longer applies.
        job.set(conditions=[c for c in job.conditions if c.get("type") != cond.NODEGROUP_CHANGED])
        mirrored = mirrored_status({"conditions": job.conditions}, raycluster_ready(live), job.generation)
        job.set(conditions=mirrored["conditions"])
        job.phase(mirrored["phase"])
        kopf.info(
            body, reason=cond.PLACEMENT_APPLIED, message=f"{planned.summary.mode} placement applied; RayCluster {name}"
        )
    finally:
        job.write(kube)
