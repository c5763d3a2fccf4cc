"""The NodeGroup controller: resolve the selector to nodes in rank order and keep the status in step with the nodes.

Running jobs keep their nodes (reconcile/provision.py). When a NodeGroup no longer holds a node that a running job
uses, the job gets NodeGroupChanged=True and a Warning Event, once. Deleting a NodeGroup that a running job uses
waits (kopf's finalizer stays) until no running job uses it, as Kubernetes protects a PersistentVolumeClaim in use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import GROUP, VERSION
from rlplace_operator.api.names import API_VERSION, NODEGROUP_PLURAL, TOPOLOGY_LEVELS
from rlplace_operator.api.nodegroup import NodeGroupSpec
from rlplace_operator.api.status import is_live
from rlplace_operator.cluster.selection import (
    NodeInfo,
    covering_flavor,
    nodegroup_wire_status,
    selector_matches,
    with_slices,
)
from rlplace_operator.cluster.snapshot import copy_index, indexed
from rlplace_operator.kube import Kube

#: How often a NodeGroup's status is recomputed from the node index (nodes joining, leaving, NotReady).
RESYNC_SECONDS = 2.0
#: How often the deletion of a NodeGroup in use checks again whether its jobs stopped.
IN_USE_RECHECK_SECONDS = 10.0
#: How long Kueue's ResourceFlavors and Topologies are used as read before they are read again (the resync runs every
#: 2 s per group; they change about never, and a change is seen within this).
KUEUE_TOPOLOGY_TTL_SECONDS = 30.0


def _cached(memo: kopf.Memo, key: tuple[str, ...], read: Callable[[], Any]) -> Any:
    cache: dict[tuple[str, ...], tuple[float, Any]] = memo.setdefault("kueue_topologies", {})
    known = cache.get(key)
    now = time.monotonic()
    if known is None or now - known[0] > KUEUE_TOPOLOGY_TTL_SECONDS:
        known = cache[key] = (now, read())
    return known[1]


def kueue_topology(spec: NodeGroupSpec, nodes: Sequence[NodeInfo], memo: kopf.Memo) -> dict | None:
    """The Kueue Topology whose levels the group takes, as read: the one its spec.topology names; when it declares
    nothing, the Topology of the ResourceFlavor whose nodeLabels all its nodes carry (declared once, in Kueue);
    None otherwise (or when Kueue is not installed, or the Topology does not exist)."""
    kube = memo.kube
    if spec.topology is not None:
        name = spec.topology.kueue_topology
        return None if name is None else _cached(memo, ("topology", name), lambda: kube.get_kueue_topology(name))
    flavors = _cached(memo, ("flavors",), kube.list_resource_flavors)
    if not flavors:
        return None  # Kueue is not installed, or has no flavors: nothing to match the nodes against
    matched = [node for node in nodes if selector_matches(spec.node_selector, node.labels)]
    flavor = covering_flavor(flavors, matched)
    if flavor is None:
        return None
    name = flavor["spec"]["topologyName"]
    return _cached(memo, ("topology", name), lambda: kube.get_kueue_topology(name))


def running_jobs_of(group: str, rljob_index: kopf.Index) -> list[tuple[str, str, dict]]:
    """(namespace, name, entry) of each running job (its RayCluster holds nodes) that names `group`."""
    jobs = []
    for key in rljob_index:
        entry = indexed(rljob_index, key)
        if entry is not None and group in entry["nodeGroups"] and is_live(entry["status"]):
            jobs.append((key[0], key[1], entry))
    return jobs


def job_nodes(status: Mapping) -> set[str]:
    """The Kubernetes nodes a job's processes run on, from its status."""
    placement = status.get("placement") or {}
    return {node for component in placement.get("components") or [] for node in component.get("nodes") or []}


def report_to_job(kube: Kube, namespace: str, name: str, entry: dict, reason: str, message: str) -> None:
    """Set NodeGroupChanged=True on a running job with a Warning Event, unless it already says so."""
    current = cond.find(entry["status"].get("conditions"), cond.NODEGROUP_CHANGED)
    if current and current.get("reason") == reason and current.get("message") == cond.short(message):
        return
    conditions = cond.set_condition(
        entry["status"].get("conditions"), cond.NODEGROUP_CHANGED, True, reason, message, entry["generation"]
    )
    try:
        kube.patch_rljob_status(namespace, name, {"conditions": conditions})
    except ApiException as err:
        if err.status == 404:  # deleted meanwhile
            return
        raise
    job_ref = {
        "apiVersion": API_VERSION,
        "kind": "RLJob",
        "metadata": {"namespace": namespace, "name": name, "uid": entry["uid"]},
    }
    kopf.warn(job_ref, reason=reason, message=cond.short(message))


def check_running_jobs(
    group: str, nodegroup_index: kopf.Index, rljob_index: kopf.Index, node_index: kopf.Index, kube: Kube
) -> None:
    """NodeGroupChanged for each running job a node of which is no longer in any of its ready groups."""
    for namespace, name, entry in running_jobs_of(group, rljob_index):
        members: set[str] = set()
        for group_name in entry["nodeGroups"]:
            indexed_group = indexed(nodegroup_index, group_name)
            if indexed_group is not None:
                members |= {n["name"] for n in indexed_group[1].get("nodes") or [] if n.get("ready")}
        gone = sorted(job_nodes(entry["status"]) - members)
        if gone:
            message = (
                f"node {', '.join(gone)} is no longer a ready node of NodeGroup {', '.join(entry['nodeGroups'])}; "
                "the job keeps running there until it is suspended and resumed or its spec changes"
            )
            report_to_job(kube, namespace, name, entry, cond.NODES_LEFT_GROUP, message)


@kopf.on.create(GROUP, VERSION, NODEGROUP_PLURAL)
@kopf.on.resume(GROUP, VERSION, NODEGROUP_PLURAL)
@kopf.on.update(GROUP, VERSION, NODEGROUP_PLURAL)
@kopf.timer(GROUP, VERSION, NODEGROUP_PLURAL, interval=RESYNC_SECONDS)
def nodegroup_observe(
    name: str,
    spec: kopf.Spec,
    status: kopf.Status,
    meta: kopf.Meta,
    patch: kopf.Patch,
    memo: kopf.Memo,
    node_index: kopf.Index,
    nodegroup_index: kopf.Index,
    rljob_index: kopf.Index,
    resourceslice_index: kopf.Index,
    deviceclass_index: kopf.Index,
    **_: Any,
) -> None:
    """Write the matched nodes, unit counts and readiness into status when they changed (a field that became
    empty is removed), and tell running jobs whose nodes left the group."""
    group = NodeGroupSpec.model_validate(dict(spec))
    # Copies: kopf changes its indexes from the watch streams while this runs in a thread (at 1,000 nodes
    # iterating the live index raised "dictionary changed size during iteration").
    node_index = with_slices(copy_index(node_index), copy_index(resourceslice_index))
    nodes = [n for name in node_index if (n := indexed(node_index, name)) is not None]
    classes = set(copy_index(deviceclass_index))
    levels = memo.get("topology_levels") or TOPOLOGY_LEVELS
    topology = kueue_topology(group, nodes, memo)
    wanted = nodegroup_wire_status(group, nodes, meta.get("generation"), classes, status, topology, levels)
    changes = cond.merge_patch(dict(status), wanted)
    if changes:
        patch.status.update(changes)
    check_running_jobs(name, copy_index(nodegroup_index), copy_index(rljob_index), node_index, memo.kube)


@kopf.on.delete(GROUP, VERSION, NODEGROUP_PLURAL)
def nodegroup_delete(name: str, memo: kopf.Memo, rljob_index: kopf.Index, retry: int, **_: Any) -> None:
    """Deletion waits while running jobs use the group; they are told, once."""
    users = running_jobs_of(name, copy_index(rljob_index))
    if not users:
        return
    listed = ", ".join(f"{namespace}/{job}" for namespace, job, _ in users)
    message = (
        f"NodeGroup {name} is being deleted; its deletion waits until no running job uses it "
        f"(running: {listed}); the jobs keep their nodes"
    )
    for namespace, job, entry in users:
        report_to_job(memo.kube, namespace, job, entry, cond.NODEGROUP_DELETING, message)
    raise kopf.TemporaryError(f"in use by {listed}", delay=IN_USE_RECHECK_SECONDS)
