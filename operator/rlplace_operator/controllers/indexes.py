"""Every kopf index of the operator: what its watches keep in memory, so a reconcile or a queue pass costs no list
call. kopf names each index after its function (cluster/snapshot.py has the names); the values are small typed
copies (NodeInfo, Holding, PodUse, ...) or trimmed bodies, never whole objects with managedFields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from rlplace_operator.admission.ledger import Holding
from rlplace_operator.admission.queue import PodUse, pod_unit_requests
from rlplace_operator.api.base import GROUP, VERSION
from rlplace_operator.api.names import (
    DEVICE_CLASS_PLURAL,
    DRA_GROUP,
    DRA_VERSION,
    GPUS_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODEGROUP_PLURAL,
    NODES_ANNOTATION,
    RAY_CLUSTER_POD_LABEL,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
    RAYJOB_PLURAL,
    RESOURCE_CLAIM_PLURAL,
    RESOURCE_SLICE_PLURAL,
    RLJOB_PLURAL,
    JobKey,
)
from rlplace_operator.cluster.dra import ClaimedDevice, NodeSlice, claimed_devices, node_slice, parse_devices_annotation
from rlplace_operator.cluster.selection import NodeInfo


def _trimmed(body: Mapping[str, Any], spec_keys: Sequence[str] = ()) -> dict[str, Any]:
    """metadata (without managedFields), the named spec keys and the status: what a reconcile reads of a child."""
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    spec = body.get("spec") or {}
    return {
        "kind": body.get("kind"),
        "metadata": metadata,
        "spec": {k: spec[k] for k in spec_keys if k in spec} if spec_keys else dict(spec),
        "status": dict(body.get("status") or {}),
    }


# -- the cluster --------------------------------------------------------------------------------------------------


@kopf.index("", "v1", "nodes")
def node_index(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeInfo]:
    """Every node, by name: labels, allocatable and readiness."""
    return {name: NodeInfo.from_body(body)}


@kopf.index(DRA_GROUP, DRA_VERSION, RESOURCE_SLICE_PLURAL)
def resourceslice_index(body: kopf.Body, **_: Any) -> dict[str, NodeSlice] | None:
    """Every DRA driver's ResourceSlice of a single node, by node: the GPUs of NodeGroups with gpuAllocation dra."""
    found = node_slice(body)
    return None if found is None else {found[0]: found[1]}


@kopf.index(DRA_GROUP, DRA_VERSION, RESOURCE_CLAIM_PLURAL)
def resourceclaim_index(body: kopf.Body, **_: Any) -> dict[tuple[str, str], tuple[ClaimedDevice, ...]] | None:
    """The devices each allocated ResourceClaim holds, by (driver, pool): the GPUs of DRA nodes nobody else can
    have (whoever made the claim: rlplace's jobs, other users)."""
    held: dict[tuple[str, str], list[ClaimedDevice]] = {}
    for device in claimed_devices(body):
        held.setdefault((device.driver, device.pool), []).append(device)
    return {key: tuple(devices) for key, devices in held.items()} or None


@kopf.index(DRA_GROUP, DRA_VERSION, DEVICE_CLASS_PLURAL)
def deviceclass_index(name: str, **_: Any) -> dict[str, bool]:
    """Every DeviceClass, by name: a DRA NodeGroup whose class is missing says so (cluster.selection.group_problem)."""
    return {name: True}


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


# -- rlplace's resources ------------------------------------------------------------------------------------------


@kopf.index(GROUP, VERSION, NODEGROUP_PLURAL)
def nodegroup_index(name: str, spec: kopf.Spec, status: kopf.Status, **_: Any) -> dict[str, tuple[dict, dict]]:
    """Every NodeGroup, by name: its spec and the status the operator wrote."""
    return {name: (dict(spec), dict(status))}


@kopf.index(GROUP, VERSION, RLJOB_PLURAL)
def rljob_index(
    namespace: str, name: str, uid: str, meta: kopf.Meta, spec: kopf.Spec, status: kopf.Status, **_: Any
) -> dict[JobKey, dict]:
    """Every RLJob's uid, generation, resourceVersion, spec and status, so reconciling it from a timer or a child's
    event costs no read (its status write is conditional on that resourceVersion); and its queue order
    (spec.priority, creationTimestamp), so the queue survives a restart."""
    return {
        (namespace, name): {
            "uid": uid,
            "generation": meta.get("generation"),
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": dict(meta.get("annotations") or {}),
            "labels": dict(meta.get("labels") or {}),
            "spec": dict(spec),
            "nodeGroups": list(spec.get("nodeGroups") or []),
            "status": dict(status),
            "priority": spec.get("priority", 0),
            "created": meta.get("creationTimestamp", ""),
        }
    }


# -- what each job owns -------------------------------------------------------------------------------------------


@kopf.index("", "v1", "pods", labels={JOB_LABEL: kopf.PRESENT})
def job_pods_index(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[JobKey, dict]:
    """Each job's Ray pods (head and workers carry the job label): what provisioning failures are read from."""
    return {(namespace, labels[JOB_LABEL]): _trimmed(body)}


@kopf.index(RAY_GROUP, RAY_VERSION, RAYCLUSTER_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def ray_children_index(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[JobKey, dict] | None:
    """Each job's RayCluster (its own, or its RayJob's), status included."""
    job = labels.get(JOB_LABEL)
    return {(namespace, job): _trimmed(body, ("suspend",))} if job else None


@kopf.index(RAY_GROUP, RAY_VERSION, RAYJOB_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def rayjob_children_index(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[JobKey, dict] | None:
    """Each job's RayJob, status included."""
    job = labels.get(JOB_LABEL)
    return {(namespace, job): _trimmed(body, ("suspend", "submissionMode"))} if job else None


@kopf.index(RAY_GROUP, RAY_VERSION, RAYCLUSTER_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def raycluster_nodes_index(
    namespace: str, labels: kopf.Labels, annotations: kopf.Annotations, **_: Any
) -> dict[JobKey, Holding] | None:
    """The nodes each job's RayCluster is pinned to, and the GPUs it claims on DRA nodes: what admitted jobs hold
    (restart-safe)."""
    job, nodes = labels.get(JOB_LABEL), annotations.get(NODES_ANNOTATION)
    if job is None or nodes is None:
        return None
    gpus = parse_devices_annotation(annotations.get(GPUS_ANNOTATION, ""))
    return {(namespace, job): Holding(frozenset(n for n in nodes.split(",") if n and n not in gpus), gpus)}
