"""What Kueue wrote in a Workload's status, read into the facts rlplace acts on, and the status rlplace writes back
where no Kueue job reconciler does (the package's docstring says why). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlplace_operator.api import conditions as cond
from rlplace_operator.api.names import HOSTNAME_LABEL

QUOTA_RESERVED = "QuotaReserved"
WORKLOAD_ADMITTED = "Admitted"
EVICTED = "Evicted"
PODS_READY = "PodsReady"
FINISHED = "Finished"
REQUEUED = "Requeued"
#: Evicted's reason when someone set the Workload's spec.active to false: the job is suspended, not requeued.
DEACTIVATED = "Deactivated"
#: The reason of Finished on a slice Kueue replaced by the one that grew it.
SLICE_REPLACED = "WorkloadSliceReplaced"


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


def condition_of(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def _true(status: Mapping[str, Any], type_: str) -> bool:
    found = condition_of(status, type_)
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
    unhealthy_nodes: tuple[str, ...] = ()
    """Granted nodes that failed, for which Kueue's topology-aware scheduling looks for a replacement (its
    status.unhealthyNodes: with TASFailedNodeReplacementFailFast off it keeps looking until one is free)."""

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> WorkloadState:
        status = body.get("status") or {}
        evicted = condition_of(status, EVICTED) or {}
        reserved = condition_of(status, QUOTA_RESERVED) or {}
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
            admitted=_true(status, WORKLOAD_ADMITTED),
            evicted=evicted.get("status") == "True",
            evicted_reason=str(evicted.get("reason") or ""),
            evicted_message=str(evicted.get("message") or ""),
            pods_ready=_true(status, PODS_READY),
            finished=_true(status, FINISHED),
            pending_message=str(reserved.get("message") or "") if reserved.get("status") != "True" else "",
            cluster_queue=admission.get("clusterQueue"),
            grants=grants,
            unhealthy_nodes=tuple(sorted(str(n["name"]) for n in status.get("unhealthyNodes") or [] if n.get("name"))),
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
    conditions = cond.set_condition(conditions, WORKLOAD_ADMITTED, False, "NoReservation", gone, at=now)
    conditions = cond.set_condition(conditions, PODS_READY, False, "WaitForStart", "the job's pods are gone", at=now)
    if requeue:
        conditions = cond.set_condition(conditions, REQUEUED, True, "Requeued", "rlplace queues the job again", at=now)
    result = {k: v for k, v in status.items() if k != "admission"}
    result["conditions"] = conditions
    return result
