"""Mirror each managed RayCluster's readiness into its RLJob (RayClusterReady, phase Running)."""

from __future__ import annotations

from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from rlplace_operator.conditions import (
    RAYCLUSTER_IS_READY,
    RAYCLUSTER_PROVISIONING,
    RAYCLUSTER_READY,
    is_true,
    set_condition,
)
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.k8s import Kube
from rlplace_operator.models import GROUP, LIVE_PHASES, VERSION, JobPhase
from rlplace_operator.names import (
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
    RLJOB_PLURAL,
    raycluster_name,
)

#: KubeRay's condition type on a RayCluster whose pods all came up.
KUBERAY_PROVISIONED = "RayClusterProvisioned"


def raycluster_ready(body: dict) -> bool:
    """KubeRay marks a cluster ready with state `ready` or the RayClusterProvisioned condition."""
    status = body.get("status") or {}
    return status.get("state") == "ready" or is_true(status.get("conditions"), KUBERAY_PROVISIONED)


def mirrored_status(job_status: dict, ready: bool, generation: int | None) -> dict:
    """The RLJob status fields that follow its RayCluster."""
    return {
        "phase": JobPhase.RUNNING if ready else JobPhase.PROVISIONING,
        "conditions": set_condition(
            job_status.get("conditions"),
            RAYCLUSTER_READY,
            ready,
            RAYCLUSTER_IS_READY if ready else RAYCLUSTER_PROVISIONING,
            "all Ray pods are ready" if ready else "waiting for the Ray pods",
            generation,
        ),
    }


@kopf.on.event(RAY_GROUP, RAY_VERSION, RAYCLUSTER_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def raycluster_mirror(
    body: kopf.Body, namespace: str, labels: kopf.Labels, type: str, memo: kopf.Memo, rljob_index: kopf.Index, **_: Any
) -> None:
    if type == "DELETED" or JOB_LABEL not in labels:
        return
    job = indexed(rljob_index, (namespace, labels[JOB_LABEL]))
    if job is None:
        return
    owners = {ref.get("uid") for ref in body.get("metadata", {}).get("ownerReferences") or []}
    status = job["status"]
    if job["uid"] not in owners or status.get("phase") not in LIVE_PHASES:
        return
    new = mirrored_status(status, raycluster_ready(dict(body)), job["generation"])
    if new["phase"] != status.get("phase") or new["conditions"] != status.get("conditions"):
        _patch_job(memo.kube, namespace, labels[JOB_LABEL], new)


@kopf.on.event(GROUP, VERSION, RLJOB_PLURAL)
def rljob_provisioning_recheck(
    type: str, name: str, namespace: str, meta: kopf.Meta, status: kopf.Status, memo: kopf.Memo, **_: Any
) -> None:
    """Closes the one gap of the RayCluster mirror: a RayCluster that became ready in the moment between the
    job's reconcile and its status write sends no further event, so each event of a Provisioning job (its own
    status write among them) looks at the RayCluster once. An event handler, not a timer: kopf would put a
    finalizer on every job for a timer, and deleting a job must not need the operator."""
    if type == "DELETED" or status.get("phase") != JobPhase.PROVISIONING:
        return
    kube: Kube = memo.kube
    live = kube.get_raycluster(namespace, raycluster_name(name))
    if live is None:
        return
    new = mirrored_status(dict(status), raycluster_ready(live), meta.get("generation"))
    if new["phase"] != status.get("phase") or new["conditions"] != status.get("conditions"):
        _patch_job(kube, namespace, name, new)


def _patch_job(kube: Kube, namespace: str, name: str, patch: dict) -> None:
    """Patch a job's status; a job deleted meanwhile has nothing left to update."""
    try:
        kube.patch_rljob_status(namespace, name, patch)
    except ApiException as err:
        if err.status != 404:
            raise
