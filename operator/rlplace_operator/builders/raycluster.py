"""The job's KubeRay RayCluster (`ray.io/v1`): a GPU-blind head and one worker pod per planned node.

Each worker pod is pinned to its node, requests the node's whole unit count (so GPU numbers inside the
container equal the plan's local ranks), and declares Ray resources that let the launcher target node rank i
and hold GPU j exclusively.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubernetes.utils.quantity import parse_quantity

from placement_core import contract
from rlplace_operator.builders import framework
from rlplace_operator.builders.podtemplate import (
    apply_pod_options,
    effective_head,
    effective_worker,
    wire,
    with_volume,
)
from rlplace_operator.models import RLJobSpec, Toleration
from rlplace_operator.names import (
    JOB_LABEL,
    NODES_ANNOTATION,
    RAY_GROUP,
    RAY_VERSION,
    child_labels,
    placement_configmap_name,
    raycluster_name,
    worker_group_name,
)
from rlplace_operator.taints import Taint, untolerated

#: The head's volume with the plan (spec.pods volumes cannot start with `rlplace-`).
PLAN_VOLUME = "rlplace-plan"
#: spec.checkpoint's volume in every Ray pod (under rlplace's name, so it never collides with spec.pods volumes).
CHECKPOINT_VOLUME = "rlplace-checkpoint"


@dataclass(frozen=True)
class WorkerNode:
    """One node of the plan: where a worker pod goes and what it requests."""

    rank: int
    """Node rank in the job's cluster (the plan's cluster_node_rank)."""
    name: str
    """Kubernetes node name."""
    gpus: int
    """GPUs on the node (Ray's num-gpus)."""
    requests: Mapping[str, int] = field(default_factory=dict)
    """Extended resources requested, all of the node's units (nvidia.com/gpu, robot resources)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """NodeGroup variables for workers on this node."""
    groups: tuple[str, ...] = ()
    """The job's NodeGroups the node belongs to (for spec.pods.workerNodeGroups)."""
    taints: tuple[Taint, ...] = ()
    """The node's taints (the head goes to a node it tolerates)."""
    processes: int = 0
    """The plan's processes on the node: the Ray worker processes its raylet starts at once (0: Ray's default)."""
    held_gpus: tuple[int, ...] = ()
    """The node's GPUs the plan's processes hold (a framework that lets Ray pick GPU ids gets only these)."""


def pod_security_context() -> dict:
    """The pod-level half of the `restricted` Pod Security Standard, on every pod rlplace makes (Ray head,
    workers, the RayJob's submitter): a non-root user and the container runtime's default seccomp profile.

    The user is the image's own: it must be numeric and not 0 (the kubelet refuses to start the container
    otherwise), as in the stock Ray images (uid 1000) and e2e/images/ray.Containerfile. Forcing a uid here would
    run other images as a user that owns nothing in them (HOME unwritable, ...)."""
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict:
    """The container-level half of the `restricted` standard: no privilege escalation, no capabilities.
    KubeRay copies it to the init container it adds to worker pods."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _env(values: Mapping[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _resources(cpu: str, memory: str, extended: Mapping[str, int] | None = None) -> dict:
    # Limits alone: Kubernetes sets requests equal to them, and the manifest stays small at 1,000 nodes.
    return {"limits": {"cpu": cpu, "memory": memory, **{k: str(v) for k, v in (extended or {}).items()}}}


def worker_start_params(cpu_limit: str, processes: int, extra_cpus: int = 0) -> dict[str, str]:
    """`num-cpus` of at least the plan's processes on the node, when the pod's CPU limit (Ray's count
    otherwise) is lower: the raylet prestarts as many Python worker processes as it counts CPUs when the pod
    starts, so the driver's actors find their processes already started instead of starting them one after
    another once the job runs. The launcher's actors ask for no CPU, so the count places nothing of rlplace's.

    A framework job's actors do ask Ray for a CPU each to be scheduled, and the framework starts actors of its
    own: its pods (the head too, with no processes of the plan) declare `extra_cpus` more
    (builders/framework.extra_ray_cpus)."""
    cpus = math.ceil(parse_quantity(cpu_limit))
    wanted = max(cpus, processes) + extra_cpus
    return {"num-cpus": str(wanted)} if wanted > cpus else {}


def startup_concurrency_env(processes: int) -> list[dict]:
    """Let the raylet start every process the plan puts on its node at once. Ray starts at most as many worker
    processes at a time as the node has CPUs in Ray's count, which is the pod's CPU limit rounded up: a worker
    pod of 500m CPU starts its processes one by one (12 collocated processes took 28 s on the local cluster),
    while the launcher starts them side by side."""
    return [{"name": "RAY_worker_maximum_startup_concurrency", "value": str(processes)}] if processes > 1 else []


def restart_env(spec: RLJobSpec, attempt: int) -> list[dict]:
    """The resume contract (placement_core.contract, docs/restarts.md): the attempt the pods run, and where the
    checkpoint volume is mounted when the job has one."""
    env = [{"name": contract.ATTEMPT_ENV, "value": str(attempt)}]
    if spec.checkpoint is not None:
        env.append({"name": contract.CHECKPOINT_DIR_ENV, "value": spec.checkpoint.mount_path})
    return env


def with_checkpoint(template: dict, spec: RLJobSpec, container: str) -> dict:
    """`template` with spec.checkpoint's volume mounted at its path in `container` (unchanged without one)."""
    if spec.checkpoint is None:
        return template
    volume = {**wire(spec.checkpoint.volume), "name": CHECKPOINT_VOLUME}
    return with_volume(
        template, volume, container, {"name": CHECKPOINT_VOLUME, "mountPath": spec.checkpoint.mount_path}
    )


def on_nodes(names: Sequence[str]) -> dict:
    """A pod affinity that requires one of the named nodes (by name, so node labels cannot widen it). The API
    allows one value per metadata.name field selector, so each node is its own term (terms are ORed)."""
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]} for name in names]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def build_worker_group(job: str, spec: RLJobSpec, node: WorkerNode, attempt: int = 1) -> dict:
    ray_gpus = framework.ray_gpus(spec, node.gpus, node.held_gpus)
    container = {
        "name": "ray-worker",
        "image": spec.ray.worker_image or spec.ray.image,
        "securityContext": container_security_context(),
        "resources": _resources(spec.ray.worker_resources.cpu, spec.ray.worker_resources.memory, node.requests),
        "env": [
            *_env(node.env),
            *framework.worker_env(spec, node.rank, node.gpus, node.held_gpus),
            *startup_concurrency_env(node.processes),
            {"name": contract.NODE_RANK_ENV, "value": str(node.rank)},
            # The node the pod really runs on, for the launcher's binding check (downward API).
            {"name": contract.KUBE_NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            *restart_env(spec, attempt),
        ],
    }
    # The job's labels find its worker pods whether KubeRay names the cluster after the job or its RayJob.
    template = {
        "metadata": {"labels": {JOB_LABEL: job}},
        "spec": {
            "affinity": on_nodes([node.name]),
            "securityContext": pod_security_context(),
            "containers": [container],
        },
    }
    options = effective_worker(spec, node.groups)
    return {
        "groupName": worker_group_name(node.rank),
        "replicas": 1,
        "minReplicas": 1,
        "rayStartParams": {
            **contract.ray_start_params(node.rank, ray_gpus),
            **worker_start_params(
                spec.ray.worker_resources.cpu, node.processes, framework.extra_ray_cpus(spec, ray_gpus)
            ),
        },
        # KubeRay (>= 1.5) takes Ray node labels from the group's own field, not from rayStartParams.
        "labels": contract.node_labels(node.rank),
        "template": apply_pod_options(
            framework.with_probe(with_checkpoint(template, spec, "ray-worker"), spec, job, "ray-worker"),
            options,
            "ray-worker",
            spec.ray.service_account_name,
        ),
    }


#: The head may run on any of the job's first nodes (in rank order): enough choice for its CPU and memory, and
#: a RayCluster of a thousand nodes does not carry a thousand affinity terms for it.
HEAD_NODE_CHOICES = 16


def head_nodes(nodes: Sequence[WorkerNode], tolerations: Sequence[Toleration] = ()) -> list[str]:
    """The nodes the head (and the RayJob's submitter) may run on: the job's first nodes whose taints its
    tolerations allow (all of the first ones when none does, so the pod waits visibly for a node)."""
    first = nodes[:HEAD_NODE_CHOICES]
    allowed = [node.name for node in first if untolerated(tolerations, node.taints) is None]
    return allowed or [node.name for node in first]


def build_head_group(job: str, spec: RLJobSpec, nodes: Sequence[WorkerNode], attempt: int = 1) -> dict:
    """The head, on one of the job's own nodes (`head_nodes`): it needs no GPU, and the job's nodes are the
    ones known to run its image (a cluster may also have nodes that cannot, such as virtual ones)."""
    env = {"NVIDIA_VISIBLE_DEVICES": "void", contract.JOB_ENV: job, contract.PLAN_DIR_ENV: contract.PLAN_MOUNT_DIR}
    options = effective_head(spec)
    template = {
        "metadata": {"labels": child_labels(job)},
        "spec": {
            "affinity": on_nodes(head_nodes(nodes, options.tolerations)),
            "securityContext": pod_security_context(),
            "containers": [
                {
                    "name": "ray-head",
                    "image": spec.ray.image,
                    "securityContext": container_security_context(),
                    "resources": _resources(spec.ray.head_resources.cpu, spec.ray.head_resources.memory),
                    "env": [*_env(env), *restart_env(spec, attempt), *framework.head_env(spec, len(nodes))],
                    "volumeMounts": [{"name": PLAN_VOLUME, "mountPath": contract.PLAN_MOUNT_DIR, "readOnly": True}],
                }
            ],
            "volumes": [{"name": PLAN_VOLUME, "configMap": {"name": placement_configmap_name(job)}}],
        },
    }
    return {
        "rayStartParams": {
            "dashboard-host": "0.0.0.0",
            "num-gpus": "0",
            **worker_start_params(spec.ray.head_resources.cpu, 0, framework.extra_ray_cpus(spec, 0)),
        },
        "template": apply_pod_options(
            framework.with_probe(with_checkpoint(template, spec, "ray-head"), spec, job, "ray-head"),
            options,
            "ray-head",
            spec.ray.service_account_name,
        ),
    }


def build_raycluster_spec(job: str, spec: RLJobSpec, nodes: Sequence[WorkerNode], attempt: int = 1) -> dict:
    """RayCluster.spec: also the rayClusterSpec of the job's RayJob when it has an entrypoint (`attempt`: the
    job's attempt it runs, 1 but for a restart's)."""
    return {
        "rayVersion": spec.ray.ray_version,
        "headGroupSpec": build_head_group(job, spec, nodes, attempt),
        "workerGroupSpecs": [build_worker_group(job, spec, node, attempt) for node in nodes],
    }


def build_raycluster(job: str, spec: RLJobSpec, nodes: Sequence[WorkerNode]) -> dict:
    """The RayCluster for a job whose plan uses `nodes` (in node-rank order)."""
    return {
        "apiVersion": f"{RAY_GROUP}/{RAY_VERSION}",
        "kind": "RayCluster",
        "metadata": {
            "name": raycluster_name(job),
            "labels": child_labels(job),
            "annotations": {NODES_ANNOTATION: ",".join(node.name for node in nodes)},
        },
        "spec": build_raycluster_spec(job, spec, nodes),
    }
