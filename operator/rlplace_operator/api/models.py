"""The RLJob and NodeGroup resources (API group `rlplace.io`, version `v1alpha1`), as pydantic models.

These models are the source of truth: `crdgen.py` turns them into the CRDs in `crds/` (descriptions become
`kubectl explain` text, `json_schema_extra` carries CEL rules), and the handlers parse live objects with them.
Field names are camelCase on the wire, as Kubernetes users expect.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from placement_core.autoplace.cost import CostModel
from placement_core.autoplace.observed import Apply
from placement_core.cluster import ACCELERATOR, ROBOT_TYPES
from placement_core.contract import PLAN_MOUNT_DIR

GROUP = "rlplace.io"
VERSION = "v1alpha1"

#: Component key of `cluster.component_placement`: names separated by commas (`actor,rollout`).
COMPONENTS_PATTERN = r"^\s*[A-Za-z0-9_.-]+(\s*,\s*[A-Za-z0-9_.-]+)*\s*$"
#: One placement part: `all`, `N` or `N-M`, optionally `:N` or `:N-M` (docs/placement.md, the grammar).
_RANGE = r"[0-9]+(\s*-\s*[0-9]+)?"
_PART = rf"\s*([aA][lL][lL]|{_RANGE})\s*(:\s*{_RANGE}\s*)?"
PLACEMENT_PATTERN = rf"^{_PART}(,({_PART})?)*$"
LABELS_PATTERN = r"^\s*[A-Za-z0-9_.-]+(\s*,\s*[A-Za-z0-9_.-]+)*\s*$"
#: Longest driver command (spec.entrypoint): it is copied into the RayJob and its submitter's command line.
MAX_ENTRYPOINT_CHARS = 65536


def cel(rule: str, message: str, *more: tuple[str, str]) -> dict[str, Any]:
    """CEL validation rules (each a rule and its message) for the CRD, set beside the field or model they guard
    (`json_schema_extra`). crdgen drops a field's regex `pattern` when it has a rule, so `kubectl apply` shows
    the message."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in ((rule, message), *more)]}


class _Camel(BaseModel):
    """Base of every resource model: camelCase on the wire, unknown fields refused, docstrings as descriptions."""

    model_config = ConfigDict(
        populate_by_name=True, extra="forbid", use_attribute_docstrings=True, alias_generator=to_camel
    )


# ---------------------------------------------------------------------------------------------------- NodeGroup


class LabelSelectorRequirement(
    _Camel,
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


class LabelSelector(_Camel):
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


class Hardware(_Camel):
    """The one kind of hardware the group's resource ranks count."""

    type: HardwareType = HardwareType.ACCELERATOR
    """Accelerator (GPUs) or a robot type (Franka, DualFranka, GimArm, DOSW1, Turtle2)."""
    resource_name: str = Field("nvidia.com/gpu", pattern=r"^[A-Za-z0-9.-]+/[A-Za-z0-9_.-]+$", max_length=317)
    """The extended resource in node.status.allocatable that counts the units on each node."""


class EnvVar(_Camel):
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


class Dra(_Camel):
    """Which DRA driver publishes the group's GPUs and how rlplace pins them (docs/dra.md)."""

    driver: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]+([.-][a-z0-9]+)*$")
    """The driver name of the nodes' ResourceSlices, e.g. gpu.nvidia.com or gpu.example.com."""
    device_class_name: str | None = Field(None, min_length=1, max_length=253)
    """The DeviceClass the claims name. Default: the driver name (the NVIDIA and example drivers' charts
    create a DeviceClass of that name; rlplace's chart can create one too)."""
    pin_attribute: PinAttribute = PinAttribute.UUID
    """The attribute the claims pin devices by: uuid (default) or index."""


class NodeGroupSpec(
    _Camel,
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
    integer; nodes without it come last), then by name."""
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

    @property
    def dra_driver(self) -> Dra | None:
        """The DRA settings when the group's GPUs come from DRA, else None."""
        return self.dra if self.gpu_allocation is GpuAllocation.DRA else None


class NodeStatus(_Camel):
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


class Condition(_Camel):
    """A metav1.Condition."""

    type: str
    """Condition type, e.g. Ready, Validated, Placed, RayClusterReady."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str
    """A CamelCase word saying why."""
    message: str = ""
    """A sentence for people."""
    last_transition_time: str
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation the condition was set for."""


class NodeGroupStatus(_Camel):
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
    conditions: list[Condition] = []
    """Ready: True when at least one node is ready."""
    observed_generation: int | None = None
    """The metadata.generation this status describes."""


# ---------------------------------------------------------------------------------------------------- RLJob


class PlacementEntry(_Camel):
    """One key of cluster.component_placement: the components that share a strategy, and where they go."""

    components: Annotated[
        str,
        Field(
            pattern=COMPONENTS_PATTERN,
            max_length=253,
            json_schema_extra=cel(
                f"self.matches(r'{COMPONENTS_PATTERN}')",
                "components must be component names separated by commas, for example actor,rollout",
            ),
        ),
    ]
    """Component names separated by commas, e.g. `actor,rollout`; they share one placement."""
    placement: Annotated[
        str,
        Field(
            pattern=PLACEMENT_PATTERN,
            max_length=1024,
            json_schema_extra=cel(
                f"self.matches(r'{PLACEMENT_PATTERN}')",
                "placement must be parts R[:P] separated by commas, where R is all, N or N-M and P is N or N-M "
                "(for example 0-7, all, 0-3:0-7)",
            ),
        ),
    ]
    """Resource ranks and optional process ranks: parts `R[:P]` separated by commas, where R is `all`, `N` or
    `N-M` and P is `N` or `N-M` (e.g. `0-7`, `all`, `0-3:0-7`, `0-1:0-3,3-5`)."""
    node_group: Annotated[
        str | None,
        Field(
            pattern=LABELS_PATTERN,
            max_length=253,
            json_schema_extra=cel(
                f"self.matches(r'{LABELS_PATTERN}')",
                "nodeGroup must be NodeGroup names separated by commas, for example a800,4090",
            ),
        ),
    ] = None
    """NodeGroups the ranks count over, comma-separated, in order (default: all of the job's node groups)."""


class AppliedPlacementEntry(_Camel):
    """One key of the component placement the operator applied (written by the operator, so no CEL rules:
    their cost would count against the CRD's validation budget for nothing)."""

    components: str
    """Component names separated by commas."""
    placement: str
    """Resource ranks and optional process ranks."""
    node_group: str | None = None
    """NodeGroups the ranks count over."""


class PlacementMode(enum.StrEnum):
    HYBRID = "hybrid"
    MODEL_PARALLEL = "modelParallel"


class ModelParallel(_Camel):
    """Model-parallel sizes (docs/placement.md, "Modes"); every size defaults to 1."""

    actor_tensor_parallel_size: int = Field(1, ge=1)
    """actor.model.tensor_model_parallel_size."""
    actor_context_parallel_size: int = Field(1, ge=1)
    """actor.model.context_parallel_size (multiplies the actor's model-parallel size: tp*cp*pp)."""
    actor_pipeline_parallel_size: int = Field(1, ge=1)
    """actor.model.pipeline_model_parallel_size."""
    rollout_tensor_parallel_size: int = Field(1, ge=1)
    """rollout.tensor_parallel_size."""
    rollout_pipeline_parallel_size: int = Field(1, ge=1)
    """rollout.pipeline_parallel_size."""
    inference_tensor_parallel_size: int | None = Field(None, ge=1)
    """inference.model.tensor_model_parallel_size (default: the actor's)."""
    inference_pipeline_parallel_size: int | None = Field(None, ge=1)
    """inference.model.pipeline_model_parallel_size (default: the actor's)."""


class Algorithm(_Camel):
    """Algorithm settings that placement and auto placement read."""

    recompute_logprobs: bool = True
    """algorithm.recompute_logprobs: a dedicated inference component recomputes log-probs."""
    group_size: int = Field(1, ge=1)
    """algorithm.group_size (responses per prompt)."""
    n_minibatches: int = Field(1, ge=1)
    """algorithm.n_minibatches."""
    rollout_batch_size: int = Field(1, ge=1)
    """data.rollout_batch_size."""
    max_running_requests: int = Field(64, ge=1)
    """rollout.max_running_requests."""


class SyncBandwidth(_Camel):
    """GB/s of the actor -> rollout weight sync per link (defaults in docs/autoplace.md)."""

    same_node: float | None = Field(None, gt=0)
    """Inside a node (collocated, or both on one node)."""
    across_nodes: float | None = Field(None, gt=0)
    """Between nodes of one NodeGroup."""
    across_groups: float | None = Field(None, gt=0)
    """Between NodeGroups."""


# Keys are GPU type names; no constraint on them, since a CRD's structural schema has no propertyNames.
_TypeCosts = Annotated[dict[str, Annotated[float, Field(gt=0)]], Field(min_length=1, max_length=64)]


class Profile(
    _Camel,
    json_schema_extra=cel(
        "has(self.actorCost) || has(self.actorCostByType)",
        "actorCost or actorCostByType is required",
        ("has(self.rolloutCost) || has(self.rolloutCostByType)", "rolloutCost or rolloutCostByType is required"),
    ),
):
    """Per-iteration costs in seconds, profiled collocated on all GPUs (docs/autoplace.md); over NodeGroups of
    different GPUs also per GPU type, memory per process and the weight sync."""

    actor_cost: float | None = Field(None, gt=0)
    """Seconds per iteration of the actor (training)."""
    inference_cost: float | None = Field(None, gt=0)
    """Seconds per iteration of inference (needed when recomputeLogprobs is true)."""
    rollout_cost: float | None = Field(None, gt=0)
    """Seconds per iteration of rollout (generation)."""
    actor_cost_by_type: _TypeCosts | None = None
    """Seconds per iteration of the actor on each GPU type it was measured on, e.g. {a800: 95.7, "4090": 180.2}."""
    inference_cost_by_type: _TypeCosts | None = None
    """Seconds per iteration of inference per GPU type."""
    rollout_cost_by_type: _TypeCosts | None = None
    """Seconds per iteration of rollout per GPU type."""
    actor_memory_gb: float | None = Field(None, gt=0)
    """GB of GPU memory one actor process needs (never placed on smaller GPUs)."""
    inference_memory_gb: float | None = Field(None, gt=0)
    """GB of GPU memory one inference process needs."""
    rollout_memory_gb: float | None = Field(None, gt=0)
    """GB of GPU memory one rollout process needs."""
    model_size_gb: float | None = Field(None, gt=0)
    """GB of weights synced from actor to rollout each iteration."""
    sync_bandwidth_gb_s: SyncBandwidth | None = None
    """Bandwidths of the weight sync, overriding the defaults."""
    collocated_offload: bool | None = None
    """Collocated components take turns on the GPUs (offloading), so only the largest must fit."""


class Resources(_Camel):
    """CPU and memory of a pod."""

    cpu: str = Field("1", pattern=r"^[0-9]+(\.[0-9]+)?m?$")
    """CPU request and limit, e.g. 1 or 500m."""
    memory: str = Field("2Gi", pattern=r"^[0-9]+([KMGTE]i?)?$")
    """Memory request and limit, e.g. 2Gi."""


class RaySpec(_Camel):
    """The KubeRay RayCluster the job runs in."""

    image: str = Field("rayproject/ray:2.60.0", max_length=1024)
    """Container image of every Ray pod (the head runs the driver, so with an entrypoint it needs rlplace)."""
    worker_image: str | None = Field(None, max_length=1024)
    """Container image of the worker pods (default: `image`). Any Ray image of the same Ray version works,
    one without rlplace too: the launcher ships placement_core to the workers in Ray's runtime_env."""
    ray_version: str = Field("2.60.0", max_length=64)
    """Ray version in the image (RayCluster.spec.rayVersion)."""
    head_resources: Resources = Resources()
    """CPU and memory of the head pod (it never requests or sees a GPU)."""
    worker_resources: Resources = Resources(cpu="4", memory="16Gi")
    """CPU and memory of each worker pod (GPUs are added from the plan). The CPU limit also paces the start of
    the node's processes (each a Python process Ray starts): on the local e2e cluster the reference driver's 12
    processes were up about 10 s after Running with 1 CPU, 27 to 32 s with 500m."""
    service_account_name: str | None = Field(None, max_length=253)
    """Service account of the Ray pods (head and workers) when spec.pods sets none. Deprecated: use
    spec.pods.serviceAccountName, which also covers the submitter."""


# ------------------------------------------------------------------------------------------- RLJob: pod settings
# What a job's pods bring beyond what rlplace decides: data volumes, credentials, service accounts, tolerations,
# shared memory (docs/data.md). The field names and shapes are those of the Kubernetes PodSpec and Container,
# so a KubeRay or Kubeflow Trainer user recognises them; what rlplace owns (node affinity, GPU and robot
# requests, the plan mount and variables, the security context) is refused by the apiserver, by name.

#: Variables rlplace sets in the Ray pods or in each planned process (placement_core.placement.placement_env,
#: the launcher's): a pod setting cannot name them. Names starting with RLPLACE_ are refused as well.
PLAN_ENV_NAMES = (
    "RANK",
    "WORLD_SIZE",
    "NODE_RANK",
    "CLUSTER_NODE_RANK",
    "LOCAL_ACCELERATOR_RANK",
    "NODE_LOCAL_RANK",
    "NODE_LOCAL_WORLD_SIZE",
    "VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
    "ISOLATE_ACCELERATOR",
    "LOCAL_HARDWARE_RANKS",
    "NODE_GROUP_LABEL",
    "MASTER_ADDR",
)
#: Prefix of the volumes rlplace adds to its pods (the plan, the shared memory): not for users' volumes.
OWNED_VOLUME_PREFIX = "rlplace-"
#: Label key prefixes rlplace and KubeRay select pods by.
OWNED_LABEL_PREFIXES = ("rlplace.io/", "ray.io/")
#: Where rlplace mounts the plan (placement_core.contract.PLAN_MOUNT_DIR) and the shared memory.
PLAN_MOUNT_PATH = PLAN_MOUNT_DIR
SHM_MOUNT_PATH = "/dev/shm"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|[KMGTPE]i?)?$"
# Written without a group after a bracket, so the field reference's Markdown never reads `](` as a link.
DNS_LABEL_PATTERN = r"^[a-z0-9]$|^[a-z0-9][-a-z0-9]*[a-z0-9]$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]$|^[a-z0-9][-a-z0-9.]*[a-z0-9]$"


def _exactly_one(fields: tuple[str, ...]) -> str:
    """CEL: exactly one of the optional fields is set."""
    return " + ".join(f"(has(self.{f}) ? 1 : 0)" for f in fields) + " == 1"


def _refused(reason: str, opaque: bool = True) -> tuple[Any, AfterValidator]:
    """A PodSpec field rlplace owns: in the schema only so that the apiserver refuses it by name (a structural
    schema would otherwise drop an unknown field without a word). `opaque`: any object is accepted for the
    rule to refuse it."""

    def refuse(value: object) -> object:
        if value is not None:
            raise ValueError(reason)
        return value

    extra = {**cel("false", reason), **({"x-kubernetes-preserve-unknown-fields": True} if opaque else {})}
    bounds = {} if opaque else {"max_length": 253}  # bounded, for the CEL cost estimate
    return Field(None, json_schema_extra=extra, **bounds), AfterValidator(refuse)


#: Why each owned PodSpec field is refused (the apiserver prefixes the field's path).
PINNED_MESSAGE = "is owned by rlplace: each pod is pinned to its planned nodes (choose nodes with spec.nodeGroups)"
RESOURCES_MESSAGE = (
    "resources is owned by rlplace: GPU and robot requests come from the plan; CPU and memory are "
    "spec.ray.headResources and spec.ray.workerResources"
)
SECURITY_MESSAGE = "securityContext is owned by rlplace: its pods keep the Pod Security posture rlplace sets"


class LocalObjectReference(_Camel):
    """A reference to an object in the job's namespace, by name."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the object (a Secret for imagePullSecrets)."""


class KeyToPath(_Camel):
    """One key of a Secret or ConfigMap projected to a file."""

    key: str = Field(max_length=253)
    """The key to project."""
    path: str = Field(max_length=1024)
    """Relative path of the file in the volume."""
    mode: int | None = Field(None, ge=0, le=0o777)
    """File mode bits (decimal or octal in YAML)."""


class PersistentVolumeClaimVolumeSource(_Camel):
    """A PersistentVolumeClaim in the job's namespace."""

    claim_name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the claim."""
    read_only: bool = False
    """Mount the claim read-only."""


class SecretVolumeSource(_Camel):
    """A Secret's keys as files."""

    secret_name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the Secret in the job's namespace."""
    items: list[KeyToPath] = Field([], max_length=64)
    """Keys to project (default: every key, as a file of its name)."""
    default_mode: int | None = Field(None, ge=0, le=0o777)
    """Mode bits of the files (default 0644)."""
    optional: bool | None = None
    """Whether the Secret may be missing."""


class ConfigMapVolumeSource(_Camel):
    """A ConfigMap's keys as files."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the ConfigMap in the job's namespace."""
    items: list[KeyToPath] = Field([], max_length=64)
    """Keys to project (default: every key, as a file of its name)."""
    default_mode: int | None = Field(None, ge=0, le=0o777)
    """Mode bits of the files (default 0644)."""
    optional: bool | None = None
    """Whether the ConfigMap may be missing."""


class EmptyDirVolumeSource(_Camel):
    """A scratch directory that lives as long as the pod."""

    medium: Literal["", "Memory"] = ""
    """"" (the node's disk) or Memory (tmpfs, counted against the container's memory limit)."""
    size_limit: str | None = Field(None, pattern=QUANTITY_PATTERN, max_length=64)
    """Largest size, e.g. 10Gi."""


class HostPathVolumeSource(_Camel):
    """A directory or file of the node (the cluster's Pod Security admission may forbid it)."""

    path: str = Field(max_length=4096)
    """Path on the node."""
    type: Literal[
        "", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"
    ] = ""
    """What must exist at the path ("" checks nothing)."""


class NFSVolumeSource(_Camel):
    """An NFS export."""

    server: str = Field(max_length=253)
    """Host name or IP address of the NFS server."""
    path: str = Field(max_length=4096)
    """Exported path."""
    read_only: bool = False
    """Mount the export read-only."""


class CSIVolumeSource(_Camel):
    """An inline volume of a CSI driver (object-storage mounts such as a FUSE bucket driver)."""

    driver: str = Field(max_length=253)
    """Name of the CSI driver."""
    read_only: bool = False
    """Mount the volume read-only."""
    fs_type: str | None = Field(None, max_length=64)
    """Filesystem type, passed to the driver."""
    volume_attributes: dict[str, Annotated[str, Field(max_length=4096)]] = Field({}, max_length=64)
    """Driver-specific attributes."""
    node_publish_secret_ref: LocalObjectReference | None = None
    """A Secret with the driver's credentials."""


_VOLUME_SOURCES = ("persistentVolumeClaim", "secret", "configMap", "emptyDir", "hostPath", "nfs", "csi")


class Volume(
    _Camel,
    json_schema_extra=cel(
        _exactly_one(_VOLUME_SOURCES),
        "a volume needs exactly one source: persistentVolumeClaim, secret, configMap, emptyDir, hostPath, nfs or csi",
    ),
):
    """A pod volume (the Kubernetes Volume, with its most used sources)."""

    name: str = Field(
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        json_schema_extra=cel(
            f"self.matches(r'{DNS_LABEL_PATTERN}') && !self.startsWith('{OWNED_VOLUME_PREFIX}')",
            f"name must be a DNS label not starting with {OWNED_VOLUME_PREFIX} (rlplace's own volumes: the plan, "
            "the shared memory)",
        ),
    )
    """Volume name, referred to by volumeMounts."""
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    """A PersistentVolumeClaim (model weights, datasets, checkpoints)."""
    secret: SecretVolumeSource | None = None
    """A Secret's keys as files."""
    config_map: ConfigMapVolumeSource | None = None
    """A ConfigMap's keys as files."""
    empty_dir: EmptyDirVolumeSource | None = None
    """A scratch directory (for /dev/shm use shmSize)."""
    host_path: HostPathVolumeSource | None = None
    """A path of the node."""
    nfs: NFSVolumeSource | None = None
    """An NFS export."""
    csi: CSIVolumeSource | None = None
    """An inline CSI volume."""


def _mount_path_allowed(path: str) -> str:
    if path in (PLAN_MOUNT_PATH, SHM_MOUNT_PATH) or path.startswith(PLAN_MOUNT_PATH + "/"):
        raise ValueError(MOUNT_PATH_MESSAGE)
    return path


MOUNT_PATH_MESSAGE = (
    f"mountPath {PLAN_MOUNT_PATH} is the plan's mount, owned by rlplace; for {SHM_MOUNT_PATH} set shmSize"
)


class VolumeMount(_Camel):
    """Where a volume appears in the container (the Kubernetes VolumeMount)."""

    name: str = Field(max_length=63)
    """Name of a volume of the same pod settings (or of the settings it extends)."""
    mount_path: Annotated[
        str,
        Field(
            max_length=4096,
            json_schema_extra=cel(
                f"self != '{PLAN_MOUNT_PATH}' && !self.startsWith('{PLAN_MOUNT_PATH}/') && self != '{SHM_MOUNT_PATH}'",
                MOUNT_PATH_MESSAGE,
            ),
        ),
        AfterValidator(_mount_path_allowed),
    ]
    """Path in the container; not /etc/rlplace (the plan) nor /dev/shm (shmSize)."""
    sub_path: str | None = Field(None, max_length=4096)
    """Path inside the volume to mount instead of its root."""
    read_only: bool = False
    """Mount read-only."""


class EnvSourceRef(_Camel):
    """A Secret or ConfigMap whose keys become variables."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the object in the job's namespace."""
    optional: bool | None = None
    """Whether it may be missing."""


class EnvFromSource(
    _Camel,
    json_schema_extra=cel(
        _exactly_one(("secretRef", "configMapRef")), "envFrom needs exactly one of secretRef, configMapRef"
    ),
):
    """Every key of a Secret or ConfigMap as an environment variable (the Kubernetes EnvFromSource). Variables
    rlplace sets are written as `env` and so always win over these."""

    prefix: str | None = Field(None, max_length=253)
    """Prefix added to every variable name."""
    secret_ref: EnvSourceRef | None = None
    """The Secret."""
    config_map_ref: EnvSourceRef | None = None
    """The ConfigMap."""


_ENV_RULE = "!self.startsWith('RLPLACE_') && !(self in [" + ", ".join(f"'{n}'" for n in PLAN_ENV_NAMES) + "])"
ENV_NAME_MESSAGE = "name is a variable rlplace sets from the plan (RLPLACE_*, " + ", ".join(PLAN_ENV_NAMES) + ")"


def _env_name_allowed(name: str) -> str:
    if name.startswith("RLPLACE_") or name in PLAN_ENV_NAMES:
        raise ValueError(ENV_NAME_MESSAGE)
    return name


class PodEnvVar(_Camel):
    """An environment variable of the pod's main container."""

    name: Annotated[
        str,
        Field(
            pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=253, json_schema_extra=cel(_ENV_RULE, ENV_NAME_MESSAGE)
        ),
        AfterValidator(_env_name_allowed),
    ]
    """Variable name; not one rlplace sets from the plan."""
    value: str = Field("", max_length=32768)
    """Variable value."""


class Toleration(
    _Camel,
    json_schema_extra=cel(
        "(has(self.key) && self.key != '') || self.operator == 'Exists'",
        "a toleration without a key needs operator Exists (it then tolerates every taint)",
        (
            "self.operator != 'Exists' || !has(self.value) || self.value == ''",
            "a toleration with operator Exists has no value",
        ),
    ),
):
    """Lets the pod run on a node with a matching taint (the Kubernetes Toleration)."""

    key: str | None = Field(None, max_length=317)
    """Taint key; empty with operator Exists matches every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Equal: the taint's value equals `value`; Exists: any value."""
    value: str | None = Field(None, max_length=63)
    """Taint value, for Equal."""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""
    """The taint effect matched; empty matches all."""
    toleration_seconds: int | None = None
    """For NoExecute: how long the pod stays after the taint appears (default: forever)."""


LABELS_MESSAGE = "label keys under rlplace.io/ and ray.io/ are owned by rlplace and KubeRay"
_LABELS_RULE = "self.all(k, " + " && ".join(f"!k.startsWith('{p}')" for p in OWNED_LABEL_PREFIXES) + ")"


def _labels_allowed(labels: dict[str, str]) -> dict[str, str]:
    if any(key.startswith(OWNED_LABEL_PREFIXES) for key in labels):
        raise ValueError(LABELS_MESSAGE)
    return labels


class PodOptions(_Camel):
    """What a pod brings to the job, with the names of the Kubernetes PodSpec and Container fields. Lists add
    to those of the wider settings (the same volume name, mount path or Secret name replaces the wider entry);
    a single value replaces the wider one."""

    labels: Annotated[
        dict[str, Annotated[str, Field(max_length=63)]],
        Field(max_length=64, json_schema_extra=cel(_LABELS_RULE, LABELS_MESSAGE)),
        AfterValidator(_labels_allowed),
    ] = {}
    """Extra pod labels (not under rlplace.io/ or ray.io/)."""
    annotations: dict[str, Annotated[str, Field(max_length=65536)]] = Field({}, max_length=64)
    """Extra pod annotations."""
    service_account_name: str | None = Field(None, pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """ServiceAccount the pod runs as (for example one bound to cloud credentials)."""
    image_pull_secrets: list[LocalObjectReference] = Field([], max_length=16)
    """Secrets with the credentials of private registries."""
    tolerations: list[Toleration] = Field([], max_length=32)
    """Taints the pod tolerates. Admission puts a job only on nodes whose NoSchedule and NoExecute taints its
    workers tolerate."""
    priority_class_name: str | None = Field(None, pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """PriorityClass of the pod (Kubernetes scheduling and preemption; the queue order is spec.priority)."""
    volumes: list[Volume] = Field([], max_length=32)
    """Volumes of the pod."""
    volume_mounts: list[VolumeMount] = Field([], max_length=32)
    """Mounts of the pod's main container (ray-head, ray-worker or the submitter)."""
    env: list[PodEnvVar] = Field([], max_length=64)
    """Variables of the main container."""
    env_from: list[EnvFromSource] = Field([], max_length=16)
    """Secrets and ConfigMaps whose keys become variables of the main container."""
    shm_size: str | None = Field(None, pattern=QUANTITY_PATTERN, max_length=64)
    """Size of /dev/shm (an in-memory emptyDir, counted against the container's memory limit), e.g. 1Gi, for
    NCCL and Ray's object store. Default: the container runtime's (64 MiB)."""
    affinity: Annotated[dict[str, Any] | None, *_refused(f"affinity {PINNED_MESSAGE}")] = None
    """Not settable: rlplace pins each pod to the nodes of the plan."""
    node_selector: Annotated[dict[str, Any] | None, *_refused(f"nodeSelector {PINNED_MESSAGE}")] = None
    """Not settable: rlplace pins each pod to the nodes of the plan."""
    node_name: Annotated[str | None, *_refused(f"nodeName {PINNED_MESSAGE}", opaque=False)] = None
    """Not settable: rlplace pins each pod to the nodes of the plan."""
    resources: Annotated[dict[str, Any] | None, *_refused(RESOURCES_MESSAGE)] = None
    """Not settable: GPU and robot requests come from the plan; CPU and memory from spec.ray."""
    security_context: Annotated[dict[str, Any] | None, *_refused(SECURITY_MESSAGE)] = None
    """Not settable: rlplace sets the Pod Security posture of its pods."""


class NodeGroupPodOptions(PodOptions):
    """Settings for the workers on one NodeGroup's nodes (for example its taint's toleration)."""

    node_group: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """The NodeGroup (one of spec.nodeGroups)."""


class OnMissingObject(enum.StrEnum):
    FAIL = "Fail"
    RETRY = "Retry"


class PodSettings(PodOptions):
    """Settings of every pod of the job (head, workers and the RayJob's submitter), refined per pod kind and
    per NodeGroup: head, workers, submitter and workerNodeGroups add to them (docs/data.md)."""

    on_missing_object: OnMissingObject = OnMissingObject.FAIL
    """When a pod cannot start because an object it references does not exist (a Secret or ConfigMap of a
    volume, envFrom or env, a PersistentVolumeClaim, a hostPath directory): Fail ends the job at once, the
    object named in its status and its nodes given back; Retry gives the nodes back and tries again with
    backoff, for an object that something else makes and that will appear (docs/data.md)."""

    head: PodOptions = PodOptions()
    """The Ray head (it runs the driver)."""
    workers: PodOptions = PodOptions()
    """Every Ray worker."""
    submitter: PodOptions = PodOptions()
    """KubeRay's submitter pod (run.submissionMode K8sJobMode)."""
    worker_node_groups: Annotated[
        list[NodeGroupPodOptions],
        Field(
            max_length=8,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["nodeGroup"]},
        ),
    ] = []
    """The workers on the nodes of one NodeGroup, after `workers` (a node in several groups gets each)."""

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> PodSettings:
        """Every mount of a pod names a volume of that pod (a level's mounts may use a wider level's volumes):
        KubeRay could not create the pod otherwise, and would only say so in its own events."""
        pods = [("head", [self.head]), ("submitter", [self.submitter]), ("workers", [self.workers])]
        pods += [(f"workers of {g.node_group}", [self.workers, g]) for g in self.worker_node_groups]
        for pod, levels in pods:
            volumes = {v.name for level in (self, *levels) for v in level.volumes}
            for mount in (m for level in (self, *levels) for m in level.volume_mounts):
                if mount.name not in volumes:
                    known = ", ".join(sorted(volumes)) or "none"
                    raise ValueError(f"volumeMount '{mount.name}' of the {pod} names no volume (volumes: {known})")
        return self


class AutoPlacement(_Camel):
    """Auto placement (docs/autoplace.md): search the placement from a profile, and re-place a running job from
    the step times it reports."""

    enabled: bool = False
    """Search the placement with the shortest predicted iteration time from `profile` (or the rlplace.io/profile
    annotation) instead of using componentPlacement."""
    apply: Apply = Apply.never
    """What to do with status.recommendation (computed from status.progress while the job runs): Never (only
    show it), OnRestart (use it the next time the job is planned again), Auto (re-place the job at the next
    iteration report once the predicted gain is at least minGain)."""
    min_gain: Annotated[float, Field(ge=0, le=1)] = 0.10
    """Least predicted gain (fraction of the iteration time) for a recommendation to be applied."""
    cooldown: Annotated[int, Field(ge=0, le=604800)] = 600
    """Seconds after a re-placement before Auto re-places the job again."""
    cost_model: CostModel = CostModel.scaling
    """The cost model of the search and of the conversion of measured times (scaling or linear)."""
    profile_first: bool = False
    """Profile the job before placing it (seed 000's procedure, automated): it starts collocated, every component
    on all the GPUs it is given (whatever componentPlacement says; with `enabled` no profile is needed), its
    first reported iterations are the profile, and the placement searched from it is recommended; with apply
    Auto the job is then re-placed onto it whatever minGain says, unless it is collocated itself
    (docs/autoplace.md). Not with spec.profile or the rlplace.io/profile annotation (the run measures them)."""


class SubmissionMode(enum.StrEnum):
    K8S_JOB = "K8sJobMode"
    SIDECAR = "SidecarMode"


class RestartPolicy(enum.StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"


class Framework(enum.StrEnum):
    """Whose code starts the job's processes (docs/frameworks.md)."""

    RLPLACE = "rlplace"
    """The entrypoint is a driver written against rlplace's launcher (placement_core.launcher.launch_all)."""
    RLINF = "rlinf"
    """The entrypoint is the user's RLinf program, unchanged: RLinf's own scheduler places the processes."""
    VERL = "verl"
    """The entrypoint is the user's veRL program, unchanged: Ray assigns the GPU ids of veRL's resource pools;
    rlplace provisions the plan's nodes and GPUs and observes what each process got (not enforced)."""


class OnBindingMismatch(enum.StrEnum):
    FAIL = "Fail"
    REPORT = "Report"


FRAMEWORK_NEEDS_ENTRYPOINT_MESSAGE = "framework rlinf or verl runs the framework's own program: it needs an entrypoint"


#: Default of spec.run.maxRestarts: a few lost nodes in a long run, not a crash loop.
DEFAULT_MAX_RESTARTS = 3
BACKOFF_WITH_RESTARTS_MESSAGE = (
    "run.backoffLimit > 0 needs run.restartPolicy Never: KubeRay's retries rebuild the cluster on the same nodes, "
    "rlplace's restarts re-place it on healthy ones; use one of the two"
)


class RunSpec(
    _Camel,
    json_schema_extra=cel(
        "!has(self.backoffLimit) || self.backoffLimit == 0 || "
        "(has(self.restartPolicy) && self.restartPolicy == 'Never')",
        BACKOFF_WITH_RESTARTS_MESSAGE,
    ),
):
    """How the driver runs: the settings of the KubeRay RayJob that submits spec.entrypoint."""

    submission_mode: SubmissionMode = SubmissionMode.K8S_JOB
    """K8sJobMode: a Kubernetes Job named after the RLJob runs `ray job submit` and streams the driver's log
    (`kubectl logs job/<name>`); SidecarMode: a container in the head pod does (no extra pod)."""
    shutdown_after_job_finishes: bool = True
    """Delete the RayCluster when the driver ends, freeing its GPUs (the RLJob and its status stay)."""
    ttl_seconds_after_finished: int = Field(60, ge=0)
    """Seconds the RayCluster is kept after the driver ends (to read Ray's own logs) before it is deleted;
    only with shutdownAfterJobFinishes."""
    backoff_limit: int = Field(0, ge=0, le=100)
    """How many times KubeRay retries a failed driver, each time on a new RayCluster on the same nodes (only
    with restartPolicy Never: rlplace's own restarts re-place the job instead)."""
    active_deadline_seconds: int | None = Field(None, ge=1)
    """Seconds the driver may run; then it is stopped and the job Failed with reason DeadlineExceeded."""
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    """OnFailure: when the driver fails because a process, pod or node was lost (a pod deleted, evicted or
    OOMKilled, a node NotReady or gone), the operator stops the attempt, gives its nodes back, leaves the bad
    node out for this job and starts a new attempt on the same placement on healthy free nodes (Queued until
    there are). Never: the job ends Failed, the cause named (docs/restarts.md)."""
    max_restarts: int = Field(DEFAULT_MAX_RESTARTS, ge=0, le=100)
    """Restarts allowed with restartPolicy OnFailure (attempts = restarts + 1); past them the job ends Failed
    with the last cause."""

    @model_validator(mode="after")
    def _one_restart_mechanism(self) -> RunSpec:
        if self.backoff_limit > 0 and self.restart_policy is not RestartPolicy.NEVER:
            raise ValueError(BACKOFF_WITH_RESTARTS_MESSAGE)
        return self


#: spec.checkpoint.preemptionGraceSeconds when not set.
DEFAULT_PREEMPTION_GRACE_SECONDS = 60


class Checkpoint(_Camel):
    """A volume that outlives the job's attempts, mounted at the same path on the head and every worker; its
    path is given to the driver as RLPLACE_CHECKPOINT_DIR (placement_core.launcher.checkpoint)."""

    volume: Volume
    """The volume (a persistentVolumeClaim on a real cluster: every node of the job must be able to mount it;
    hostPath only where every node sees the same directory)."""
    mount_path: Annotated[
        str,
        Field(
            max_length=4096,
            pattern=r"^/.*",
            json_schema_extra=cel(
                f"self.startsWith('/') && self != '{PLAN_MOUNT_PATH}' && !self.startsWith('{PLAN_MOUNT_PATH}/') "
                f"&& self != '{SHM_MOUNT_PATH}'",
                f"mountPath must be an absolute path, not {PLAN_MOUNT_PATH} nor {SHM_MOUNT_PATH}",
            ),
        ),
        AfterValidator(_mount_path_allowed),
    ] = "/rlplace/checkpoint"
    """Where it is mounted in the Ray containers."""
    preemption_grace_seconds: int = Field(DEFAULT_PREEMPTION_GRACE_SECONDS, ge=0, le=3600)
    """When Kueue preempts the job: how long its driver may take to save a checkpoint on request (docs/driver.md)
    before its Ray pods are deleted; it resumes from that checkpoint when admitted again."""


WORKER_NODE_GROUPS_MESSAGE = "pods.workerNodeGroups[].nodeGroup must be one of spec.nodeGroups"


PROFILE_FIRST_WITH_PROFILE_MESSAGE = (
    "autoPlacement.profileFirst measures the profile itself: remove spec.profile or profileFirst"
)


class RLJobSpec(
    _Camel,
    json_schema_extra=cel(
        "(has(self.autoPlacement) && has(self.autoPlacement.enabled) && self.autoPlacement.enabled) || "
        "(has(self.componentPlacement) && size(self.componentPlacement) > 0)",
        "componentPlacement needs at least one entry unless autoPlacement.enabled is true",
        (
            # KubeRay suspends only a RayJob that deletes its cluster; the default (true) applies when unset.
            "!(has(self.suspend) && self.suspend) || !has(self.entrypoint) || !has(self.run) || "
            "!has(self.run.shutdownAfterJobFinishes) || self.run.shutdownAfterJobFinishes",
            "a job with an entrypoint can be suspended only with run.shutdownAfterJobFinishes true",
        ),
        (
            "!has(self.pods) || !has(self.pods.workerNodeGroups) || "
            "self.pods.workerNodeGroups.all(g, g.nodeGroup in self.nodeGroups)",
            WORKER_NODE_GROUPS_MESSAGE,
        ),
        (
            "!has(self.autoPlacement) || !has(self.autoPlacement.profileFirst) || !self.autoPlacement.profileFirst"
            " || !has(self.profile)",
            PROFILE_FIRST_WITH_PROFILE_MESSAGE,
        ),
        (
            "!has(self.framework) || self.framework == 'rlplace' || has(self.entrypoint)",
            FRAMEWORK_NEEDS_ENTRYPOINT_MESSAGE,
        ),
    ),
):
    """One RL training job: its node groups, its component placement, and the Ray cluster that runs it."""

    node_groups: Annotated[
        list[Annotated[str, Field(pattern=r"^[a-z0-9]+([.-][a-z0-9]+)*$", max_length=253)]],
        Field(min_length=1, max_length=64),
    ]
    """NodeGroups that form the job's cluster, in node-rank order."""
    component_placement: Annotated[
        list[PlacementEntry],
        Field(
            max_length=64,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["components"]},
        ),
    ] = []
    """cluster.component_placement as a list of entries (one per key). Empty with autoPlacement.enabled."""
    auto_placement: AutoPlacement = AutoPlacement()
    """Auto placement: `enabled` searches the placement from `profile`; `apply`, `minGain`, `cooldown` say what
    to do with the placement recommended from the job's measured step times."""
    placement_mode: PlacementMode = PlacementMode.HYBRID
    """hybrid (any components on any resources) or modelParallel (reasoning: actor, rollout, reward, ...)."""
    model_parallel: ModelParallel = ModelParallel()
    """Model-parallel sizes, for placementMode modelParallel and auto placement."""
    algorithm: Algorithm = Algorithm()
    """Algorithm settings for placement checks and auto placement."""
    profile: Profile | None = None
    """Profiled component costs for auto placement."""
    isolate_accelerators: bool = True
    """Each process sees only its own GPUs (CUDA_VISIBLE_DEVICES); false: all GPUs of its node."""
    ray: RaySpec = RaySpec()
    """The RayCluster."""
    entrypoint: str | None = Field(None, max_length=MAX_ENTRYPOINT_CHARS)
    """Driver command. With it the job runs as a KubeRay RayJob that submits this command (it runs on the Ray
    head, where the plan is mounted) and the job ends Succeeded or Failed with the driver; without it the job
    is a long-lived RayCluster for interactive use."""
    run: RunSpec = RunSpec()
    """How the driver runs (KubeRay RayJob settings); used only with an entrypoint."""
    framework: Framework = Framework.RLPLACE
    """Whose program the entrypoint runs: rlplace (a driver using rlplace's launcher), rlinf or verl (the user's
    RLinf or veRL program, unchanged). With rlinf every Ray pod gets RLINF_NODE_RANK (the head after the
    workers), the entrypoint gets `cluster.num_nodes=<workers + 1>` appended, and each process's binding is
    checked against the plan from the probe rlplace mounts in the pods and Ray's State API. With verl the Ray
    cluster has exactly the plan's nodes and GPUs, Ray assigns the GPU ids, and what each process got is
    observed and checked per pool (status.observedPlacement; docs/frameworks.md)."""
    on_binding_mismatch: OnBindingMismatch = OnBindingMismatch.FAIL
    """A framework job whose process runs elsewhere than planned: Fail stops it (phase Failed, the rank named in
    BindingVerified); Report keeps it running with BindingVerified False."""
    suspend: bool = False
    """Stop the job and free its GPUs, keeping the job: the RayCluster is removed (with an entrypoint the
    RayJob is suspended, which stops the driver). Set back to false to start it again (the driver starts over)."""
    checkpoint: Checkpoint | None = None
    """A volume the driver keeps its checkpoints on across restarts (RLPLACE_CHECKPOINT_DIR)."""
    pods: PodSettings = PodSettings()
    """What the job's pods bring: volumes and mounts, envFrom, service account, imagePullSecrets, tolerations,
    labels, annotations, priorityClassName, shared memory; for all pods, the head, the workers (all, or those of
    one NodeGroup) and the submitter."""
    priority: int = 0
    """Queue order among jobs waiting for free nodes: higher first, then older first (creationTimestamp). A
    waiting job is passed only by jobs of higher priority; running jobs are never stopped for it."""

    @model_validator(mode="after")
    def _worker_node_groups_are_the_jobs(self) -> RLJobSpec:
        if any(g.node_group not in self.node_groups for g in self.pods.worker_node_groups):
            raise ValueError(WORKER_NODE_GROUPS_MESSAGE)
        return self

    @property
    def framework_job(self) -> bool:
        """The framework's own program starts the processes (not rlplace's launcher)."""
        return self.framework is not Framework.RLPLACE

    @model_validator(mode="after")
    def _framework_runs_an_entrypoint(self) -> RLJobSpec:
        if self.framework_job and not self.entrypoint:
            raise ValueError(FRAMEWORK_NEEDS_ENTRYPOINT_MESSAGE)
        return self

    @model_validator(mode="after")
    def _profile_first_measures_the_profile(self) -> RLJobSpec:
        if self.auto_placement.profile_first and self.profile is not None:
            raise ValueError(PROFILE_FIRST_WITH_PROFILE_MESSAGE)
        return self


class JobPhase(enum.StrEnum):
    PENDING = "Pending"
    QUEUED = "Queued"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: Phases in which a job's RayCluster exists and holds its planned nodes.
LIVE_PHASES = frozenset({JobPhase.PROVISIONING, JobPhase.RUNNING})


def is_live(status: Mapping[str, Any]) -> bool:
    """Whether a job (by its status on the wire) runs: its RayCluster exists and holds the planned nodes."""
    return status.get("phase") in LIVE_PHASES and bool(status.get("rayCluster"))


class ComponentSummary(_Camel):
    """Where one component runs."""

    name: str
    """Component name."""
    processes: int
    """Number of processes."""
    gpus: int
    """Distinct GPUs (hardware units) it uses."""
    nodes: list[str]
    """Kubernetes nodes it runs on."""


class ResolvedPlacement(_Camel):
    """The placement the operator applied."""

    mode: str
    """collocated, disaggregated, hybrid or auto."""
    components: list[ComponentSummary] = []
    """Per component: processes, GPUs, nodes."""


class ComponentBinding(_Camel):
    """How many of a component's processes checked, from inside, that they run as planned."""

    name: str
    """Component name."""
    verified: int
    """Processes whose environment, node and GPUs matched their plan entry."""
    processes: int
    """Processes the driver launched."""


class ObservedProcesses(_Camel):
    """The processes of a component on one node and the GPU ids Ray gave each (observed, not enforced)."""

    component: str
    """Component name."""
    node: str
    """Kubernetes node name."""
    ranks: list[int]
    """The plan's ranks of the component's processes on the node, each matched to a process seen there (in the
    framework's rank order)."""
    gpus: list[str]
    """Per process (in the order of ranks): its GPU ids, comma-separated."""


class Restart(_Camel):
    """One restart of the job: its driver submitted again, or its Ray cluster given back and queued again."""

    attempt: int
    """The attempt that this restart began (2: the first restart)."""
    time: str
    """When the operator saw it (RFC 3339)."""
    reason: str
    """Why, as a CamelCase reason (HeadPodReplaced, DriverResubmitted, ImagePullFailed, BindTimeout, ...)."""
    message: str
    """What happened, in one line."""
    nodes_replaced: list[str] = []
    """Nodes the job gave up for this restart (left out of its next attempts), when a node was at fault."""
    in_place: bool = False
    """KubeRay ran the driver again within the same RayJob (a new head pod, its submitter retried): the operator
    made no new RayJob for this attempt."""


class ExcludedNode(_Camel):
    """A node left out of the job's attempts (until its spec changes) because it failed the job."""

    name: str
    """Kubernetes node name."""
    reason: str
    """Why, in one line (NotReady, unreachable, evicted, gone)."""


class GpuClaim(_Camel):
    """The GPUs of one node a job's worker pod claims through DRA (a NodeGroup with gpuAllocation: dra)."""

    node: str
    """Kubernetes node name."""
    devices: list[str]
    """The claimed devices, by the driver's device names (gpu-4, ...), in the node's GPU order."""
    host_gpus: list[int]
    """Their positions among the node's GPUs (the host's GPU numbers, PCI order)."""
    template: str
    """The ResourceClaimTemplate the worker pod's claim is made from."""


#: Restarts kept in status (the oldest go first): the status stays small however often a job restarts.
MAX_RESTARTS_KEPT = 10


class ComponentSeconds(_Camel):
    """One component's busy seconds per iteration."""

    name: str
    """Component name, as the driver timed it."""
    seconds: float
    """Median seconds the component was busy per iteration, over the last reported iterations."""


class Progress(_Camel):
    """Step times the job's driver reported (docs/progress.md): the medians of its last reported iterations."""

    iteration: int
    """The latest iteration reported."""
    iteration_seconds: float
    """Median wall-clock seconds per iteration."""
    components: list[ComponentSeconds] = []
    """Per component: median busy seconds per iteration, in the order the driver timed them."""
    bottleneck: str | None = None
    """The component with the largest median busy seconds."""
    weight_sync_seconds: float | None = None
    """Seconds of the latest iteration's weight sync, when the driver timed it."""
    checkpoint_step: int | None = None
    """The step of the newest checkpoint the driver reported (a new attempt resumes after it), when it has one."""
    updated_at: str
    """When the latest reported iteration ended (RFC 3339)."""


class Recommendation(_Camel):
    """The placement auto placement finds for the collocated profile derived from status.progress (docs/autoplace.md)."""

    component_placement: list[AppliedPlacementEntry]
    """The recommended componentPlacement."""
    mode: str
    """collocated or disaggregated."""
    predicted_iteration_seconds: float
    """Its predicted seconds per iteration."""
    current_predicted_seconds: float
    """The current placement's predicted seconds per iteration, under the same model and profile (never below
    the observed time: what the model does not price is added to it)."""
    observed_iteration_seconds: float
    """The measured median seconds per iteration (status.progress)."""
    gain: float
    """1 - predicted / observed: the fraction of the observed iteration time it is predicted to save."""
    iteration: int
    """The reported iteration it was computed from."""
    streak: int = 0
    """Reports in a row whose recommendation promised minGain or more (Auto needs 3); while profiling, the
    reported iterations of the profiling run."""
    profiling: bool = False
    """Computed from the collocated profiling run (autoPlacement.profileFirst) while it lasts: until 3 iterations
    are measured, and with apply Auto until the job is re-placed."""
    decision: str
    """Keep, ApplyNow (re-placed at the next iteration report) or AtRestart."""
    reason: str
    """Why, in one line."""
    since: str
    """When this placement was first recommended (RFC 3339)."""
    updated_at: str
    """When it was last computed (RFC 3339)."""


class Replacement(_Camel):
    """One re-placement of a running job from its recommendation."""

    time: str
    """When it was applied (RFC 3339)."""
    iteration: int
    """The reported iteration at which it was applied (the boundary)."""
    previous: list[AppliedPlacementEntry]
    """The componentPlacement it replaced."""
    component_placement: list[AppliedPlacementEntry]
    """The componentPlacement applied."""
    predicted_iteration_seconds: float
    """Predicted seconds per iteration of the new placement."""
    observed_iteration_seconds: float
    """Measured seconds per iteration before it."""


#: Re-placements kept in status (the oldest go first).
MAX_REPLACEMENTS_KEPT = 10


class KueueAdmission(_Camel):
    """How Kueue admitted a job that names a LocalQueue (label kueue.x-k8s.io/queue-name; docs/kueue.md)."""

    workload: str
    """The Workload rlplace made for the job (owned by it)."""
    cluster_queue: str | None = None
    """The ClusterQueue whose quota admitted it."""
    flavors: dict[str, str] = {}
    """NodeGroup -> the ResourceFlavor its nodes were granted from."""
    pods_ready: bool | None = None
    """rlplace told the Workload that every pod of the job runs (its PodsReady condition)."""


class Preemption(_Camel):
    """Kueue evicted the running job: rlplace asks its driver to checkpoint, then stops it and queues it again."""

    reason: str
    """Kueue's reason (Preempted, PodsReadyTimeout, Deactivated, ...)."""
    message: str = ""
    """Kueue's message."""
    since: str
    """When rlplace saw the eviction (RFC 3339): the checkpoint grace counts from here."""
    checkpoint_step: int | None = None
    """The driver's newest checkpoint then (status.progress.checkpointStep): a newer one ends the grace."""


class RLJobStatus(_Camel):
    """What the operator did with the job."""

    phase: JobPhase | None = None
    """Pending, Queued, Provisioning, Running, Suspended, Succeeded or Failed."""
    message: str | None = None
    """Why the job is Pending, Queued or Failed, why a change to a running job was not applied, or how its
    driver ended."""
    queue_position: int | None = None
    """Place in the queue of jobs waiting for free nodes (1: the next to start), while Queued."""
    waiting_for: str | None = None
    """What a Queued job waits for, e.g. `1 free node of 4090`."""
    conditions: list[Condition] = []
    """Validated, Placed, Admitted, RayClusterReady, NodeGroupChanged, StatusWritten; with an entrypoint also
    DriverSucceeded and BindingVerified."""
    placement: ResolvedPlacement | None = None
    """The resolved placement."""
    applied_placement: list[AppliedPlacementEntry] = []
    """The componentPlacement actually applied (the search result with autoPlacement)."""
    predicted_iteration_time: float | None = None
    """Predicted seconds per iteration of the applied placement (auto placement)."""
    gpus: int | None = None
    """GPUs the job uses."""
    nodes: int | None = None
    """Nodes the job uses."""
    gpu_claims: list[GpuClaim] = []
    """On nodes of NodeGroups with gpuAllocation dra: the exact GPUs each worker pod claims."""
    ray_cluster: str | None = None
    """Name of the RayCluster."""
    ray_job: str | None = None
    """Name of the RayJob that runs the entrypoint."""
    driver_log: str | None = None
    """The command that prints the driver's log."""
    driver_start_time: str | None = None
    """When the driver started (RFC 3339)."""
    driver_end_time: str | None = None
    """When the driver ended (RFC 3339)."""
    binding: list[ComponentBinding] = []
    """Per component: processes that verified their own placement from inside, as the driver reported."""
    observed_placement: list[ObservedProcesses] = []
    """A framework job whose GPU ids Ray assigns (framework verl): what each process got, per component and
    node, as observed (not enforced)."""
    attempts: int | None = None
    """Driver submissions of the current spec: 1 once the driver started, +1 each time KubeRay submits it again
    (a lost head pod, a retried driver)."""
    restarts: list[Restart] = []
    """The last few restarts, oldest first: driver resubmissions and provisioning retries, with their reason."""
    restart_count: int | None = None
    """Restarts of the driver for the current spec (attempts - 1): rlplace's restarts under run.restartPolicy
    and KubeRay's resubmissions; compared with run.maxRestarts."""
    excluded_nodes: list[ExcludedNode] = []
    """Nodes unusable for this job (they failed one of its attempts): never planned for it again until its
    spec changes."""
    provisioning_retries: int | None = None
    """How often the job gave its nodes back after a provisioning failure that may pass (backoff doubles)."""
    retry_after: str | None = None
    """A Queued job after a provisioning failure is not admitted before this time (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation this status describes."""
    progress: Progress | None = None
    """Step times the driver reports while it runs (written by the operator's progress endpoint, at most every
    5 s)."""
    recommendation: Recommendation | None = None
    """The placement recommended from status.progress, its predicted and observed iteration times and gain."""
    replacements: list[Replacement] = []
    """Re-placements from recommendations for the current spec, oldest first (the last one is what the job
    runs)."""
    kueue: KueueAdmission | None = None
    """How Kueue admitted the job (a job that names a LocalQueue)."""
    preemption: Preemption | None = None
    """Kueue's eviction being carried out: the checkpoint asked for, the job's Ray pods stopping."""
    preemptions: int | None = None
    """How often Kueue moved the job for its current spec: preempted it, or replaced one of its nodes (not
    counted against run.maxRestarts)."""


def dump(model: BaseModel) -> dict[str, Any]:
    """Wire form: camelCase, no nulls."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)
