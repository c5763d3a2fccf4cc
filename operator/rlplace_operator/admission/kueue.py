"""Kueue admission of an RLJob: the Workload rlplace makes for it, and what Kueue wrote in its status. Pure.

An RLJob labelled `kueue.x-k8s.io/queue-name` is admitted by Kueue, never by rlplace's own queue. rlplace makes
one `kueue.x-k8s.io/v1beta2` Workload for it, owned by the job: one PodSet per NodeGroup the job uses, `count`
whole-node pods each (the worker pod's requests: all of a node's GPUs), so Kueue does quota, flavors,
priorities and preemption, and its Topology-Aware Scheduling (a Topology whose lowest level is
`kubernetes.io/hostname`) picks the nodes. When the Workload is admitted, `topologyAssignment` names the
granted hosts; rlplace plans on exactly those and makes the RayCluster or RayJob with no queue label, so no
Kueue integration manages it.

No Kueue job reconciler owns such a Workload, so rlplace does what one would (Kueue's `jobframework`): it sets
`PodsReady` once every worker pod runs, `Finished` at the end (the quota frees at once), and after an eviction,
once none of the job's pods is left, it releases the reservation (clears `status.admission`, `QuotaReserved`
and `Admitted` False, `Requeued` True), which Kueue waits for before it admits the preemptor (docs/kueue.md).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlplace_operator.api import conditions as cond
from rlplace_operator.api.names import HOSTNAME_LABEL, child_labels
from rlplace_operator.api.nodegroup import LabelSelector
from rlplace_operator.api.podspec import Toleration
from rlplace_operator.builders.raycluster import cluster_spec_of, required_node_affinity

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
WORKLOAD_PLURAL = "workloads"
LOCALQUEUE_PLURAL = "localqueues"
CLUSTERQUEUE_PLURAL = "clusterqueues"
PRIORITY_CLASS_PLURAL = "workloadpriorityclasses"

#: The RLJob label that sends it through Kueue (the LocalQueue in the job's namespace), as on any Kueue job.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The RLJob label naming its WorkloadPriorityClass.
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
#: On rlplace's Ray pods of a Kueue job: TAS counts them inside their Workload, not again as pods outside it.
UNCONSTRAINED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
#: Kueue's limit on a Workload's PodSets: at most this many NodeGroups in a job admitted by Kueue.
MAX_POD_SETS = 18

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PODS_READY = "PodsReady"
FINISHED = "Finished"
REQUEUED = "Requeued"
#: Evicted's reason when someone set the Workload's spec.active to false: the job is suspended, not requeued.
DEACTIVATED = "Deactivated"


def queue_name(labels: Mapping[str, str]) -> str | None:
    """The LocalQueue an RLJob names (None: rlplace's own queue admits it)."""
    return labels.get(QUEUE_LABEL) or None


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

    def wire(self) -> dict[str, Any]:
        container = {"name": "ray-worker", "resources": {"requests": dict(self.requests)}}
        template: dict[str, Any] = {
            "spec": {
                "containers": [container],
                "affinity": required_node_affinity([{"matchExpressions": node_selector_terms(self.selector)}]),
                "tolerations": [t.model_dump(by_alias=True, exclude_none=True) for t in self.tolerations],
                "restartPolicy": "Never",
            }
        }
        # Topology-Aware Scheduling picks the hosts (any of the group's): a flavor without a Topology cannot take
        # such a PodSet, so Kueue says so instead of granting quota without nodes.
        topology = {"unconstrained": True}
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


def workload_name(job: str, pod_sets: Sequence[PodSet]) -> str:
    """The Workload of a job's demand: a new demand (a new spec) is a new Workload (PodSets cannot change while
    Kueue holds a reservation for them)."""
    digest = hashlib.sha256(json.dumps([p.wire() for p in pod_sets], sort_keys=True).encode()).hexdigest()[:8]
    return f"{job[:244]}-{digest}"


@dataclass(frozen=True)
class Priority:
    """A WorkloadPriorityClass the job names, and its value (the Workload must carry both)."""

    name: str
    value: int


def build_workload(
    job: str, queue: str, pod_sets: Sequence[PodSet], priority: Priority | None = None
) -> dict[str, Any]:
    """The job's Workload (the caller adopts it: the RLJob owns it, and deleting the job deletes it)."""
    spec: dict[str, Any] = {"queueName": queue, "podSets": [p.wire() for p in pod_sets]}
    if priority is not None:
        spec["priorityClassRef"] = {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": priority.name}
        spec["priority"] = priority.value
    return {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
        "kind": "Workload",
        "metadata": {"name": workload_name(job, pod_sets), "labels": child_labels(job)},
        "spec": spec,
    }


# -- what Kueue wrote ------------------------------------------------------------------------------------------


class AssignmentError(ValueError):
    """A topologyAssignment rlplace cannot read as hosts (no hostname level: the flavor's Topology)."""


def _at(values: Mapping[str, Any], index: int) -> str:
    if "universal" in values and values["universal"] is not None:
        return str(values["universal"])
    individual = values.get("individual") or {}
    roots = individual.get("roots") or []
    if index >= len(roots):
        raise AssignmentError(f"topologyAssignment lists {len(roots)} values for {index + 1} domains")
    return f"{individual.get('prefix', '')}{roots[index]}{individual.get('suffix', '')}"


def _count_at(counts: Mapping[str, Any], index: int) -> int:
    if counts.get("universal") is not None:
        return int(counts["universal"])
    individual = counts.get("individual") or []
    if index >= len(individual):
        raise AssignmentError(f"topologyAssignment lists {len(individual)} pod counts for {index + 1} domains")
    return int(individual[index])


def assigned_hosts(assignment: Mapping[str, Any]) -> dict[str, int]:
    """Host -> pods, from a PodSet's `topologyAssignment` (Kueue v1beta2: slices of domains whose values and pod
    counts are each `universal` or `individual`, values as prefix + root + suffix; or the older `domains`
    list). Only the hostname level is read."""
    levels = list(assignment.get("levels") or [])
    if HOSTNAME_LABEL not in levels:
        raise AssignmentError(
            f"Kueue assigned topology levels {levels}, not hosts: the flavor's Topology must end with {HOSTNAME_LABEL}"
        )
    level = levels.index(HOSTNAME_LABEL)
    hosts: dict[str, int] = {}
    for domain in assignment.get("domains") or []:  # before v1beta2's slices
        hosts[str(domain["values"][level])] = hosts.get(str(domain["values"][level]), 0) + int(domain["count"])
    for slice_ in assignment.get("slices") or []:
        per_level = slice_.get("valuesPerLevel") or []
        if len(per_level) != len(levels):
            raise AssignmentError(f"topologyAssignment slice has {len(per_level)} value lists for {len(levels)} levels")
        for index in range(int(slice_.get("domainCount") or 0)):
            host = _at(per_level[level], index)
            hosts[host] = hosts.get(host, 0) + _count_at(slice_.get("podCounts") or {}, index)
    return hosts


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def _true(status: Mapping[str, Any], type_: str) -> bool:
    found = _condition(status, type_)
    return found is not None and found.get("status") == "True"


@dataclass(frozen=True)
class Grant:
    """What Kueue granted one PodSet."""

    flavors: Mapping[str, str]
    """Resource -> ResourceFlavor."""
    hosts: Mapping[str, int] | None
    """Host -> pods; None when the flavor has no Topology (quota without nodes)."""


@dataclass(frozen=True)
class WorkloadState:
    """A Workload as Kueue left it: the facts rlplace acts on."""

    name: str
    active: bool
    quota_reserved: bool
    admitted: bool
    evicted: bool
    evicted_reason: str = ""
    evicted_message: str = ""
    pods_ready: bool = False
    finished: bool = False
    pending_message: str = ""
    """Why Kueue has not reserved quota (QuotaReserved's message), e.g. insufficient quota in a flavor."""
    cluster_queue: str | None = None
    grants: Mapping[str, Grant] = field(default_factory=dict)
    """PodSet name -> what was granted (only while quota is reserved)."""

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> WorkloadState:
        status = body.get("status") or {}
        evicted = _condition(status, EVICTED) or {}
        reserved = _condition(status, QUOTA_RESERVED) or {}
        admission = status.get("admission") or {}
        grants = {}
        for assignment in admission.get("podSetAssignments") or []:
            topology = assignment.get("topologyAssignment")
            hosts = assigned_hosts(topology) if topology else None
            grants[assignment["name"]] = Grant(dict(assignment.get("flavors") or {}), hosts)
        return cls(
            name=body["metadata"]["name"],
            active=(body.get("spec") or {}).get("active", True) is not False,
            quota_reserved=_true(status, QUOTA_RESERVED),
            admitted=_true(status, ADMITTED),
            evicted=evicted.get("status") == "True",
            evicted_reason=str(evicted.get("reason") or ""),
            evicted_message=str(evicted.get("message") or ""),
            pods_ready=_true(status, PODS_READY),
            finished=_true(status, FINISHED),
            pending_message=str(reserved.get("message") or "") if reserved.get("status") != "True" else "",
            cluster_queue=admission.get("clusterQueue"),
            grants=grants,
        )

    @property
    def holds_quota(self) -> bool:
        """Kueue still counts the Workload in its ClusterQueue (it keeps it until its owner releases it)."""
        return self.quota_reserved or bool(self.grants)

    def hosts(self) -> dict[str, list[str]]:
        """PodSet name -> the granted hosts (sorted); raises AssignmentError where a flavor has no topology."""
        granted = {}
        for name, grant in self.grants.items():
            if grant.hosts is None:
                flavors = ", ".join(sorted(set(grant.flavors.values()))) or "none"
                raise AssignmentError(
                    f"Kueue granted PodSet {name} quota of flavor {flavors} but no nodes: "
                    "the ResourceFlavor needs a topologyName (docs/kueue.md)"
                )
            granted[name] = sorted(grant.hosts)
        return granted


def with_condition(
    status: Mapping[str, Any], type_: str, ok: bool, reason: str, message: str, now: str | None = None
) -> dict[str, Any]:
    """The Workload's status with one condition set (the rest as Kueue wrote it)."""
    return {**status, "conditions": cond.set_condition(status.get("conditions"), type_, ok, reason, message, at=now)}


def released(status: Mapping[str, Any], requeue: bool, now: str | None = None) -> dict[str, Any]:
    """The status that gives an evicted Workload's quota back, as Kueue's own job reconciler writes it once the
    job's pods are gone: no admission, QuotaReserved and Admitted False, PodsReady False (so the next admission
    is timed again), and Requeued True unless the Workload was deactivated."""
    gone = "the job's pods are gone; its quota is released"
    conditions = cond.set_condition(status.get("conditions"), QUOTA_RESERVED, False, "Pending", gone, at=now)
    conditions = cond.set_condition(conditions, ADMITTED, False, "NoReservation", gone, at=now)
    conditions = cond.set_condition(conditions, PODS_READY, False, "WaitForStart", "the job's pods are gone", at=now)
    if requeue:
        conditions = cond.set_condition(conditions, REQUEUED, True, "Requeued", "rlplace queues the job again", at=now)
    result = {k: v for k, v in status.items() if k != "admission"}
    result["conditions"] = conditions
    return result


def for_kueue(child: dict[str, Any]) -> dict[str, Any]:
    """`child` (the RayCluster or RayJob of a job Kueue admitted) without the job's Kueue labels, so no Kueue
    integration takes it for a job of its own (kopf.adopt copies the RLJob's labels onto it), and with every
    pod template annotated as counted in the job's Workload (TAS then does not subtract them again)."""
    body = copy.deepcopy(child)
    labels = body["metadata"].get("labels") or {}
    for label in (QUEUE_LABEL, PRIORITY_CLASS_LABEL):
        labels.pop(label, None)
    cluster = cluster_spec_of(body)
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster.get("workerGroupSpecs", []))]
    if "submitterPodTemplate" in body["spec"]:
        templates.append(body["spec"]["submitterPodTemplate"])
    for template in templates:
        metadata = template.setdefault("metadata", {})
        metadata.setdefault("annotations", {})[UNCONSTRAINED_TOPOLOGY_ANNOTATION] = "true"
    return body
