"""Apply: carry out an Outcome through the API (kube.py) and write the job's status once, with optimistic
concurrency.

The status is written as a merge patch conditional on the resourceVersion it was computed from: a 409 Conflict
(someone wrote in between) is raised as `StatusConflict`, and the caller (run.py) reads the job again and decides
again, so two writers never drop each other's conditions. Children an outcome makes are applied first and its
status written after (the status says what they run); every other action follows a successful write.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from rlplace_operator.admission import admitter
from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.names import (
    API_VERSION,
    PLAN_DIGEST_ANNOTATION,
    RAYCLUSTER_PLURAL,
    RAYJOB_PLURAL,
    JobKey,
    raycluster_name,
    rayjob_name,
)
from rlplace_operator.builders.raycluster import dropped_workers, moved_worker
from rlplace_operator.kube import Kube, StatusConflict
from rlplace_operator.reconcile.actions import (
    Apply,
    DeleteChildren,
    DeleteStale,
    DropWorkers,
    LowerWorkload,
    MarkWorkload,
    MoveWorker,
    Outcome,
    Post,
    ReleaseNodes,
    ReleaseWorkload,
    RequestCheckpoint,
    ResizeWorkers,
    SetReplicas,
    SuspendDriver,
)
from rlplace_operator.reconcile.decide import status_wire
from rlplace_operator.reconcile.world import Job, job_of_body

logger = logging.getLogger(__name__)

#: A write that conflicts this many times in a row is left to the job's next trigger.
MAX_CONFLICTS = 3


def ref(job: Job) -> dict[str, Any]:
    """The job as Events and status writes name it."""
    metadata = {"namespace": job.namespace, "name": job.name, "uid": job.uid}
    return {"apiVersion": API_VERSION, "kind": "RLJob", "metadata": metadata}


def adopted(objects: tuple[Mapping[str, Any], ...], owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Copies of `objects` owned by `owner` (kopf.adopt: its ownerReference, its namespace, its labels where an
    object has no label of that key), so deleting the job deletes them."""
    copies = [copy.deepcopy(dict(o)) for o in objects]
    kopf.adopt(copies, owner=kopf.Body(copy.deepcopy(dict(owner))))
    return copies


def apply_objects(kube: Kube, action: Apply) -> None:
    """Make each object exist as given, in order (see actions.Apply)."""
    for body in adopted(action.objects, action.owner):
        namespace, kind = body["metadata"]["namespace"], body["kind"]
        if kind == "ConfigMap":
            kube.apply_configmap(namespace, body)
        elif kind == "RayCluster":
            kube.apply_raycluster(namespace, body)
        elif kind == "RayJob":
            kube.apply_rayjob(namespace, body)
        elif kind == "ResourceClaimTemplate":
            kube.create_claim_template(namespace, body)
        elif kind == "Workload":
            kube.create_workload(namespace, body)
        else:
            raise ValueError(f"no way to apply a {kind}")


def delete_stale(kube: Kube, job: Job, action: DeleteStale) -> None:
    if action.kind == "ResourceClaimTemplate":
        kube.delete_claim_templates(job.namespace, job.name, set(action.keep))
    elif action.kind == "Workload":
        for other in kube.job_workloads(job.namespace, job.name):
            if other["metadata"]["name"] not in action.keep:
                kube.delete_workload(job.namespace, other["metadata"]["name"])
    else:
        raise ValueError(f"no way to delete stale {action.kind}s")


def write_workload(kube: Kube, namespace: str, name: str, change: Callable[[Mapping[str, Any]], dict]) -> None:
    """Read the Workload and write `change(status)` as its whole status; again when its admitter wrote in between."""
    for _ in range(MAX_CONFLICTS):
        body = kube.get_workload(namespace, name)
        if body is None:
            return
        try:
            kube.replace_workload_status(body, change(body.get("status") or {}))
            return
        except StatusConflict:
            continue
    logger.warning("Workload %s/%s: its status kept changing; the next look writes it again", namespace, name)


def make_children(kube: Kube, job: Job, outcome: Outcome) -> None:
    """The outcome's Apply, DeleteStale, LowerWorkload, MoveWorker and ResizeWorkers actions, in order: the children
    it makes or changes."""
    for action in outcome.actions:
        if isinstance(action, Apply):
            apply_objects(kube, action)
        elif isinstance(action, DeleteStale):
            delete_stale(kube, job, action)
        elif isinstance(action, LowerWorkload):
            kube.patch_workload(job.namespace, action.workload, action.patch)
        elif isinstance(action, MoveWorker):
            move_worker(kube, job, action)
        elif isinstance(action, ResizeWorkers):
            resize_workers(kube, job, action)


def move_worker(kube: Kube, job: Job, action: MoveWorker) -> None:
    """The RayCluster's worker group may run on the new node instead of the lost one (read, changed, patched),
    the RayJob's held-nodes annotation says so too (KubeRay copied it to the RayCluster at its start), and the
    lost pods go at once."""
    cluster = kube.get_raycluster(job.namespace, action.cluster)
    if cluster is None:
        return  # gone meanwhile: the job's next look sees why
    patch = moved_worker(cluster, action.node_from, action.node_to, action.host_from, action.host_to)
    kube.patch_ray_object(job.namespace, RAYCLUSTER_PLURAL, action.cluster, patch)
    if job.entrypoint:
        kube.patch_ray_object(job.namespace, RAYJOB_PLURAL, rayjob_name(job.name), {"metadata": patch["metadata"]})
    for pod in action.pods:
        kube.delete_pod_now(job.namespace, pod)


def resize_workers(kube: Kube, job: Job, action: ResizeWorkers) -> None:
    """The RayCluster's worker groups as the resized plan has them, the RayJob's held-nodes annotation too, and the
    head pod nudged to see the new plan (ResizeWorkers)."""
    if action.patch is not None:
        if not kube.patch_ray_object(job.namespace, RAYCLUSTER_PLURAL, action.cluster, dict(action.patch)):
            return  # gone meanwhile: the job's next look sees why
        if job.entrypoint:
            patch = {"metadata": dict(action.patch["metadata"])}
            kube.patch_ray_object(job.namespace, RAYJOB_PLURAL, rayjob_name(job.name), patch)
    if action.head is not None:
        kube.annotate_pod(job.namespace, action.head, {PLAN_DIGEST_ANNOTATION: action.plan_digest})


def drop_workers(kube: Kube, job: Job, action: DropWorkers) -> None:
    """The RayCluster without the worker pods of nodes a shrink took away (read, changed, patched; KubeRay deletes
    them), the RayJob's held-nodes annotation too."""
    cluster = kube.get_raycluster(job.namespace, action.cluster)
    if cluster is None:
        return  # gone meanwhile: the job's next look sees why
    patch = dropped_workers(cluster, action.drops)
    kube.patch_ray_object(job.namespace, RAYCLUSTER_PLURAL, action.cluster, patch)
    if job.entrypoint:
        kube.patch_ray_object(job.namespace, RAYJOB_PLURAL, rayjob_name(job.name), {"metadata": patch["metadata"]})


def act(kube: Kube, ledger: Ledger, job: Job, outcome: Outcome, checkpoints: set[JobKey]) -> None:
    """Every other action of the outcome, once its status is written."""
    if not any(isinstance(a, RequestCheckpoint) for a in outcome.actions) and outcome.status.preemption is None:
        checkpoints.discard(job.key)
    for action in outcome.actions:
        if isinstance(action, RequestCheckpoint):
            checkpoints.add(job.key)
        elif isinstance(action, MarkWorkload):
            write_workload(
                kube,
                job.namespace,
                action.workload,
                lambda status, a=action: admitter.with_condition(status, a.condition, True, a.reason, a.message),
            )
        elif isinstance(action, ReleaseWorkload):
            write_workload(
                kube, job.namespace, action.workload, lambda status, a=action: admitter.released(status, a.requeue)
            )
        elif isinstance(action, DropWorkers):
            drop_workers(kube, job, action)
        elif isinstance(action, SetReplicas):
            kube.set_component_replicas(job.namespace, job.name, action.index, action.component, action.replicas)
        elif isinstance(action, DeleteChildren):
            if job.entrypoint:
                kube.delete_rayjob(job.namespace, rayjob_name(job.name))
            else:
                kube.delete_raycluster(job.namespace, raycluster_name(job.name))
        elif isinstance(action, SuspendDriver):
            kube.suspend_rayjob(job.namespace, rayjob_name(job.name))
        elif isinstance(action, ReleaseNodes):
            ledger.release(job.key)
        elif isinstance(action, Post):
            post = kopf.warn if action.warning else kopf.info
            post(ref(job), reason=action.reason, message=cond.short(action.message))


def write_status(kube: Kube, job: Job, outcome: Outcome) -> None:
    """Write the outcome's status, conditional on the job's resourceVersion (StatusConflict on a conflict)."""
    kube.write_rljob_status(ref(job), job.status, status_wire(outcome.status), job.resource_version)


#: Status fields a reconcile pass does not write: the progress endpoint's (server/progress.py).
WRITTEN_BY_OTHERS = frozenset({"progress"})


def write_provisioned(kube: Kube, job: Job, wanted: Mapping[str, Any]) -> None:
    """Write what a provision pass decided. Its children are applied already, so a later pass sees them and
    provisions nothing: this write is the only one that says what they run (placement, appliedPlacement, the
    Placed condition). When another writer got in first, this pass's changes are made again on the job as it is
    now, instead of being dropped with a conflict."""
    changes = cond.merge_patch(job.status, wanted)
    for _ in range(MAX_CONFLICTS):
        try:
            kube.write_rljob_status(ref(job), job.status, wanted, job.resource_version)
            return
        except StatusConflict:
            again = reread(kube, job)
            if again is None or again.generation != job.generation:
                return  # deleted, or a new spec: its own provision pass says what it runs
            # This pass's status is the whole truth about what its children run: a field it does not have that
            # another pass wrote meanwhile (what the job waited for, its queue position) no longer holds. Only
            # what other writers own is kept from theirs.
            merged = cond.apply_merge_patch(again.status, changes)
            job, wanted = again, {k: v for k, v in merged.items() if k in wanted or k in WRITTEN_BY_OTHERS}
    logger.warning("RLJob %s/%s: the status of its new children kept conflicting; not written", *job.key)


def reread(kube: Kube, job: Job) -> Job | None:
    """The job as the API has it now (None: deleted)."""
    body = kube.get_rljob(job.namespace, job.name)
    return None if body is None else job_of_body(body, job.profile_changed)
