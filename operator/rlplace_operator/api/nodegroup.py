"""The NodeGroup resource (cluster-scoped): a named set of nodes with one kind of hardware, and what the operator
observed of them.
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from placement_core.cluster import ACCELERATOR, ROBOT_TYPES
from rlplace_operator.api.base import CamelModel, cel
from rlplace_operator.api.conditions import Condition
from rlplace_operator.api.podspec import LABEL_KEY_PATTERN


class LabelSelectorRequirement(
    CamelModel,
    json_schema_extra=cel(
        "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
        "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
    ),
):
    """A label selector requirement: a key, an operator and values."""

    key: str = Field(max_length=317)
    """The label key the selector applies to."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """How the key relates to the values: In, NotIn, Exists or DoesNotExist."""
    values: list[Annotated[str, Field(max_length=63)]] = Field([], max_length=1024)
    """Values for In and NotIn; must be empty for Exists and DoesNotExist."""


class LabelSelector(CamelModel):
    """Which Kubernetes nodes belong to the group (the usual matchLabels/matchExpressions selector)."""

    match_labels: dict[str, Annotated[str, Field(max_length=63)]] = {}
    """Labels a node must carry, all of them."""
    match_expressions: list[LabelSelectorRequirement] = Field([], max_length=64)
    """Requirements a node's labels must meet, all of them."""


class HardwareType(enum.StrEnum):
    ACCELERATOR = ACCELERATOR
    FRANKA = ROBOT_TYPES[0]
    DUAL_FRANKA = ROBOT_TYPES[1]
    GIM_ARM = ROBOT_TYPES[2]
    DOSW1 = ROBOT_TYPES[3]
    TURTLE2 = ROBOT_TYPES[4]


class Hardware(CamelModel):
    """The one kind of hardware the group's resource ranks count."""

    type: HardwareType = HardwareType.ACCELERATOR
    """Accelerator (GPUs) or a robot type (Franka, DualFranka, GimArm, DOSW1, Turtle2)."""
    resource_name: str = Field("nvidia.com/gpu", pattern=r"^[A-Za-z0-9.-]+/[A-Za-z0-9_.-]+$", max_length=317)
    """The extended resource in node.status.allocatable that counts the units on each node."""


class EnvVar(CamelModel):
    """An environment variable."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=253)
    """Variable name."""
    value: str = Field("", max_length=32768)
    """Variable value."""


class GpuAllocation(enum.StrEnum):
    """How a node's GPUs are handed to pods."""

    DEVICE_PLUGIN = "devicePlugin"
    """An extended resource (nvidia.com/gpu) from a device plugin: a worker pod takes all of a node's GPUs."""
    DRA = "dra"
    """Dynamic Resource Allocation: a worker pod claims exactly the GPUs its plan uses, so jobs share nodes."""


class PinAttribute(enum.StrEnum):
    """The device attribute a claim's CEL selector pins devices by."""

    INDEX = "index"
    """The driver's per-node `index` (the example driver publishes it; NVIDIA's driver no longer does)."""
    UUID = "uuid"
    """The device's `uuid`, unique in the cluster (NVIDIA's driver and the example driver publish it)."""


class Dra(CamelModel):
    """Which DRA driver publishes the group's GPUs and how rlplace pins them (docs/dra.md)."""

    driver: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]+([.-][a-z0-9]+)*$")
    """The driver name of the nodes' ResourceSlices, e.g. gpu.nvidia.com or gpu.example.com."""
    device_class_name: str | None = Field(None, min_length=1, max_length=253)
    """The DeviceClass the claims name. Default: the driver name (the NVIDIA and example drivers' charts
    create a DeviceClass of that name; rlplace's chart can create one too)."""
    pin_attribute: PinAttribute = PinAttribute.UUID
    """The attribute the claims pin devices by: uuid (default) or index."""


TOPOLOGY_SOURCE_MESSAGE = "topology names its levels or a Kueue Topology (kueueTopology), one of the two"


class NodeGroupTopology(
    CamelModel,
    json_schema_extra=cel("has(self.levels) != has(self.kueueTopology)", TOPOLOGY_SOURCE_MESSAGE),
):
    """The network levels of the group's nodes, widest first (docs/admission.md, "Racks and blocks")."""

    levels: list[Annotated[str, Field(max_length=317, pattern=LABEL_KEY_PATTERN)]] | None = Field(
        None, min_length=1, max_length=8
    )
    """Node label keys, widest first, e.g. [network.topology.kubernetes.io/block, nvidia.com/gpu.clique]. The node
    itself (kubernetes.io/hostname) is always the narrowest level and need not be listed."""
    kueue_topology: str | None = Field(None, min_length=1, max_length=253)
    """The name of a Kueue Topology whose levels to read (Kueue's topology-aware scheduling then packs by the same
    labels): declared once, in Kueue."""

    @model_validator(mode="after")
    def _one_of_the_two(self) -> NodeGroupTopology:
        if (self.levels is None) == (self.kueue_topology is None):
            raise ValueError(TOPOLOGY_SOURCE_MESSAGE)
        return self


class NodeGroupSpec(
    CamelModel,
    json_schema_extra=cel(
        "!(has(self.hardware) && has(self.ignoreHardware) && self.ignoreHardware)",
        "hardware and ignoreHardware cannot both be set",
        (
            "!has(self.gpuAllocation) || self.gpuAllocation != 'dra' || has(self.dra)",
            "gpuAllocation dra needs dra.driver",
        ),
        (
            "!has(self.dra) || (has(self.gpuAllocation) && self.gpuAllocation == 'dra')",
            "dra is set only with gpuAllocation: dra",
        ),
        (
            "!has(self.gpuAllocation) || self.gpuAllocation != 'dra' || !has(self.ignoreHardware) || !self.ignoreHardware",
            "gpuAllocation dra counts GPUs: ignoreHardware cannot be set",
        ),
    ),
):
    """A named set of Kubernetes nodes with one kind of hardware: the Kubernetes form of cluster.node_groups."""

    node_selector: LabelSelector
    """Selects the group's nodes. Inside the group nodes are ranked by the rlplace.io/node-rank label (an
    integer; nodes without it come last), then by network block and rack (the network.topology.kubernetes.io
    labels), then by name."""
    hardware: Hardware | None = None
    """The hardware ranks count. Default: the nodes' GPUs (nvidia.com/gpu); without GPUs, the nodes."""
    ignore_hardware: bool = False
    """Count the nodes themselves, never their hardware (for CPU workers)."""
    env: list[EnvVar] = Field([], max_length=128)
    """Variables every worker on these nodes gets."""
    accelerator_type: str | None = Field(None, min_length=1, max_length=253)
    """What kind of GPU the nodes have (a800, 4090), matching the profile's per-type costs (docs/autoplace.md).
    Default: the nodes' nvidia.com/gpu.product label when they all agree, else the group's name."""
    accelerator_memory_gb: float | None = Field(None, gt=0, le=1e6)
    """GB of memory per GPU, a hard limit for auto placement. Default: the nodes' nvidia.com/gpu.memory label
    (MiB / 1024), the smallest when they differ."""
    gpu_allocation: GpuAllocation = GpuAllocation.DEVICE_PLUGIN
    """devicePlugin (default): a worker pod takes all of its node's GPUs. dra: the nodes' GPUs come from a DRA
    driver's ResourceSlices; a worker pod claims exactly the GPUs its plan uses, so several jobs share a node.
    One node never has both (the two would hand out the same GPUs)."""
    dra: Dra | None = None
    """The DRA driver and pin attribute (with gpuAllocation: dra)."""
    topology: NodeGroupTopology | None = None
    """The network levels admission packs a job's nodes by. Default: network.topology.kubernetes.io/block and
    /rack, so nodes labelled with them need no declaration; nodes without the labels form one domain."""

    @property
    def dra_driver(self) -> Dra | None:
        """The DRA settings when the group's GPUs come from DRA, else None."""
        return self.dra if self.gpu_allocation is GpuAllocation.DRA else None


class NodeStatus(CamelModel):
    """One matched node."""

    name: str
    """Kubernetes node name."""
    rank: int
    """Rank of the node inside the group (0-based)."""
    units: int
    """Hardware units the node has (allocatable count of hardware.resourceName, or the devices of the DRA
    driver's ResourceSlices; 0 for node groups)."""
    ready: bool
    """Whether the node is Ready and schedulable (with gpuAllocation dra: and its driver publishes devices)."""
    problem: str | None = None
    """Why the node cannot take the group's jobs although Kubernetes says it is Ready (DRA: no ResourceSlice of
    the driver, or device-plugin GPUs beside DRA ones)."""


class DomainStatus(CamelModel):
    """One domain of the narrowest declared level, e.g. a rack."""

    path: str
    """Its labels' values, widest level first, joined by `/` (`b1/r3`); empty for the nodes in no domain."""
    nodes: int
    """Matched nodes in it."""
    ready_nodes: int
    """Of those, the Ready and schedulable ones."""


class TopologyStatus(CamelModel):
    """The network levels admission uses for the group, and its nodes per domain."""

    levels: list[str] = []
    """Node label keys, widest first (spec.topology, its Kueue Topology, or the default block and rack)."""
    domains: list[DomainStatus] = []
    """Nodes per domain of the narrowest level, in rank order (only when some node carries a level's label)."""
    problem: str | None = None
    """What is wrong with the levels: a Kueue Topology that does not exist, nodes lacking a level's label
    (they count as in no domain of it, so a job requiring that level never gets them)."""


class NodeGroupStatus(CamelModel):
    """What the operator observed: the matched nodes in rank order."""

    nodes: list[NodeStatus] = []
    """Matched nodes in rank order."""
    hardware_type: str | None = None
    """Accelerator, a robot type, or empty for a group of plain nodes."""
    accelerator_type: str | None = None
    """The GPU type auto placement uses: spec.acceleratorType, else the nodes' nvidia.com/gpu.product label."""
    accelerator_memory_gb: float | None = None
    """GB per GPU auto placement uses: spec.acceleratorMemoryGb, else the nodes' nvidia.com/gpu.memory label."""
    total_nodes: int = 0
    """Number of matched nodes."""
    ready_nodes: int = 0
    """Number of matched nodes that are Ready and schedulable."""
    total_units: int = 0
    """Hardware units over the ready nodes."""
    problem: str | None = None
    """Why no job can run on the group although its nodes are Ready (gpuAllocation dra: the DeviceClass its claims
    name does not exist); its jobs wait, saying so, until it is gone."""
    topology: TopologyStatus | None = None
    """The network levels and the nodes per domain (docs/admission.md, "Racks and blocks")."""
    conditions: list[Condition] = []
    """Ready: True when at least one node is ready."""
    observed_generation: int | None = None
    """The metadata.generation this status describes."""
