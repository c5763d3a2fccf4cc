"""Recorded snapshots for the reconcile's tests: an RLJob's status, its RayCluster or RayJob, its pods and the
Warning events around it, as API JSON the way the operator reads them (small builders, so each case says only what
differs)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import yaml

from rlplace_operator.api.nodegroup import NodeGroupSpec
from rlplace_operator.cluster.dra import node_slice
from rlplace_operator.cluster.selection import NodeInfo, nodegroup_wire_status, with_slices
from rlplace_operator.cluster.snapshot import Snapshot
from rlplace_operator.reconcile.world import Job

NOW = dt.datetime(2026, 11, 24, 1, 0, 0, tzinfo=dt.UTC)
KEY = ("ns", "train")
ADMITTED = "2026-11-24T00:59:40Z"  # 20 s before NOW


def condition(status: dict, type_: str) -> dict | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)


def live_status(phase: str = "Provisioning", **fields: object) -> dict:
    return {
        "phase": phase,
        "observedGeneration": 1,
        "rayCluster": "train",
        "nodes": 1,
        "placement": {
            "mode": "collocated",
            "components": [{"name": "actor", "processes": 8, "gpus": 8, "nodes": ["kwok-0"]}],
        },
        "conditions": [
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": ADMITTED},
            {
                "type": "RayClusterReady",
                "status": "False",
                "reason": "RayClusterProvisioning",
                "message": "waiting for the Ray pods",
                "lastTransitionTime": ADMITTED,
            },
        ],
        **fields,
    }


def job(status: dict, entrypoint: str | None = None, run: dict | None = None) -> Job:
    spec: dict = {"nodeGroups": ["gpu"]}
    if entrypoint:
        spec["entrypoint"] = entrypoint
    if run:
        spec["run"] = run
    return Job("ns", "train", "uid-1", 1, spec, status, "100")


def raycluster(ready: bool = False) -> dict:
    owner = [{"uid": "uid-1", "kind": "RLJob", "name": "train"}]
    return {
        "kind": "RayCluster",
        "metadata": {"name": "train", "ownerReferences": owner},
        "status": {"state": "ready"} if ready else {},
    }


def pod(name: str, kind: str = "worker", node: str | None = "kwok-0", **status: object) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {"rlplace.io/job": "train", "ray.io/node-type": kind, "ray.io/cluster": "train"},
            "creationTimestamp": ADMITTED,
        },
        "spec": {"nodeName": node, "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.60.0"}]},
        "status": {"phase": "Pending", **status},
    }


def ready(body: dict, cluster: str = "train") -> dict:
    """`body` (a pod of `pod()`) Running and Ready, in the Ray cluster named `cluster`."""
    body["metadata"]["labels"]["ray.io/cluster"] = cluster
    body["status"] = {
        **body["status"],
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True", "reason": ""},
        ],
    }
    return body


def ray_pods(cluster: str = "train", nodes: tuple[str, ...] = ("kwok-0",)) -> list[dict]:
    """The job's head and a worker on each planned node, all Running and Ready (what a running job has)."""
    head = ready(pod(f"{cluster}-head-a1b2c", kind="head"), cluster)
    return [head, *(ready(pod(f"{cluster}-gpu-worker-{i}", node=node), cluster) for i, node in enumerate(nodes))]


def event(
    kind: str, name: str, reason: str, message: str, when: str = "2026-11-24T00:59:50Z", first: str | None = None
) -> dict:
    return {
        "metadata": {"name": f"{name}.1", "namespace": "ns"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "ns"},
        "type": "Warning",
        "reason": reason,
        "message": message,
        "firstTimestamp": first or when,
        "lastTimestamp": when,
        "count": 3,
    }


def rayjob(deployment: str, job_status: str, started: str = "2026-11-24T00:59:45Z", **status: object) -> dict:
    owner = [{"uid": "uid-1", "kind": "RLJob", "name": "train"}]
    return {
        "kind": "RayJob",
        "metadata": {"name": "train", "ownerReferences": owner},
        "spec": {},
        "status": {
            "jobDeploymentStatus": deployment,
            "jobStatus": job_status,
            "rayClusterName": "train-abcde",
            "rayJobInfo": {"startTime": started},
            **status,
        },
    }


def running_driver_status(**fields: object) -> dict:
    return live_status(
        "Running",
        rayJob="train",
        rayCluster="train-abcde",
        driverStartTime="2026-11-24T00:59:45Z",
        attempts=1,
        binding=[{"name": "actor", "verified": 8, "processes": 8}],
        **fields,
    ) | {
        "conditions": [
            {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": ADMITTED},
            {
                "type": "BindingVerified",
                "status": "True",
                "reason": "Verified",
                "message": "verified actor 8/8",
                "lastTransitionTime": "2026-11-24T00:59:50Z",
            },
        ]
    }


# -- the local cluster, recorded: what a provision pass reads -------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
#: The example driver's ResourceSlice of the local cluster's DRA node (e2e/cluster/start-nodes.sh starts it).
DRA_DRIVER = "gpu.example.com"
DRA_NODE = "real-dra-0"


def manifests(path: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((REPO / path).read_text()) if d]


def dra_node(name: str = DRA_NODE, gpus: int = 8) -> tuple[dict, dict]:
    """A real node whose GPUs a DRA driver publishes, and its ResourceSlice (as the example driver writes it)."""
    node = {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "rlplace.io/real-gpu-allocation": "dra"},
        },
        "status": {
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    devices = [
        {"name": f"gpu-{i}", "attributes": {"index": {"int": i}, "uuid": {"string": f"gpu-{name}-{i}"}}}
        for i in range(gpus)
    ]
    pool = {"name": name, "generation": 1, "resourceSliceCount": 1}
    return node, {"spec": {"driver": DRA_DRIVER, "nodeName": name, "pool": pool, "devices": devices}}


def local_nodes() -> list[dict]:
    """The local e2e cluster's kwok nodes (e2e/nodes.yaml), Ready as kwok makes them."""
    nodes = manifests("e2e/nodes.yaml")
    for node in nodes:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return nodes


def local_groups() -> dict[str, dict]:
    """The example NodeGroups of the local cluster (examples/nodegroups-local.yaml) and its DRA group."""
    groups = {d["metadata"]["name"]: d["spec"] for d in manifests("examples/nodegroups-local.yaml")}
    shared = next(d for d in manifests("examples/rljob-shared-node.yaml") if d["kind"] == "NodeGroup")
    groups[shared["metadata"]["name"]] = shared["spec"]
    return groups


def cluster_snapshot(
    nodes: list[dict] | None = None,
    groups: dict[str, dict] | None = None,
    slices: list[dict] = (),  # type: ignore[assignment]
    rljobs: dict | None = None,
    holdings: dict | None = None,
    pods: dict | None = None,
    device_classes: set[str] | None = None,
    kueue_topologies: dict[str, dict] | None = None,
) -> Snapshot:
    """A Snapshot as the operator's indexes hold it: each NodeGroup's status computed by the real controller's
    function (cluster.selection.nodegroup_wire_status) from the nodes, the DeviceClasses (by default the local
    cluster's: the chart makes gpu.example.com) and the Kueue Topologies by name (none by default)."""
    nodes = local_nodes() if nodes is None else nodes
    groups = local_groups() if groups is None else groups
    index = {n["metadata"]["name"]: [NodeInfo.from_body(n)] for n in nodes}
    by_node: dict[str, list] = {}
    for body in slices:
        found = node_slice(body)
        if found is not None:
            by_node.setdefault(found[0], []).append(found[1])
    index = with_slices(index, by_node)
    infos = [values[0] for values in index.values()]
    nodegroups = {}
    for name, spec in groups.items():
        classes = {DRA_DRIVER} if device_classes is None else device_classes
        parsed = NodeGroupSpec.model_validate(spec)
        named = parsed.topology.kueue_topology if parsed.topology is not None else None
        status = nodegroup_wire_status(parsed, infos, 1, classes, {}, (kueue_topologies or {}).get(named or ""))
        nodegroups[name] = [(spec, status)]
    return Snapshot(index, nodegroups, rljobs or {}, holdings or {}, pods or {})


def rljob_entry(job: Job) -> dict:
    """The job as the RLJob index holds it (controllers/indexes.py: rljob_index)."""
    return {
        "uid": job.uid,
        "generation": job.generation,
        "resourceVersion": job.resource_version,
        "annotations": dict(job.annotations),
        "labels": dict(job.labels),
        "spec": dict(job.spec),
        "nodeGroups": list(job.spec.get("nodeGroups") or []),
        "status": dict(job.status),
        "priority": job.spec.get("priority", 0),
        "created": job.created,
    }


def new_job(
    name: str, spec: dict, labels: dict | None = None, created: str = "2026-11-24T00:59:00Z", **fields: object
) -> Job:
    """A job just created (no status yet), read fresh from the API."""
    return Job(
        "ns",
        name,
        f"uid-{name}",
        1,
        spec,
        dict(fields.pop("status", {}) or {}),
        "1",
        created,
        labels=labels or {},
        fresh=True,
        **fields,
    )  # type: ignore[arg-type]


def example_spec(path: str, kind: str = "RLJob") -> dict:
    return next(d for d in manifests(path) if d["kind"] == kind)["spec"]
