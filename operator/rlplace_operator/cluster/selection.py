"""From Kubernetes Nodes to NodeGroup status, and from a job's NodeGroups to a placement_core Cluster.

Pure functions over plain dicts and models: no API calls, so the rank order and unit counts are unit-tested
and the handlers stay small.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from placement_core.cluster import ACCELERATOR, NO_ACCEL, NV_GPU, Cluster, EnvConfig, Node, NodeGroup
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import HOSTNAME_LABEL, NODE_RANK_LABEL, TOPOLOGY_LEVELS
from rlplace_operator.api.nodegroup import (
    DomainStatus,
    LabelSelector,
    NodeGroupSpec,
    NodeGroupStatus,
    NodeStatus,
    TopologyStatus,
)
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.cluster.dra import Device, NodeSlice, node_devices
from rlplace_operator.cluster.taints import Taint, refusal, untolerated

GPU_RESOURCE = "nvidia.com/gpu"
#: GPU feature discovery's node labels: the GPU model (`NVIDIA-A800-SXM4-80GB`) and its memory in MiB.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the operator needs of a Kubernetes Node (kept in the node index)."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, str]
    ready: bool
    taints: tuple[Taint, ...] = ()
    """node.spec.taints (admission keeps a job off the nodes whose taints its workers do not tolerate)."""
    slices: tuple[NodeSlice, ...] = ()
    """The node's ResourceSlices (DRA drivers' devices), joined in from their own index (`with_slices`)."""

    @classmethod
    def from_body(cls, body: Mapping) -> NodeInfo:
        metadata, spec, status = body.get("metadata", {}), body.get("spec") or {}, body.get("status") or {}
        conditions = status.get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return cls(
            name=metadata["name"],
            labels=dict(metadata.get("labels") or {}),
            allocatable=dict(status.get("allocatable") or {}),
            ready=ready and not spec.get("unschedulable", False),
            taints=tuple(Taint.from_body(t) for t in spec.get("taints") or []),
        )

    def network_path(self, levels: Sequence[str] = TOPOLOGY_LEVELS) -> tuple[str, ...]:
        """Its network domains, widest first (a group's levels: `topology_levels`), "" where unlabelled."""
        return tuple(self.labels.get(level, "") for level in levels)

    def count(self, resource: str) -> int:
        """Whole units of an extended resource (`"8"` -> 8); absent or malformed counts as 0."""
        value = str(self.allocatable.get(resource, "0"))
        return int(value) if value.isdigit() else 0

    def devices(self, driver: str) -> tuple[Device, ...]:
        """The node's devices of a DRA driver in host GPU order (position = host GPU number)."""
        return node_devices(self.slices, driver)

    def units(self, spec: NodeGroupSpec) -> int:
        """The units a group counts on this node: its DRA driver's devices, else its unit resource's count."""
        dra = spec.dra_driver
        if dra is not None:
            return len(self.devices(dra.driver))
        resource = unit_resource(spec)
        return self.count(resource) if resource else 0


def with_slices(
    nodes: Mapping[str, list[NodeInfo]], slices: Mapping[str, list[NodeSlice]]
) -> dict[str, list[NodeInfo]]:
    """A copied node index whose nodes carry their ResourceSlices (the two come from two watches)."""
    if not slices:
        return dict(nodes)
    return {
        name: [replace(info, slices=tuple(slices[name])) if name in slices else info for info in infos]
        for name, infos in nodes.items()
    }


def dra_problem(spec: NodeGroupSpec, node: NodeInfo) -> str | None:
    """Why a node of a DRA group cannot take its jobs (None: it can): no device of the driver (the driver is
    missing or down, or its name is wrong), devices without the pin attribute, or device-plugin GPUs beside the
    DRA ones (both would hand out the same GPUs)."""
    dra = spec.dra_driver
    if dra is None:
        return None
    devices = node.devices(dra.driver)
    if not devices:
        drivers = sorted({s.driver for s in node.slices})
        published = f" (it publishes devices of {', '.join(drivers)})" if drivers else ""
        return f"node {node.name} publishes no ResourceSlice of DRA driver {dra.driver}{published}"
    unpinned = [d.name for d in devices if d.pin(dra.pin_attribute) is None]
    if unpinned:
        return (
            f"device {unpinned[0]} of driver {dra.driver} on node {node.name} has no '{dra.pin_attribute}' "
            "attribute to pin it by (dra.pinAttribute)"
        )
    if node.count(GPU_RESOURCE):
        return (
            f"node {node.name} also has {node.count(GPU_RESOURCE)} {GPU_RESOURCE} from a device plugin: a node's GPUs "
            "come from DRA or from a device plugin, never both"
        )
    return None


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    for requirement in selector.match_expressions:
        present = requirement.key in labels
        value = labels.get(requirement.key)
        if requirement.operator == "In" and value not in requirement.values:
            return False
        if requirement.operator == "NotIn" and present and value in requirement.values:
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True


def topology_levels(
    spec: NodeGroupSpec, kueue_topology: Mapping[str, Any] | None, default: Sequence[str] = TOPOLOGY_LEVELS
) -> tuple[tuple[str, ...], str | None]:
    """The group's network levels, widest first, and what is wrong with them (None: nothing).

    spec.topology.levels; else the Kueue Topology it names (`kueue_topology`: that object as read, None when it
    does not exist); else, when it names none, the Kueue Topology of the ResourceFlavor whose nodeLabels its nodes
    carry (`kueue_topology`, found by the controller: declared once, in Kueue); else `default` (the operator's
    --topology-levels, by default block and rack). The hostname level is dropped: a node is always a domain of its
    own, and a whole-node job never puts two of its nodes on one host."""
    declared = spec.topology
    if declared is not None and declared.levels is not None:
        return tuple(level for level in declared.levels if level != HOSTNAME_LABEL), None
    if declared is not None and kueue_topology is None:
        return (), (
            f"Kueue Topology {declared.kueue_topology} does not exist (spec.topology.kueueTopology): the group's "
            "nodes count as one domain until it does"
        )
    if kueue_topology is None:
        return tuple(default), None
    listed = ((kueue_topology.get("spec") or {}).get("levels")) or []
    labels = (str(level.get("nodeLabel") or "") for level in listed if isinstance(level, Mapping))
    return tuple(label for label in labels if label and label != HOSTNAME_LABEL), None


def covering_flavor(flavors: Sequence[Mapping[str, Any]], nodes: Sequence[NodeInfo]) -> Mapping[str, Any] | None:
    """Of Kueue's ResourceFlavors, the one with a Topology whose nodeLabels every one of the nodes carries (the
    most specific when several do); None when none does or there are no nodes."""
    found = None
    for flavor in flavors:
        spec = flavor.get("spec") or {}
        labels = spec.get("nodeLabels") or {}
        if not spec.get("topologyName") or not labels or not nodes:
            continue
        covers = all(all(node.labels.get(k) == v for k, v in labels.items()) for node in nodes)
        if covers and (found is None or len(labels) > len((found.get("spec") or {}).get("nodeLabels") or {})):
            found = flavor
    return found


def _rank_key(node: NodeInfo, levels: Sequence[str]) -> tuple[int, int, tuple[str, ...], str]:
    rank = node.labels.get(NODE_RANK_LABEL, "")
    if rank.isdigit():
        return (0, int(rank), (), node.name)
    # The nodes of one block, and of one rack in it, are consecutive: a job's node ranks follow the network.
    return (1, 0, node.network_path(levels), node.name)


def group_nodes(
    spec: NodeGroupSpec, nodes: Sequence[NodeInfo], levels: Sequence[str] = TOPOLOGY_LEVELS
) -> list[NodeInfo]:
    """The nodes the selector matches, in the group's rank order: the node-rank label, then the network domains
    (`levels`, widest first), then the name."""
    matched = (n for n in nodes if selector_matches(spec.node_selector, n.labels))
    return sorted(matched, key=lambda node: _rank_key(node, levels))


#: Nodes a topology problem names at most.
MAX_NAMED_NODES = 3


def topology_status(levels: tuple[str, ...], problem: str | None, nodes: Sequence[NodeInfo]) -> TopologyStatus:
    """The levels, the nodes per domain of the narrowest one (in rank order), and nodes that lack a level's label
    where others of the group carry it (they count as in no domain of that level)."""
    paths = [node.network_path(levels) for node in nodes]
    counts: dict[str, list[int]] = {}  # domain -> [nodes, ready nodes], in rank order
    if any(any(path) for path in paths):
        for node, path in zip(nodes, paths, strict=True):
            count = counts.setdefault("/".join(path), [0, 0])
            count[0] += 1
            count[1] += node.ready
    domains = [DomainStatus(path=path, nodes=total, ready_nodes=ready) for path, (total, ready) in counts.items()]
    for index, level in enumerate(levels):
        unlabelled = [node.name for node, path in zip(nodes, paths, strict=True) if not path[index]]
        if problem is None and unlabelled and len(unlabelled) < len(nodes):
            named = ", ".join(unlabelled[:MAX_NAMED_NODES]) + (", ..." if len(unlabelled) > MAX_NAMED_NODES else "")
            problem = (
                f"{len(unlabelled)} of {len(nodes)} nodes have no {level} label ({named}): they are in no domain of "
                "that level, so a job requiring it never gets them"
            )
    return TopologyStatus(levels=list(levels), domains=domains, problem=problem)


def hardware_type(spec: NodeGroupSpec, nodes: Sequence[NodeInfo]) -> str | None:
    """The hardware type (docs/placement.md, "Node groups"), or None when the ranks count nodes."""
    if spec.ignore_hardware:
        return None
    if spec.dra_driver is not None:
        return ACCELERATOR
    if spec.hardware is not None and spec.hardware.type != ACCELERATOR:
        return str(spec.hardware.type)
    resource = spec.hardware.resource_name if spec.hardware else GPU_RESOURCE
    if spec.hardware is not None or any(n.count(resource) for n in nodes):
        return ACCELERATOR
    return None


def unit_resource(spec: NodeGroupSpec) -> str | None:
    """The extended resource that counts the group's units (None for groups of plain nodes, and for DRA groups:
    their GPUs are devices of ResourceSlices, claimed per pod)."""
    if spec.ignore_hardware or spec.dra_driver is not None:
        return None
    return spec.hardware.resource_name if spec.hardware else GPU_RESOURCE


def accelerator_of(spec: NodeGroupSpec, nodes: Sequence[NodeInfo]) -> tuple[str | None, float | None]:
    """The GPU type and GB per GPU of an Accelerator group, for auto placement (docs/autoplace.md).

    The spec wins; else GPU feature discovery's labels: the product when every labelled node agrees (mixed
    products give no type: the group's name stands in), the smallest memory (a hard limit must hold on every
    node). None where neither says.
    """
    products = {n.labels[GPU_PRODUCT_LABEL] for n in nodes if n.labels.get(GPU_PRODUCT_LABEL)}
    kind = spec.accelerator_type or (products.pop() if len(products) == 1 else None)
    memory = spec.accelerator_memory_gb
    if memory is None:
        mib = [int(n.labels[GPU_MEMORY_LABEL]) for n in nodes if n.labels.get(GPU_MEMORY_LABEL, "").isdigit()]
        memory = min(mib) / 1024 if mib and min(mib) > 0 else None
    return kind, memory


def group_problem(spec: NodeGroupSpec, device_classes: Collection[str] | None) -> str | None:
    """Why no job can run on the group however ready its nodes are (None: jobs can): a DRA group whose DeviceClass
    does not exist (`device_classes`: the cluster's DeviceClasses, None when not known)."""
    dra = spec.dra_driver
    if dra is None or device_classes is None:
        return None
    name = dra.device_class_name or dra.driver
    if name in device_classes:
        return None
    where = "dra.deviceClassName" if dra.device_class_name else "dra.deviceClassName (default: the driver name)"
    return (
        f"DeviceClass {name} does not exist: create it (the chart's dra.deviceClasses, or the DRA driver's chart) "
        f"or set the NodeGroup's {where}"
    )


def nodegroup_status(
    spec: NodeGroupSpec,
    nodes: Sequence[NodeInfo],
    generation: int | None,
    device_classes: Collection[str] | None = None,
    kueue_topology: Mapping[str, Any] | None = None,
    default_levels: Sequence[str] = TOPOLOGY_LEVELS,
) -> NodeGroupStatus:
    """The status a NodeGroup should have for the current nodes (conditions are added by the handler;
    `kueue_topology` and `default_levels`: see `topology_levels`)."""
    levels, problem = topology_levels(spec, kueue_topology, default_levels)
    matched = group_nodes(spec, nodes, levels)
    kind = hardware_type(spec, matched)
    entries = []
    for i, n in enumerate(matched):
        unusable = dra_problem(spec, n)
        units = n.units(spec) if kind else 0
        entries.append(
            NodeStatus(name=n.name, rank=i, units=units, ready=n.ready and unusable is None, problem=unusable)
        )
    accelerator, memory = accelerator_of(spec, matched) if kind == ACCELERATOR else (None, None)
    return NodeGroupStatus(
        nodes=entries,
        hardware_type=kind,
        accelerator_type=accelerator,
        accelerator_memory_gb=memory,
        total_nodes=len(entries),
        ready_nodes=sum(e.ready for e in entries),
        total_units=sum(e.units for e in entries if e.ready),
        problem=group_problem(spec, device_classes),
        topology=topology_status(levels, problem, matched),
        observed_generation=generation,
    )


def nodegroup_wire_status(
    spec: NodeGroupSpec,
    nodes: Sequence[NodeInfo],
    generation: int | None,
    device_classes: Collection[str] | None,
    before: Mapping[str, Any],
    kueue_topology: Mapping[str, Any] | None = None,
    default_levels: Sequence[str] = TOPOLOGY_LEVELS,
) -> dict[str, Any]:
    """The NodeGroup's whole status on the wire, its Ready condition included: True when a node is ready and no
    group problem keeps jobs off it (`before`: the status as it is, whose conditions keep their transition times)."""
    observed = nodegroup_status(spec, nodes, generation, device_classes, kueue_topology, default_levels)
    ready = observed.ready_nodes > 0 and observed.problem is None
    wanted = dump(observed)
    problems = [n.problem for n in observed.nodes if n.problem]
    named = f"; {problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}" if problems else ""
    said = f"{observed.ready_nodes} of {observed.total_nodes} nodes ready, {observed.total_units} units{named}"
    reason = cond.NODES_READY if ready else cond.NO_READY_NODES
    if observed.problem is not None:
        said, reason = f"{observed.problem} ({said})", cond.DEVICE_CLASS_NOT_FOUND
    wanted["conditions"] = cond.set_condition(before.get("conditions"), cond.READY, ready, reason, said, generation)
    return wanted


@dataclass(frozen=True)
class JobGroup:
    """One of a job's NodeGroups as the operator sees it."""

    name: str
    spec: NodeGroupSpec
    status: NodeGroupStatus

    @property
    def levels(self) -> tuple[str, ...]:
        """Its network levels, widest first, as its status says (the default ones before it was observed)."""
        topology = self.status.topology
        return TOPOLOGY_LEVELS if topology is None else tuple(topology.levels)


def ready_nodes(group: JobGroup, node_index: Mapping[str, Any]) -> list[str]:
    """A group's ready nodes in rank order (the order its status lists them)."""
    return [e.name for e in group.status.nodes if e.ready and node_index.get(e.name)]


def job_cluster(groups: Sequence[JobGroup], nodes: Mapping[str, NodeInfo]) -> Cluster:
    """The placement_core cluster of a job: the ready nodes of its groups, group by group, in rank order.

    A node in two groups keeps the rank of its first appearance. Accelerator counts come from the node's
    GPU resource (the group's resourceName for Accelerator groups), so every group sees the same GPUs.
    Raises PlacementError when no group has a ready node.
    """
    order: dict[str, int] = {}
    gpu_counts: dict[str, int] = {}
    # Each node's network domains by the levels of its first group (auto placement prices the weight sync by
    # them); none where a node carries no level's label.
    domains: dict[str, tuple[str, ...]] = {}
    for group in groups:
        resource = (
            group.spec.hardware.resource_name
            if group.status.hardware_type == ACCELERATOR and group.spec.hardware
            else GPU_RESOURCE
        )
        dra = group.spec.dra_driver
        for entry in group.status.nodes:
            if entry.ready and entry.name in nodes:
                info = nodes[entry.name]
                order.setdefault(entry.name, len(order))
                path = info.network_path(group.levels)
                domains.setdefault(entry.name, path if path and all(path) else ())
                count = len(info.devices(dra.driver)) if dra is not None else info.count(resource)
                gpu_counts[entry.name] = max(gpu_counts.get(entry.name, 0), count)
    cluster_nodes = [
        Node(rank, gpu_counts[name], NV_GPU if gpu_counts[name] else NO_ACCEL, name, domains[name])
        for name, rank in order.items()
    ]
    node_groups = []
    for group in groups:
        ready = [e for e in group.status.nodes if e.ready and e.name in order]
        ranks = tuple(order[e.name] for e in ready)
        kind = group.status.hardware_type
        units = tuple(e.units for e in ready) if kind not in (None, ACCELERATOR) else ()
        env = (EnvConfig(ranks, tuple((v.name, v.value) for v in group.spec.env)),) if group.spec.env and ranks else ()
        status = group.status
        node_groups.append(
            NodeGroup(group.name, ranks, kind, units, (), env, status.accelerator_type, status.accelerator_memory_gb)
        )
    return Cluster(cluster_nodes, node_groups)


def untolerated_nodes(
    spec: RLJobSpec, groups: Sequence[JobGroup], nodes: Mapping[str, NodeInfo | None]
) -> dict[str, str]:
    """Node -> why the job's worker could not run there: a NoSchedule or NoExecute taint that the worker's
    tolerations (spec.pods, workers, and the workerNodeGroups of the node's groups) do not match. Admission
    treats these nodes as taken for this job, so it is never admitted to a node its pod cannot be bound to."""
    membership: dict[str, list[str]] = {}
    for group in groups:
        for entry in group.status.nodes:
            membership.setdefault(entry.name, []).append(group.name)
    taints = {name: info.taints for name in membership if (info := nodes.get(name)) is not None and info.taints}
    return untolerated_among(spec, {name: membership[name] for name in taints}, taints)


def untolerated_among(
    spec: RLJobSpec, membership: Mapping[str, Sequence[str]], taints: Mapping[str, Sequence[Taint]]
) -> dict[str, str]:
    """`untolerated_nodes` over tainted nodes given directly: node -> the job's groups it is in, node -> its
    taints (the queue pass reads these from its snapshot, once per pass for every waiting job)."""
    excluded = {}
    for name, in_groups in membership.items():
        node_taints = taints.get(name)
        if not node_taints or not in_groups:
            continue
        taint = untolerated(spec.pods.for_workers(in_groups).tolerations, node_taints)
        if taint is not None:
            excluded[name] = refusal(name, taint)
    return excluded
