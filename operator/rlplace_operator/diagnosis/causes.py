"""Why a job's Ray pods cannot start, or which of its processes died: the `Cause` a diagnosis names, the reasons
it is named by, and how the API's objects (pods, events, nodes as `kubectl get -o json` items) are read for it.

Pure functions over the API's JSON objects and the job's `Plan`; no client, no kopf. `starting` names what keeps
a job's pods from starting, `losses` which process died and why; the reconcile puts the `Cause` in the RLJob's
condition and message. Messages are one line of at most api.conditions.MAX_LINE_CHARS and never carry a log dump.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from placement_core.plan import Plan
from rlplace_operator.api.conditions import MAX_LINE_CHARS, parse_time

# -- reasons (condition reasons on the RLJob) ------------------------------------------------------------------
POD_SECURITY_REFUSED = "PodSecurityRefused"
QUOTA_EXCEEDED = "QuotaExceeded"
LIMIT_RANGE_EXCEEDED = "LimitRangeExceeded"
ADMISSION_REFUSED = "AdmissionRefused"
POD_INVALID = "PodInvalid"
INVALID_IMAGE = "InvalidImage"
IMAGE_PULL_FAILED = "ImagePullFailed"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
CONTAINER_START_FAILED = "ContainerStartFailed"
IMAGE_RUNS_AS_ROOT = "ImageRunsAsRoot"
UNSCHEDULABLE = "Unschedulable"
POD_REJECTED = "PodRejected"
POD_DELETED = "PodDeleted"
POD_EVICTED = "PodEvicted"
OOM_KILLED = "OOMKilled"
NODE_NOT_READY = "NodeNotReady"
CONTAINER_EXITED = "ContainerExited"
WORKER_DIED = "WorkerDied"
SECRET_NOT_FOUND = "SecretNotFound"
CONFIGMAP_NOT_FOUND = "ConfigMapNotFound"
CLAIM_NOT_FOUND = "ClaimNotFound"
HOST_PATH_MISSING = "HostPathMissing"
CLAIM_NOT_BOUND = "ClaimNotBound"
VOLUME_NOT_READY = "VolumeNotReady"
INIT_CONTAINER_FAILED = "InitContainerFailed"
POD_NOT_STARTED = "PodNotStarted"
FRAMEWORK_MISSING = "FrameworkMissing"

#: Reasons that name an object the job's pods reference and that does not exist (the RLJob's
#: pods.onMissingObject says whether that ends the job or waits for the object with backoff).
MISSING_OBJECT_REASONS = frozenset({SECRET_NOT_FOUND, CONFIGMAP_NOT_FOUND, CLAIM_NOT_FOUND, HOST_PATH_MISSING})


#: An image that failed to pull gets this long (from the first failure) to succeed on a retry: a registry
#: hiccup is not a job failure, a missing image still is named well within the 30 s the operator promises.
IMAGE_PULL_GRACE = dt.timedelta(seconds=20)
#: A container that cannot be created (a missing ConfigMap, runAsNonRoot on a root image) gets as long.
CONTAINER_START_GRACE = dt.timedelta(seconds=20)
#: The scheduler may refuse a pod for a while in normal operation: the job before it on the same node may
#: still have terminating pods (30 s grace by default). Longer than that, the node really cannot take it.
UNSCHEDULABLE_GRACE = dt.timedelta(seconds=60)


@dataclass(frozen=True)
class StartBounds:
    """How long a pod of a job may take to start (the operator's --pod-start-grace and --pod-start-timeout)."""

    grace: dt.timedelta = dt.timedelta(seconds=10)
    """A pod bound to its node this long without its containers started is explained in the RLJob (and one
    that references a missing object ends the attempt). Short: the kubelet mounts volumes and starts containers
    in a second or two, and a missing Secret is reported by its first mount attempt."""
    timeout: dt.timedelta = dt.timedelta(seconds=180)
    """What may pass (a volume being attached, a claim being bound or provisioned, a sandbox being made) is
    waited for this long after the pod was bound (or created, for one the scheduler holds back for its claim);
    then the nodes are given back and the job retries with backoff."""


@dataclass(frozen=True)
class Cause:
    """Why a job's pods cannot start or its driver failed, as the RLJob's condition shows it."""

    reason: str
    """CamelCase condition reason (one of this module's constants)."""
    message: str
    """One line of at most MAX_LINE_CHARS: which pod (component, ranks, node) and the cause, quoted."""
    permanent: bool
    """Retrying cannot help (Pod Security, an invalid image name, an image that runs as root, an invalid pod):
    the job ends Failed."""
    node: str | None = field(default=None, compare=False)
    """The node of the pod that was lost, when a loss names one (what a restart may leave out)."""
    waiting: bool = False
    """Only said, not acted on: what may pass (a volume being attached, a claim being bound) within
    StartBounds.timeout. The job keeps its nodes and its status says what it waits for."""
    missing: str | None = None
    """The object that does not exist, as "Secret 'creds'" (a reason of MISSING_OBJECT_REASONS)."""
    holds: bool = False
    """Only said, and never given up on: no retry can fix it (the DeviceClass of its claims does not exist), and
    once the cause is gone the scheduler places the pod by itself, so the job keeps what it holds meanwhile."""


# -- reading the API's objects -------------------------------------------------------------------------------


def event_time(event: Mapping) -> dt.datetime | None:
    """When an event was last seen: lastTimestamp (core/v1 events), series or eventTime (events.k8s.io)."""
    series = event.get("series") or {}
    for value in (
        event.get("lastTimestamp"),
        series.get("lastObservedTime"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        if (parsed := parse_time(value)) is not None:
            return parsed
    return None


def event_first_time(event: Mapping) -> dt.datetime | None:
    return parse_time(event.get("firstTimestamp")) or parse_time(event.get("eventTime")) or event_time(event)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def cut(text: str, limit: int) -> str:
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def make_cause(
    reason: str,
    message: str,
    permanent: bool = False,
    node: str | None = None,
    *,
    waiting: bool = False,
    missing: str | None = None,
    holds: bool = False,
) -> Cause:
    return Cause(reason, cut(message, MAX_LINE_CHARS), permanent, node, waiting, missing, holds)


def ranges(ranks: Iterable[int]) -> str:
    """0,1,2,3,6 -> '0-3,6'."""
    parts: list[str] = []
    ordered = sorted(set(ranks))
    start = prev = None
    for rank in [*ordered, None]:
        if rank is not None and prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = rank
    return ",".join(parts)


#: The worker group of one node that operators before worker groups per node shape made (`node-<rank>`): their
#: pods, still running after an upgrade, say their node rank by it. Today's groups hold many nodes' pods, whose
#: rank is their node's in the plan.
WORKER_GROUP = re.compile(r"(?:^|-)node-(\d+)(?:-|$)")


@dataclass(frozen=True)
class PodView:
    """What a message says about a pod: its role in the Ray cluster, node rank, node."""

    name: str
    role: str
    """head, worker, submitter or pod."""
    node_rank: int | None
    node: str | None
    created: dt.datetime | None

    @property
    def order(self) -> tuple[int, int, str]:
        roles = {"head": 0, "worker": 1, "submitter": 2}
        return roles.get(self.role, 3), self.node_rank if self.node_rank is not None else -1, self.name

    def describe(self, plan: Plan | None = None) -> str:
        rank = self.node_rank
        if rank is None and plan is not None and self.node is not None:
            rank = next((p.node_rank for _, p in plan.processes() if p.node_name == self.node), None)
        where = [f"node rank {rank}"] if rank is not None and self.role == "worker" else []
        if self.node:
            where.append(f"node '{self.node}'")
        processes = processes_on(plan, self) if plan is not None else ""
        if processes:
            where.append(processes)
        label = {"head": "Ray head pod", "worker": "worker pod", "submitter": "submitter pod"}.get(self.role, "pod")
        return f"{label} '{self.name}'" + (f" ({', '.join(where)})" if where else "")


def pinned_node(spec: Mapping) -> str | None:
    """The node a pod's required node affinity names, when it names exactly one (rlplace pins by name)."""
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    names = [
        value
        for term in affinity.get("nodeSelectorTerms") or []
        for field in term.get("matchFields") or []
        if field.get("key") == "metadata.name"
        for value in field.get("values") or []
    ]
    return names[0] if len(names) == 1 else None


def group_rank(text: str | None) -> int | None:
    match = WORKER_GROUP.search(text or "")
    return int(match.group(1)) if match else None


def role_from_name(name: str) -> str:
    if "-head-" in name or name.endswith("-head"):
        return "head"
    if "-worker-" in name or name.endswith("-worker"):
        return "worker"
    return "pod"


def pod_view(pod: Mapping) -> PodView:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    name = meta.get("name") or meta.get("generateName") or "?"
    node_type = labels.get("ray.io/node-type")
    owners = {owner.get("kind") for owner in meta.get("ownerReferences") or []}
    if node_type in ("head", "worker"):
        role = node_type
    elif "batch.kubernetes.io/job-name" in labels or "job-name" in labels or "Job" in owners:
        role = "submitter"
    else:
        role = role_from_name(name)
    rank = group_rank(labels.get("ray.io/group")) if role == "worker" else None
    return PodView(
        name, role, rank, spec.get("nodeName") or pinned_node(spec), parse_time(meta.get("creationTimestamp"))
    )


def processes_on(plan: Plan, pod: PodView) -> str:
    """The plan's processes in a pod: 'actor ranks 0-3, rollout ranks 0-3' (by node rank, else node name)."""
    if pod.role != "worker":
        return ""
    ranks: dict[str, list[int]] = {}
    for component, process in plan.processes():
        if (pod.node_rank is not None and process.node_rank == pod.node_rank) or (
            pod.node_rank is None and pod.node is not None and process.node_name == pod.node
        ):
            ranks.setdefault(component.name, []).append(process.rank)
    return ", ".join(f"{name} rank{'s' if len(found) > 1 else ''} {ranges(found)}" for name, found in ranks.items())


def pod_views(pods: Sequence[Mapping]) -> list[tuple[PodView, Mapping]]:
    return sorted(((pod_view(pod), pod) for pod in pods), key=lambda item: item[0].order)


def container_statuses(pod: Mapping) -> list[Mapping]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def container_limit(pod: Mapping, container: str, resource: str) -> str | None:
    spec = pod.get("spec") or {}
    for entry in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if entry.get("name") == container:
            return ((entry.get("resources") or {}).get("limits") or {}).get(resource)
    return None


def pod_events(events: Sequence[Mapping], name: str) -> list[Mapping]:
    return [
        event
        for event in events
        if (event.get("involvedObject") or event.get("regarding") or {}).get("kind") == "Pod"
        and (event.get("involvedObject") or event.get("regarding") or {}).get("name") == name
    ]


def involved_object(event: Mapping) -> Mapping:
    return event.get("involvedObject") or event.get("regarding") or {}


def event_note(event: Mapping) -> str:
    return str(event.get("message") or event.get("note") or "")
