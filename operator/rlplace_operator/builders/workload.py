"""The Kueue Workload rlplace makes for a job that names a LocalQueue (docs/kueue.md), and what its Ray children
carry so that no Kueue integration takes them for jobs of their own. What the Workload asks for (its PodSets) and
what to do with what Kueue answers is decided in admission/kueue/."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlplace_operator.api.names import (
    ELASTIC_JOB_ANNOTATION,
    POD_SETS_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    SLICE_REPLACEMENT_ANNOTATION,
    UNCONSTRAINED_TOPOLOGY_ANNOTATION,
    WORKER_CONTAINER,
    WORKLOAD_GROUP,
    WORKLOAD_VERSION,
    child_labels,
)
from rlplace_operator.api.nodegroup import LabelSelector
from rlplace_operator.api.podspec import Toleration
from rlplace_operator.builders.raycluster import cluster_spec_of, required_node_affinity


@dataclass(frozen=True)
class PodSet:
    """What the job needs of one NodeGroup: `count` whole nodes, each running one worker pod."""

    group: str
    count: int
    requests: Mapping[str, str]
    """The worker pod's requests (its CPU, memory and all of a node's units, e.g. nvidia.com/gpu)."""
    selector: LabelSelector
    """The NodeGroup's node selector: Kueue picks the flavor whose nodeLabels match, and TAS only those nodes."""
    tolerations: tuple[Toleration, ...] = ()
    level: str | None = None
    """spec.topology's level: Kueue's topology-aware scheduling puts the PodSet in one domain of it."""
    required: bool = False
    """Whether that level is required (else preferred)."""
    group_name: str | None = None
    """Kueue's PodSet group: the PodSets of one group go under one domain of the level together."""

    def wire(self) -> dict[str, Any]:
        container = {"name": WORKER_CONTAINER, "resources": {"requests": dict(self.requests)}}
        template: dict[str, Any] = {
            "spec": {
                "containers": [container],
                "affinity": required_node_affinity([{"matchExpressions": node_selector_terms(self.selector)}]),
                "tolerations": [t.model_dump(by_alias=True, exclude_none=True) for t in self.tolerations],
                "restartPolicy": "Never",
            }
        }
        # Topology-Aware Scheduling picks the hosts (any of the group's, or those of one domain of the job's level):
        # a flavor without a Topology cannot take such a PodSet, so Kueue says so instead of granting quota without
        # nodes.
        topology: dict[str, Any] = {"unconstrained": True}
        if self.level is not None:
            topology = {"required" if self.required else "preferred": self.level}
            if self.group_name is not None:
                topology["podSetGroupName"] = self.group_name
        return {
            "name": pod_set_name(self.group),
            "count": self.count,
            "template": template,
            "topologyRequest": topology,
        }


def node_selector_terms(selector: LabelSelector) -> list[dict[str, Any]]:
    """A NodeGroup's label selector as node affinity expressions (the same nodes)."""
    terms = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(selector.match_labels.items())]
    for expression in selector.match_expressions:
        term: dict[str, Any] = {"key": expression.key, "operator": str(expression.operator)}
        if expression.values:
            term["values"] = list(expression.values)
        terms.append(term)
    return terms


def pod_set_name(group: str) -> str:
    """A PodSet's name (a DNS label of at most 63 characters) for a NodeGroup's name (up to 253)."""
    if len(group) <= 63 and "." not in group:
        return group
    digest = hashlib.sha256(group.encode()).hexdigest()[:8]
    return f"{group.replace('.', '-')[:54].strip('-')}-{digest}"


def pod_sets_digest(pod_sets: Sequence[PodSet]) -> str:
    """What the PodSets ask for, in 8 hex digits."""
    return hashlib.sha256(json.dumps([p.wire() for p in pod_sets], sort_keys=True).encode()).hexdigest()[:8]


def workload_name(job: str, pod_sets: Sequence[PodSet]) -> str:
    """The Workload of a job's demand: a new demand (a new spec) is a new Workload (PodSets cannot change while
    Kueue holds a reservation for them; an elastic Workload's counts may only go down)."""
    return f"{job[:244]}-{pod_sets_digest(pod_sets)}"


def asked_pod_sets(workload: Mapping[str, Any]) -> str:
    """The digest of the PodSets a Workload of rlplace's asks for now (a shrink lowers its counts in place)."""
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    return annotations.get(POD_SETS_ANNOTATION) or workload["metadata"]["name"][-8:]


def lowered_counts(workload: Mapping[str, Any], pod_sets: Sequence[PodSet]) -> list[dict[str, Any]]:
    """The JSON patch that lowers an admitted elastic Workload's PodSet counts to those of `pod_sets` (the same
    PodSets in the same order, fewer pods: Kueue frees the quota at once) and records what it asks for now."""
    patch: list[dict[str, Any]] = [
        {"op": "test", "path": f"/spec/podSets/{i}/name", "value": p.wire()["name"]} for i, p in enumerate(pod_sets)
    ]
    patch += [{"op": "replace", "path": f"/spec/podSets/{i}/count", "value": p.count} for i, p in enumerate(pod_sets)]
    if not (workload.get("metadata") or {}).get("annotations"):
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    key = POD_SETS_ANNOTATION.replace("~", "~0").replace("/", "~1")
    patch.append({"op": "add", "path": f"/metadata/annotations/{key}", "value": pod_sets_digest(pod_sets)})
    return patch


@dataclass(frozen=True)
class Priority:
    """A WorkloadPriorityClass the job names, and its value (the Workload must carry both)."""

    name: str
    value: int


def build_workload(
    job: str,
    queue: str,
    pod_sets: Sequence[PodSet],
    priority: Priority | None = None,
    elastic: bool = False,
    replaces: str | None = None,
) -> dict[str, Any]:
    """The job's Workload (the caller adopts it: the RLJob owns it, and deleting the job deletes it). `elastic`: a
    Workload whose counts may change while it is admitted; `replaces`: the namespace/name of the admitted slice this
    one grows (Kueue admits the growth only and finishes that one)."""
    spec: dict[str, Any] = {"queueName": queue, "podSets": [p.wire() for p in pod_sets]}
    if priority is not None:
        spec["priorityClassRef"] = {"group": WORKLOAD_GROUP, "kind": "WorkloadPriorityClass", "name": priority.name}
        spec["priority"] = priority.value
    annotations = {POD_SETS_ANNOTATION: pod_sets_digest(pod_sets)}
    if elastic or replaces is not None:
        annotations[ELASTIC_JOB_ANNOTATION] = "true"
    if replaces is not None:
        annotations[SLICE_REPLACEMENT_ANNOTATION] = replaces
    return {
        "apiVersion": f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}",
        "kind": "Workload",
        "metadata": {"name": workload_name(job, pod_sets), "labels": child_labels(job), "annotations": annotations},
        "spec": spec,
    }


def labels_for_children(job_labels: Mapping[str, str]) -> dict[str, str]:
    """The job's labels its Ray children carry when Kueue admitted it: all but its Kueue labels, so no Kueue
    integration takes a child for a job of its own."""
    return {k: v for k, v in job_labels.items() if k not in (QUEUE_LABEL, PRIORITY_CLASS_LABEL)}


def for_workload(child: dict[str, Any]) -> dict[str, Any]:
    """`child` (the RayCluster or RayJob of a job Kueue admitted) with every pod template annotated as counted in
    the job's Workload (Topology-Aware Scheduling then does not subtract them again)."""
    body = copy.deepcopy(child)
    cluster = cluster_spec_of(body)
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster.get("workerGroupSpecs", []))]
    if "submitterPodTemplate" in body["spec"]:
        templates.append(body["spec"]["submitterPodTemplate"])
    for template in templates:
        metadata = template.setdefault("metadata", {})
        metadata.setdefault("annotations", {})[UNCONSTRAINED_TOPOLOGY_ANNOTATION] = "true"
    return body
