"""The job's KubeRay RayCluster (`ray.io/v1`): a GPU-blind head and one worker pod per planned node.

The worker pods of nodes with one shape (in practice one NodeGroup's) are one KubeRay worker group, so the
RayCluster grows with the job's NodeGroups, not its nodes: the group's pods may run on its planned nodes only,
one per node, each requesting the node's whole unit count (so GPU numbers inside the container equal the plan's
local ranks). Before Ray starts, each pod reads its node rank from the job's ConfigMap by the node it was
scheduled to, and declares the Ray label and resources that let the launcher target node rank i and hold GPU j
exclusively (placement_core.contract.worker_start_command).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from placement_core import contract
from rlplace_operator.api.names import (
    GPUS_ANNOTATION,
    HOSTNAME_LABEL,
    JOB_LABEL,
    KUBERAY_NODE_TYPE_LABEL,
    KUBERAY_OVERWRITE_COMMAND,
    NODES_ANNOTATION,
    RAY_GROUP,
    RAY_VERSION,
    WORKER_CONTAINER,
    child_labels,
    placement_configmap_name,
    raycluster_name,
    worker_group_name,
)
from rlplace_operator.api.podspec import Toleration
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.claims import with_claim
from rlplace_operator.builders.podtemplate import apply_pod_options, wire, with_probe, with_volume
from rlplace_operator.cluster.dra import devices_annotation
from rlplace_operator.cluster.taints import untolerated
from rlplace_operator.frameworks import framework_of
from rlplace_operator.planning.plan import WorkerNode

#: The head's volume with the plan, the workers' with the node ranks (spec.pods volumes cannot start with
#: `rlplace-`).
PLAN_VOLUME = "rlplace-plan"
NODE_RANKS_VOLUME = "rlplace-node-ranks"

#: spec.checkpoint's volume in every Ray pod (under rlplace's name, so it never collides with spec.pods volumes).
CHECKPOINT_VOLUME = "rlplace-checkpoint"


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
    (Framework.extra_ray_cpus)."""
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


def cluster_spec_of(child: dict) -> dict:
    """The RayCluster spec inside a job's child: a RayCluster's own spec, or a RayJob's rayClusterSpec."""
    spec = child["spec"]
    return spec["rayClusterSpec"] if child.get("kind") == "RayJob" else spec


def required_node_affinity(terms: Sequence[dict]) -> dict:
    """A pod affinity that requires a node matching one of `terms` (node selector terms, ORed)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def on_nodes(names: Sequence[str]) -> dict:
    """A pod affinity that requires one of the named nodes (by name, so node labels cannot widen it). The API
    allows one value per metadata.name field selector, so each node is its own term (terms are ORed)."""
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]} for name in names]
    return required_node_affinity(terms)


def on_hosts(nodes: Sequence[WorkerNode]) -> dict:
    """A pod affinity that requires one of `nodes`: by their hostname label in one term (one value each, so a
    group of a thousand nodes carries a thousand names and nothing else per node), by name for a node without
    the label."""
    named = [node.hostname for node in nodes if node.hostname]
    terms = [{"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": named}]}] if named else []
    terms += [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}
        for node in nodes
        if not node.hostname
    ]
    return required_node_affinity(terms)


def one_worker_per_node(job: str) -> dict:
    """No two worker pods of the job on one node, for a group of CPU-only nodes (its pods request no unit that
    would keep them apart)."""
    selector = {"matchLabels": {JOB_LABEL: job, KUBERAY_NODE_TYPE_LABEL: "worker"}}
    term = {"labelSelector": selector, "topologyKey": HOSTNAME_LABEL}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def _shape(spec: RLJobSpec, node: WorkerNode) -> tuple:
    """What a worker pod's template depends on: nodes with the same shape share one worker group. A pod that
    claims exactly its GPUs (DRA) has its own claim template, so its own group."""
    return (
        node.groups,
        node.gpus,
        tuple(sorted(node.requests.items())),
        tuple(sorted(node.env.items())),
        framework_of(spec).shown_gpus(node.gpus, node.held_gpus),
        None if node.pin is None else (node.name, node.pin.template),
    )


def worker_shapes(spec: RLJobSpec, nodes: Sequence[WorkerNode]) -> list[list[WorkerNode]]:
    """The job's nodes by pod shape (in practice by NodeGroup), each in rank order, in the order of their
    first node."""
    shapes: dict[tuple, list[WorkerNode]] = {}
    for node in nodes:
        shapes.setdefault(_shape(spec, node), []).append(node)
    return list(shapes.values())


def build_worker_group(job: str, spec: RLJobSpec, name: str, nodes: Sequence[WorkerNode], attempt: int = 1) -> dict:
    """One KubeRay worker group for `nodes` (one shape): a pod per node, pinned to them as a set, each pod
    learning its node rank from its node before Ray starts (contract.worker_start_command), so the group holds
    nothing per node but the node's name."""
    first = nodes[0]
    fw = framework_of(spec)
    pod_gpus = first.pod_gpus
    ray_gpus = fw.ray_gpus(first.gpus, first.held_gpus) if pod_gpus is None else len(pod_gpus)
    processes = max(node.processes for node in nodes)
    container = {
        "name": WORKER_CONTAINER,
        "image": spec.ray.worker_image or spec.ray.image,
        "securityContext": container_security_context(),
        "resources": _resources(spec.ray.worker_resources.cpu, spec.ray.worker_resources.memory, first.requests),
        "command": ["/bin/bash", "-c", "--"],
        "args": [
            contract.worker_start_command(
                ray_gpus, fw.node_rank_exports(), gpus=None if pod_gpus is None else sorted(pod_gpus)
            )
        ],
        "env": [
            *_env(first.env),
            *fw.worker_env(first.gpus, first.held_gpus),
            *startup_concurrency_env(processes),
            # The node the pod really runs on: its rank's key, and the launcher's binding check (downward API).
            {"name": contract.KUBE_NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            *restart_env(spec, attempt),
        ],
    }
    # The job's labels find its worker pods whether KubeRay names the cluster after the job or its RayJob.
    template = {
        "metadata": {"labels": {JOB_LABEL: job}, "annotations": {KUBERAY_OVERWRITE_COMMAND: "true"}},
        "spec": {
            # A pod that requests all of a node's units already keeps others off it: only unit-less pods need the
            # scheduler's pod anti-affinity (an inter-pod check per pod and node).
            "affinity": {**on_hosts(nodes), **({} if first.requests or first.pin else one_worker_per_node(job))},
            "securityContext": pod_security_context(),
            "containers": [container],
        },
    }
    # The whole ConfigMap: the node ranks the start command reads, and the plan as it was when the pod started
    # (the launcher reads a replaced rank's plan entry there: the head's copy of a changed ConfigMap lags by up to
    # the kubelet's sync period, and a moved rank runs on another node than the plan the driver started with).
    ranks = {"name": placement_configmap_name(job)}
    mount = {"name": NODE_RANKS_VOLUME, "mountPath": contract.NODE_RANKS_MOUNT_DIR, "readOnly": True}
    template = with_volume(template, {"name": NODE_RANKS_VOLUME, "configMap": ranks}, WORKER_CONTAINER, mount)
    if first.pin is not None and pod_gpus is not None:
        template = with_claim(template, WORKER_CONTAINER, first.pin, pod_gpus)
    return {
        "groupName": name,
        "replicas": len(nodes),
        "minReplicas": len(nodes),
        "maxReplicas": len(nodes),
        "rayStartParams": {
            "num-gpus": str(ray_gpus),
            **worker_start_params(spec.ray.worker_resources.cpu, processes, fw.extra_ray_cpus(ray_gpus)),
        },
        "template": apply_pod_options(
            with_probe(with_checkpoint(template, spec, WORKER_CONTAINER), fw.probe_mount(job), WORKER_CONTAINER),
            spec.pods.for_workers(first.groups),
            WORKER_CONTAINER,
            spec.ray.service_account_name,
        ),
    }


def build_worker_groups(job: str, spec: RLJobSpec, nodes: Sequence[WorkerNode], attempt: int = 1) -> list[dict]:
    """The job's worker groups: one per pod shape (worker_shapes), named after its NodeGroups."""
    groups: list[dict] = []
    for shape in worker_shapes(spec, nodes):
        name = worker_group_name(shape[0].groups, {g["groupName"] for g in groups})
        groups.append(build_worker_group(job, spec, name, shape, attempt))
    return groups


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
    options = spec.pods.for_head()
    fw = framework_of(spec)
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
                    "env": [*_env(env), *restart_env(spec, attempt), *fw.head_env(len(nodes))],
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
            **worker_start_params(spec.ray.head_resources.cpu, 0, fw.extra_ray_cpus(0)),
        },
        "template": apply_pod_options(
            with_probe(with_checkpoint(template, spec, "ray-head"), fw.probe_mount(job), "ray-head"),
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
        "workerGroupSpecs": build_worker_groups(job, spec, nodes, attempt),
    }


def held_annotations(nodes: Sequence[WorkerNode]) -> dict[str, str]:
    """The annotations that say what the job holds, read back by admission after a restart: its nodes, and the
    GPUs its pods claim on DRA nodes."""
    annotations = {NODES_ANNOTATION: ",".join(node.name for node in nodes)}
    pinned = {node.name: node.pin.host_gpus for node in nodes if node.pin is not None}
    if pinned:
        annotations[GPUS_ANNOTATION] = devices_annotation(pinned)
    return annotations


def build_raycluster(job: str, spec: RLJobSpec, nodes: Sequence[WorkerNode]) -> dict:
    """The RayCluster for a job whose plan uses `nodes` (in node-rank order)."""
    return {
        "apiVersion": f"{RAY_GROUP}/{RAY_VERSION}",
        "kind": "RayCluster",
        "metadata": {"name": raycluster_name(job), "labels": child_labels(job), "annotations": held_annotations(nodes)},
        "spec": build_raycluster_spec(job, spec, nodes),
    }


def _required_affinity(group: Mapping[str, Any]) -> dict:
    """A worker group's required node affinity (the dict itself, to change in place; {} when it has none)."""
    affinity = (((group.get("template") or {}).get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    return affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}


def _with_values(terms: Sequence[dict]) -> list[dict]:
    """The node selector terms whose rules all have values: an `In` with no values left matches nothing and is
    refused by the API, so such a term goes."""
    return [
        t for t in terms if all(r.get("values") for r in [*t.get("matchExpressions", []), *t.get("matchFields", [])])
    ]


def _held_nodes(cluster: Mapping[str, Any]) -> list[str]:
    """The nodes a RayCluster's held-nodes annotation names."""
    held = ((cluster.get("metadata") or {}).get("annotations") or {}).get(NODES_ANNOTATION, "")
    return [n for n in held.split(",") if n]


def moved_worker(cluster: Mapping[str, Any], node_from: str, node_to: str, host_from: str, host_to: str) -> dict:
    """The merge patch that moves the RayCluster's worker pod of `node_from` to `node_to` (Replace ranks of a lost
    node: docs/replace.md): the worker group that may run on `node_from` may run on `node_to` instead (by hostname
    label as `on_hosts` pins nodes, by name for a node without one; `host_*` empty: no label) and the held-nodes
    annotation says `node_to`. KubeRay makes the group's next pod from the new template; running pods stay."""
    groups = copy.deepcopy((cluster.get("spec") or {}).get("workerGroupSpecs") or [])
    for group in groups:
        required = _required_affinity(group)
        terms = required.get("nodeSelectorTerms") or []
        by_host = [r for t in terms for r in t.get("matchExpressions") or [] if r.get("key") == HOSTNAME_LABEL]
        by_name = [t for t in terms if any(node_from in r.get("values", ()) for r in t.get("matchFields") or [])]
        held = any(host_from and host_from in r.get("values", ()) for r in by_host) or bool(by_name)
        if not held:
            continue
        for rule in by_host:
            rule["values"] = [v for v in rule.get("values", ()) if v != host_from]
        terms = [t for t in terms if t not in by_name]
        if host_to and by_host:
            by_host[0]["values"].append(host_to)
        elif host_to:
            terms.append({"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [host_to]}]})
        else:
            terms.append({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_to]}]})
        required["nodeSelectorTerms"] = _with_values(terms)
    nodes = ",".join(node_to if n == node_from else n for n in _held_nodes(cluster))
    return {"metadata": {"annotations": {NODES_ANNOTATION: nodes}}, "spec": {"workerGroupSpecs": groups}}


def resized_workers(child: Mapping[str, Any]) -> dict:
    """The merge patch that gives a running job's RayCluster the worker groups and held nodes of `child`, the job's
    RayJob as built for its grown plan (docs/elastic.md): KubeRay makes the pods of the nodes added. Running pods
    stay as they are."""
    annotations = (child.get("metadata") or {}).get("annotations") or {}
    held = {key: annotations[key] for key in (NODES_ANNOTATION, GPUS_ANNOTATION) if key in annotations}
    return {
        "metadata": {"annotations": held},
        "spec": {"workerGroupSpecs": copy.deepcopy(cluster_spec_of(dict(child))["workerGroupSpecs"])},
    }


def dropped_workers(cluster: Mapping[str, Any], drops: Mapping[str, tuple[str, str]]) -> dict:
    """The merge patch that takes worker pods out of a running job's RayCluster once the driver stopped their ranks
    (a shrink, docs/elastic.md): `drops` is pod -> (its worker group, its node). Each group runs that many fewer
    replicas, no longer on those nodes, and names the pods in `scaleStrategy.workersToDelete`, so that KubeRay
    deletes exactly them (with fewer replicas alone it deletes pods of its own choosing, the ones kept included);
    the held-nodes annotation drops the nodes (a repeated drop, its nodes no longer held, changes no count). A node's
    hostname label is taken to be its name (KubeRay's pods
    name their node; a node whose label differs keeps a value in the affinity that no pod is made for)."""
    groups = copy.deepcopy((cluster.get("spec") or {}).get("workerGroupSpecs") or [])
    held = set(_held_nodes(cluster))
    for group in groups:
        gone = {pod: node for pod, (name, node) in drops.items() if name == group.get("groupName")}
        if not gone:
            continue
        # Only nodes the cluster still holds lower the count: the same drop applied twice (a pass that saw the pod
        # before KubeRay deleted it) must not take a second, kept pod with it.
        count = int(group.get("replicas") or 0) - len({node for node in gone.values() if node in held})
        group["replicas"] = max(count, 0)
        group["minReplicas"] = min(int(group.get("minReplicas") or 0), group["replicas"])
        group["scaleStrategy"] = {"workersToDelete": sorted(gone)}
        required = _required_affinity(group)
        for term in required.get("nodeSelectorTerms") or []:
            for rule in [*term.get("matchExpressions", []), *term.get("matchFields", [])]:
                rule["values"] = [v for v in rule.get("values", ()) if v not in gone.values()]
        required["nodeSelectorTerms"] = _with_values(required.get("nodeSelectorTerms") or [])
    dropped = {node for _, node in drops.values()}
    nodes = ",".join(n for n in _held_nodes(cluster) if n not in dropped)
    return {"metadata": {"annotations": {NODES_ANNOTATION: nodes}}, "spec": {"workerGroupSpecs": groups}}
