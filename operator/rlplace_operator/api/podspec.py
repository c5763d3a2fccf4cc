"""What a job's pods bring beyond what rlplace decides: the Kubernetes PodSpec and Container fields rlplace
accepts (core/v1 mirrors), the fields it owns and refuses, and how a pod's settings are refined per pod kind and
NodeGroup (docs/data.md).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from placement_core.contract import PLAN_ENV_NAMES, PLAN_MOUNT_DIR
from rlplace_operator.api.base import CamelModel, cel

# What a job's pods bring beyond what rlplace decides: data volumes, credentials, service accounts, tolerations,
# shared memory (docs/data.md). The field names and shapes are those of the Kubernetes PodSpec and Container,
# so a KubeRay or Kubeflow Trainer user recognises them; what rlplace owns (node affinity, GPU and robot
# requests, the plan mount and variables, the security context) is refused by the apiserver, by name.

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
#: A label key: an optional DNS-subdomain prefix and `/`, then a name of letters, digits, `-`, `_` and `.`.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


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


class LocalObjectReference(CamelModel):
    """A reference to an object in the job's namespace, by name."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the object (a Secret for imagePullSecrets)."""


class KeyToPath(CamelModel):
    """One key of a Secret or ConfigMap projected to a file."""

    key: str = Field(max_length=253)
    """The key to project."""
    path: str = Field(max_length=1024)
    """Relative path of the file in the volume."""
    mode: int | None = Field(None, ge=0, le=0o777)
    """File mode bits (decimal or octal in YAML)."""


class PersistentVolumeClaimVolumeSource(CamelModel):
    """A PersistentVolumeClaim in the job's namespace."""

    claim_name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the claim."""
    read_only: bool = False
    """Mount the claim read-only."""


class SecretVolumeSource(CamelModel):
    """A Secret's keys as files."""

    secret_name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the Secret in the job's namespace."""
    items: list[KeyToPath] = Field([], max_length=64)
    """Keys to project (default: every key, as a file of its name)."""
    default_mode: int | None = Field(None, ge=0, le=0o777)
    """Mode bits of the files (default 0644)."""
    optional: bool | None = None
    """Whether the Secret may be missing."""


class ConfigMapVolumeSource(CamelModel):
    """A ConfigMap's keys as files."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the ConfigMap in the job's namespace."""
    items: list[KeyToPath] = Field([], max_length=64)
    """Keys to project (default: every key, as a file of its name)."""
    default_mode: int | None = Field(None, ge=0, le=0o777)
    """Mode bits of the files (default 0644)."""
    optional: bool | None = None
    """Whether the ConfigMap may be missing."""


class EmptyDirVolumeSource(CamelModel):
    """A scratch directory that lives as long as the pod."""

    medium: Literal["", "Memory"] = ""
    """"" (the node's disk) or Memory (tmpfs, counted against the container's memory limit)."""
    size_limit: str | None = Field(None, pattern=QUANTITY_PATTERN, max_length=64)
    """Largest size, e.g. 10Gi."""


class HostPathVolumeSource(CamelModel):
    """A directory or file of the node (the cluster's Pod Security admission may forbid it)."""

    path: str = Field(max_length=4096)
    """Path on the node."""
    type: Literal[
        "", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"
    ] = ""
    """What must exist at the path ("" checks nothing)."""


class NFSVolumeSource(CamelModel):
    """An NFS export."""

    server: str = Field(max_length=253)
    """Host name or IP address of the NFS server."""
    path: str = Field(max_length=4096)
    """Exported path."""
    read_only: bool = False
    """Mount the export read-only."""


class CSIVolumeSource(CamelModel):
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
    CamelModel,
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


def mount_path_allowed(path: str) -> str:
    if path in (PLAN_MOUNT_PATH, SHM_MOUNT_PATH) or path.startswith(PLAN_MOUNT_PATH + "/"):
        raise ValueError(MOUNT_PATH_MESSAGE)
    return path


MOUNT_PATH_MESSAGE = (
    f"mountPath {PLAN_MOUNT_PATH} is the plan's mount, owned by rlplace; for {SHM_MOUNT_PATH} set shmSize"
)


class VolumeMount(CamelModel):
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
        AfterValidator(mount_path_allowed),
    ]
    """Path in the container; not /etc/rlplace (the plan) nor /dev/shm (shmSize)."""
    sub_path: str | None = Field(None, max_length=4096)
    """Path inside the volume to mount instead of its root."""
    read_only: bool = False
    """Mount read-only."""


class EnvSourceRef(CamelModel):
    """A Secret or ConfigMap whose keys become variables."""

    name: str = Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)
    """Name of the object in the job's namespace."""
    optional: bool | None = None
    """Whether it may be missing."""


class EnvFromSource(
    CamelModel,
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


class PodEnvVar(CamelModel):
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
    CamelModel,
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


class PodOptions(CamelModel):
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


def _keyed(entries: Iterable[Any], key: Callable[[Any], str]) -> list[Any]:
    """Entries in order, a later entry with the same key replacing the earlier one in its place."""
    result: dict[str, Any] = {}
    for entry in entries:
        result[key(entry)] = entry
    return list(result.values())


def merged(levels: Sequence[PodOptions]) -> PodOptions:
    """One pod's settings from the widest to the narrowest level: maps and lists add up (the same volume name,
    mount path, Secret or variable name replaces the wider entry), a single value replaces the wider one."""

    def last(attribute: str) -> Any:
        return next((getattr(o, attribute) for o in reversed(levels) if getattr(o, attribute) is not None), None)

    def joined(attribute: str) -> list[Any]:
        return [entry for o in levels for entry in getattr(o, attribute)]

    return PodOptions(
        labels={k: v for o in levels for k, v in o.labels.items()},
        annotations={k: v for o in levels for k, v in o.annotations.items()},
        service_account_name=last("service_account_name"),
        image_pull_secrets=_keyed(joined("image_pull_secrets"), lambda s: s.name),
        tolerations=joined("tolerations"),
        priority_class_name=last("priority_class_name"),
        volumes=_keyed(joined("volumes"), lambda v: v.name),
        volume_mounts=_keyed(joined("volume_mounts"), lambda m: m.mount_path),
        env=_keyed(joined("env"), lambda e: e.name),
        env_from=joined("env_from"),
        shm_size=last("shm_size"),
    )


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

    def for_head(self) -> PodOptions:
        """The head pod's settings (job-wide, then the head's)."""
        return merged([self, self.head])

    def for_submitter(self) -> PodOptions:
        """The submitter pod's settings (job-wide, then the submitter's)."""
        return merged([self, self.submitter])

    def for_workers(self, node_groups: Iterable[str]) -> PodOptions:
        """The settings of the worker on a node of these NodeGroups (job-wide, workers, then each group's in the
        order of workerNodeGroups)."""
        groups = set(node_groups)
        per_group = [g for g in self.worker_node_groups if g.node_group in groups]
        return merged([self, self.workers, *per_group])

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
