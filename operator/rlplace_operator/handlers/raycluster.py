"""Mirror each managed RayCluster's readiness into its RLJob (RayClusterReady, phase Running)."""

from __future__ import annotations

from typing import Any

import kopf

from rlplace_operator.conditions import is_true, set_condition
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.k8s import Kube
from rlplace_operator.models import GROUP, VERSION, JobPhase
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

#: How often a job still Provisioning re-reads its RayCluster (see rljob_provisioning_recheck).
PROVISIONING_RECHECK_SECONDS = 10.0
#: Phases in which the RayCluster's state decides between Provisioning and Running.
_LIVE_PHASES = {JobPhase.PROVISIONING, JobPhase.RUNNING}


def raycluster_ready(body: dict) -> bool:
    """KubeRay marks a cluster ready with state `ready` or the RayClusterProvisioned condition."""
    status = body.get("status") or {}
    return status.get("state") == "ready" or is_true(status.get("conditions"), "RayClusterProvisioned")


def mirrored_status(job_status: dict, ready: bool, generation: int | None) -> dict:
    """The RLJob status fields that follow its RayCluster."""
    return {
        "phase": JobPhase.RUNNING if ready else JobPhase.PROVISIONING,
        "conditions": set_condition(
            job_status.get("conditions"),
            "RayClusterReady",
            ready,
            "RayClusterReady" if ready else "RayClusterProvisioning",
            "all Ray pods are ready" if ready else "waiting for the Ray pods",
            generation,
        ),
    }


@kopf.index(GROUP, VERSION, RLJOB_PLURAL)
def rljob_index(
    namespace: str, name: str, uid: str, meta: kopf.Meta, status: kopf.Status, **_: Any
) -> dict[tuple[str, str], dict]:
    """Every RLJob's uid, generation and status, so mirroring a RayCluster costs no read of its job."""
    return {(namespace, name): {"uid": uid, "generation": meta.get("generation"), "status": dict(status)}}


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
    if job["uid"] not in owners or status.get("phase") not in _LIVE_PHASES:
        return
    new = mirrored_status(status, raycluster_ready(dict(body)), job["generation"])
    if new["phase"] != status.get("phase") or new["conditions"] != status.get("conditions"):
        kube: Kube = memo.kube
        kube.patch_rljob_status(namespace, labels[JOB_LABEL], new)


def _provisioning(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") == JobPhase.PROVISIONING


@kopf.timer(GROUP, VERSION, RLJOB_PLURAL, interval=PROVISIONING_RECHECK_SECONDS, when=_provisioning)
def rljob_provisioning_recheck(
    name: str, namespace: str, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    """A safety net for the event mirror: a RayCluster that became ready in the moment between the job's
    reconcile and its status write sends no further event, so Provisioning jobs look at it now and then."""
    kube: Kube = memo.kube
    live = kube.get_raycluster(namespace, raycluster_name(name))
    if live is None:
        return
    new = mirrored_status(dict(status), raycluster_ready(live), meta.get("generation"))
    if new["phase"] != status.get("phase") or new["conditions"] != status.get("conditions"):
        patch.status.update(new)
