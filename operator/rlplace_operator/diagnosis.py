"""Why a job's Ray pods cannot start, or which of its processes died: one named cause from what the API shows.

Pure functions over the Kubernetes API's JSON objects (pods, events, nodes as `kubectl get -o json` items) and
the job's `Plan`; no client, no kopf. The reconcile reads the objects and puts the `Cause` in the RLJob's
condition and message.

Where the causes show:
- A pod the API server refused (Pod Security, ResourceQuota, LimitRange, an admission webhook or policy) never
  exists; its creator posts a Warning event with the API's error: KubeRay on the RayCluster
  (FailedToCreateHeadPod, FailedToCreateWorkerPod), KubeRay on the RayJob when the submitter Job is refused
  (FailedToCreateRayJobSubmitter), the Job controller on the submitter Job (FailedCreate).
- Image pulls, crashing containers and containers that cannot be created show in the pod's container statuses;
  a pod the scheduler cannot place in its PodScheduled condition; a pod the kubelet rejected in its phase.
- A pod bound to its node that has not started (ContainerCreating, PodInitializing, an init container that
  fails) is explained by its Warning events, read generally: the kubelet's FailedMount, FailedAttachVolume,
  FailedCreatePodSandBox, ... quoted as they are. What waiting cannot fix (a Secret, ConfigMap or claim that
  does not exist, a host path that is missing or of the wrong type) is named with the object; what may pass (a
  volume being attached, a claim being bound) is said while the job waits (`Cause.waiting`) and ends the attempt
  only after `StartBounds.timeout`.
- A lost process: the pod's deletionTimestamp, phase Failed (evicted), a terminated container (OOMKilled, exit
  code), its node's Ready condition, or, for a pod already gone, the kubelet's events about it (Killing,
  Evicted, ...). The driver's log adds the launcher's own line (WorkerDiedError names component and rank).

Messages are one line of at most MAX_MESSAGE_CHARS and never carry a log dump.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from placement_core.plan import Plan
from rlplace_operator.api.names import SUBMITTER_CONTAINER

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

#: A status message stays this short: the cause quoted, never a log.
MAX_MESSAGE_CHARS = 300

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
    """One line of at most MAX_MESSAGE_CHARS: which pod (component, ranks, node) and the cause, quoted."""
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


# -- reading the API's objects -------------------------------------------------------------------------------


def _time(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _event_time(event: Mapping) -> dt.datetime | None:
    """When an event was last seen: lastTimestamp (core/v1 events), series or eventTime (events.k8s.io)."""
    series = event.get("series") or {}
    for value in (
        event.get("lastTimestamp"),
        series.get("lastObservedTime"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        if (parsed := _time(value)) is not None:
            return parsed
    return None


def _event_first_time(event: Mapping) -> dt.datetime | None:
    return _time(event.get("firstTimestamp")) or _time(event.get("eventTime")) or _event_time(event)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _cut(text: str, limit: int) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _cause(
    reason: str,
    message: str,
    permanent: bool = False,
    node: str | None = None,
    *,
    waiting: bool = False,
    missing: str | None = None,
) -> Cause:
    return Cause(reason, _cut(message, MAX_MESSAGE_CHARS), permanent, node, waiting, missing)


def _ranges(ranks: Iterable[int]) -> str:
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
_WORKER_GROUP = re.compile(r"(?:^|-)node-(\d+)(?:-|$)")


@dataclass(frozen=True)
class _Pod:
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
        processes = _processes_on(plan, self) if plan is not None else ""
        if processes:
            where.append(processes)
        label = {"head": "Ray head pod", "worker": "worker pod", "submitter": "submitter pod"}.get(self.role, "pod")
        return f"{label} '{self.name}'" + (f" ({', '.join(where)})" if where else "")


def _pinned_node(spec: Mapping) -> str | None:
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


def _group_rank(text: str | None) -> int | None:
    match = _WORKER_GROUP.search(text or "")
    return int(match.group(1)) if match else None


def _role_from_name(name: str) -> str:
    if "-head-" in name or name.endswith("-head"):
        return "head"
    if "-worker-" in name or name.endswith("-worker"):
        return "worker"
    return "pod"


def _pod(pod: Mapping) -> _Pod:
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
        role = _role_from_name(name)
    rank = _group_rank(labels.get("ray.io/group")) if role == "worker" else None
    return _Pod(name, role, rank, spec.get("nodeName") or _pinned_node(spec), _time(meta.get("creationTimestamp")))


def _processes_on(plan: Plan, pod: _Pod) -> str:
    """The plan's processes in a pod: 'actor ranks 0-3, rollout ranks 0-3' (by node rank, else node name)."""
    if pod.role != "worker":
        return ""
    ranks: dict[str, list[int]] = {}
    for component, process in plan.processes():
        if (pod.node_rank is not None and process.node_rank == pod.node_rank) or (
            pod.node_rank is None and pod.node is not None and process.node_name == pod.node
        ):
            ranks.setdefault(component.name, []).append(process.rank)
    return ", ".join(f"{name} rank{'s' if len(found) > 1 else ''} {_ranges(found)}" for name, found in ranks.items())


def _pods(pods: Sequence[Mapping]) -> list[tuple[_Pod, Mapping]]:
    return sorted(((_pod(pod), pod) for pod in pods), key=lambda item: item[0].order)


def _statuses(pod: Mapping) -> list[Mapping]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _container_limit(pod: Mapping, container: str, resource: str) -> str | None:
    spec = pod.get("spec") or {}
    for entry in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if entry.get("name") == container:
            return ((entry.get("resources") or {}).get("limits") or {}).get(resource)
    return None


def _pod_events(events: Sequence[Mapping], name: str) -> list[Mapping]:
    return [
        event
        for event in events
        if (event.get("involvedObject") or event.get("regarding") or {}).get("kind") == "Pod"
        and (event.get("involvedObject") or event.get("regarding") or {}).get("name") == name
    ]


def _involved(event: Mapping) -> Mapping:
    return event.get("involvedObject") or event.get("regarding") or {}


def _note(event: Mapping) -> str:
    return str(event.get("message") or event.get("note") or "")


# -- provisioning ------------------------------------------------------------------------------------------

#: Warning events that carry the API server's error for a pod (or the submitter Job) it refused to create.
_REFUSAL_EVENTS = {
    ("RayCluster", "FailedToCreateHeadPod"): "head",
    ("RayCluster", "FailedToCreateWorkerPod"): "worker",
    ("RayJob", "FailedToCreateRayJobSubmitter"): "submitter",
    ("Job", "FailedCreate"): "submitter",
}

_REFUSED_NAME = re.compile(r'pods? "([^"]*)" is (?:forbidden|invalid)')


def _classify_refusal(error: str) -> tuple[str, str, bool] | None:
    """(reason, the quoted part of the API's error, permanent) for an error refusing a pod; None when the
    error is not a refusal (a timeout, a conflict: the creator retries those by itself)."""
    at = error.find("violates PodSecurity")
    if at >= 0:
        return POD_SECURITY_REFUSED, error[at:], True
    at = error.find("exceeded quota")
    if at >= 0:
        return QUOTA_EXCEEDED, error[at:], False
    if re.search(r"(maximum|minimum) \S+ usage per (Container|Pod)|limit to request ratio per", error):
        return LIMIT_RANGE_EXCEEDED, error.split("is forbidden:", 1)[-1], False
    match = re.search(r"admission webhook .* denied the request|ValidatingAdmissionPolicy .* denied request", error)
    if match:
        return ADMISSION_REFUSED, error[match.start() :], False
    if " is invalid:" in error or " is invalid: " in error:
        return POD_INVALID, error.split(" is invalid:", 1)[-1], True
    if " is forbidden:" in error:
        return ADMISSION_REFUSED, error.split(" is forbidden:", 1)[-1], False
    return None


def _refusal(pods: list[tuple[_Pod, Mapping]], events: Sequence[Mapping]) -> Cause | None:
    """A pod refused by the API server and not created since: a refusal older than the newest pod of the same
    role (and worker group) was retried with success."""
    newest: dict[tuple[str, int | None], dt.datetime] = {}
    for pod, _ in pods:
        for key in ((pod.role, pod.node_rank), (pod.role, None)):
            if pod.created is not None and (key not in newest or pod.created > newest[key]):
                newest[key] = pod.created
    found: list[tuple[int, tuple[int, int], Cause]] = []
    for event in events:
        involved = _involved(event)
        role = _REFUSAL_EVENTS.get((involved.get("kind"), event.get("reason")))
        if role is None or event.get("type", "Warning") != "Warning":
            continue
        error = _note(event)
        classified = _classify_refusal(error)
        if classified is None:
            continue
        reason, quoted, permanent = classified
        named = _REFUSED_NAME.search(error)
        pod_name = named.group(1) if named else ""
        rank = _group_rank(pod_name.removeprefix(involved.get("name") or "")) if role == "worker" else None
        seen = _event_time(event)
        last_created = newest.get((role, rank))
        if seen is not None and last_created is not None and seen <= last_created:
            continue
        owner = f"{involved.get('kind')} '{involved.get('name')}'"
        what = {
            "head": f"the Ray head pod of {owner}",
            "worker": f"the worker pod for node rank {rank} of {owner}"
            if rank is not None
            else f"a worker pod of {owner}",
            "submitter": f"the submitter pod of {owner}"
            if involved.get("kind") == "Job"
            else f"the submitter Job of {owner}",
        }[role]
        label = {
            POD_SECURITY_REFUSED: "refused by Pod Security",
            QUOTA_EXCEEDED: "refused by a ResourceQuota",
            LIMIT_RANGE_EXCEEDED: "refused by a LimitRange",
            ADMISSION_REFUSED: "refused by admission",
            POD_INVALID: "refused as invalid",
        }[reason]
        order = ({"head": 0, "worker": 1, "submitter": 2}[role], rank if rank is not None else -1)
        found.append((0 if permanent else 1, order, _cause(reason, f"{what} {label}: {quoted.strip()}", permanent)))
    if not found:
        return None
    return min(found, key=lambda item: (item[0], item[1]))[2]


def _pull_started(pod: Mapping, events: Sequence[Mapping], name: str) -> dt.datetime | None:
    """When pulling the pod's image first failed (the kubelet's Failed event), else when the pod started."""
    failures = [
        time
        for event in _pod_events(events, name)
        if event.get("reason") in ("Failed", "ErrImagePull") and "pull" in _note(event).lower()
        if (time := _event_first_time(event)) is not None
    ]
    if failures:
        return min(failures)
    status = pod.get("status") or {}
    return _time(status.get("startTime")) or _time((pod.get("metadata") or {}).get("creationTimestamp"))


def _pull_error(events: Sequence[Mapping], name: str, fallback: str) -> str:
    """The kubelet's own words for the last failed pull (its event says what the registry answered)."""
    failures = [
        event
        for event in _pod_events(events, name)
        if event.get("reason") == "Failed" and "pull" in _note(event).lower()
    ]
    if failures:
        latest = max(failures, key=lambda e: _event_time(e) or dt.datetime.min.replace(tzinfo=dt.UTC))
        return _note(latest)
    return fallback


def _container_problem(
    info: _Pod, pod: Mapping, events: Sequence[Mapping], now: dt.datetime
) -> tuple[int, Cause] | None:
    """The first container of a pod that cannot start, ranked: (rank, cause); lower ranks win."""
    for status in _statuses(pod):
        container = status.get("name") or "?"
        waiting = (status.get("state") or {}).get("waiting") or {}
        why, said = waiting.get("reason"), waiting.get("message") or ""
        where = f"{info.describe()} container '{container}'"
        if why == "InvalidImageName":
            return 1, _cause(INVALID_IMAGE, f"{where}: invalid image name '{status.get('image', '')}': {said}", True)
        if why in ("ErrImagePull", "ImagePullBackOff"):
            started = _pull_started(pod, events, info.name)
            error = _pull_error(events, info.name, said or why)
            if started is not None and now - started < IMAGE_PULL_GRACE:
                # A registry hiccup may pass: said while the kubelet retries, acted on after the grace.
                message = f"{where} cannot pull its image yet (retrying for {_seconds(IMAGE_PULL_GRACE)}): {error}"
                return 2, _cause(IMAGE_PULL_FAILED, message, waiting=True)
            return 2, _cause(IMAGE_PULL_FAILED, f"{where} cannot pull its image: {error}")
        now_terminated = (status.get("state") or {}).get("terminated") or {}
        restarting = (pod.get("spec") or {}).get("restartPolicy", "Always") != "Never"
        # Between restarts the kubelet shows the container as waiting in CrashLoopBackOff, or (Kubernetes 1.35)
        # still terminated with its exit code while it backs off.
        crashed_again = restarting and status.get("restartCount", 0) >= 1 and now_terminated.get("exitCode", 0) != 0
        if (why == "CrashLoopBackOff" or crashed_again) and container not in _init_names(pod):
            last = now_terminated or (status.get("lastState") or {}).get("terminated") or {}
            exited = f"exit code {last.get('exitCode', '?')}"
            if last.get("reason"):
                exited += f" ({last['reason']})"
            if last.get("reason") == "OOMKilled" and (limit := _container_limit(pod, container, "memory")):
                exited += f", memory limit {limit}"
            detail = f": {last['message']}" if last.get("message") else ""
            restarts = status.get("restartCount", 0)
            return 3, _cause(CRASH_LOOP_BACK_OFF, f"{where} crashes at start ({exited}, {restarts} restarts){detail}")
        if why == "CreateContainerConfigError" and _missing_object(said) is not None:
            continue  # a Secret or ConfigMap that does not exist: _start_problem names it
        if why == "CreateContainerConfigError" and ("runAsNonRoot" in said or "non-numeric user" in said):
            # The image's user is root or a name the kubelet cannot check: the same image never starts.
            return 1, _cause(IMAGE_RUNS_AS_ROOT, f"{where} cannot start as non-root: {said}", True)
        if why in ("CreateContainerConfigError", "CreateContainerError", "RunContainerError"):
            started = _time((pod.get("status") or {}).get("startTime")) or info.created
            if started is not None and now - started < CONTAINER_START_GRACE:
                message = f"{where} cannot start yet ({why}, retrying for {_seconds(CONTAINER_START_GRACE)}): {said}"
                return 4, _cause(CONTAINER_START_FAILED, message, waiting=True)
            return 4, _cause(CONTAINER_START_FAILED, f"{where} cannot start ({why}): {said}")
    return None


def _scheduling_problem(
    info: _Pod, pod: Mapping, now: dt.datetime, bounds: StartBounds, plan: Plan | None
) -> tuple[int, Cause] | None:
    status = pod.get("status") or {}
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    rejected = status.get("reason") not in (None, "", "Evicted")
    if status.get("phase") == "Failed" and not deleting and rejected and not _statuses(pod):
        # The kubelet rejected the pod at admission (OutOfcpu, OutOfnvidia.com/gpu, NodeAffinity ...).
        return 5, _cause(
            POD_REJECTED, f"{info.describe()} rejected by its node ({status['reason']}): {status.get('message', '')}"
        )
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            since = _time(condition.get("lastTransitionTime")) or info.created
            said = condition.get("message", "")
            claim = _claim_problem(info, said, since, now, bounds, plan)
            if claim is not None:
                return claim
            if since is not None and now - since < UNSCHEDULABLE_GRACE:
                return None
            return 6, _cause(UNSCHEDULABLE, f"{info.describe()} unschedulable: {said}")
    return None


def provisioning_failure(
    pods: Sequence[Mapping],
    events: Sequence[Mapping],
    now: dt.datetime,
    bounds: StartBounds = StartBounds(),
    plan: Plan | None = None,
) -> Cause | None:
    """Why the job's Ray pods (head, workers, submitter) cannot all start, or None while nothing is wrong (or a
    problem is still within its grace).

    `pods` are the job's pods, `events` the events about them and about the job's RayCluster, RayJob and
    submitter Job, `now` the current time (naive means UTC), `bounds` how long a pod may take to start, `plan`
    the job's plan (to name the processes of a worker pod; None leaves them out). Permanent causes (Pod
    Security, an invalid image name, an image that runs as root, an invalid pod, a missing object) come first,
    then the head's problems before the workers' (by node rank) and the submitter's; a cause that is only
    waited for (`Cause.waiting`) comes last.
    """
    now = now if now.tzinfo else now.replace(tzinfo=dt.UTC)
    ordered = _pods(pods)
    refused = _refusal(ordered, events)
    if refused is not None and refused.permanent:
        return refused
    found: list[tuple[int, int, Cause]] = []
    for index, (info, pod) in enumerate(ordered):
        for problem in (
            _container_problem(info, pod, events, now),
            _scheduling_problem(info, pod, now, bounds, plan),
            _start_problem(info, pod, events, now, bounds, plan),
        ):
            if problem is not None:
                found.append((problem[0], index, problem[1]))
    permanent = [item for item in found if item[2].permanent]
    if permanent:
        return min(permanent, key=lambda item: (item[0], item[1]))[2]
    if refused is not None:
        return refused
    return min(found, key=lambda item: (item[2].waiting, item[0], item[1]))[2] if found else None


# -- pods bound but not started ---------------------------------------------------------------------------

#: The kubelet's and the scheduler's words for an object a pod references that does not exist: 'secret "creds"
#: not found' (a volume's FailedMount, envFrom's CreateContainerConfigError), 'configmaps "cfg" not found',
#: 'persistentvolumeclaim "data" not found' (the scheduler's volume binding).
_NOT_FOUND = re.compile(r'\b(secret|configmap|persistentvolumeclaim)s? "([^"]+)" not found', re.IGNORECASE)
#: env valueFrom of a key the Secret or ConfigMap lacks.
_MISSING_KEY = re.compile(r"couldn't find key (\S+) in (Secret|ConfigMap) [^/\s]+/(\S+)")
#: A hostPath volume whose `type` the path on the node does not match (missing, or a file for a Directory).
_HOST_PATH = re.compile(r"hostPath type check failed: (\S+) is not an? ([a-z ]+?)(?:$|[,;.\]])")
#: The scheduler holds a pod back for a claim that exists but is not bound to a volume yet.
_UNBOUND_CLAIM = re.compile(r"unbound immediate PersistentVolumeClaims|waiting for .*volume|binding volumes", re.I)
_KINDS = {
    "secret": ("Secret", SECRET_NOT_FOUND),
    "configmap": ("ConfigMap", CONFIGMAP_NOT_FOUND),
    "persistentvolumeclaim": ("PersistentVolumeClaim", CLAIM_NOT_FOUND),
}
#: Warning event reasons about a pod's volumes (the kubelet's and the attach-detach controller's).
_VOLUME_EVENTS = frozenset({"FailedMount", "FailedAttachVolume", "FailedMapVolume", "FailedBinding"})


def _missing_object(text: str) -> tuple[str, str, str] | None:
    """(reason, the object as "Secret 'creds'", what is wrong with it) when `text` says a referenced object does
    not exist; None otherwise."""
    if match := _NOT_FOUND.search(text):
        kind, reason = _KINDS[match.group(1).lower()]
        named = f"{kind} '{match.group(2)}'"
        return reason, named, f"{named} not found"
    if match := _MISSING_KEY.search(text):
        kind = match.group(2)
        named = f"{kind} '{match.group(3)}'"
        return (
            (SECRET_NOT_FOUND if kind == "Secret" else CONFIGMAP_NOT_FOUND),
            named,
            f"{named} has no key '{match.group(1)}'",
        )
    if match := _HOST_PATH.search(text):
        named = f"host path '{match.group(1)}'"
        return HOST_PATH_MISSING, named, f"{named} is missing or not a {match.group(2)}"
    return None


def _init_names(pod: Mapping) -> set[str]:
    return {s.get("name") or "" for s in (pod.get("status") or {}).get("initContainerStatuses") or []}


def _bound_since(pod: Mapping) -> dt.datetime | None:
    """When the scheduler bound the pod to its node (its PodScheduled condition turned True)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return _time(condition.get("lastTransitionTime"))
    return None


def _seconds(delta: dt.timedelta) -> str:
    return f"{max(0, int(delta.total_seconds()))} s"


def _claim_problem(
    info: _Pod, said: str, since: dt.datetime | None, now: dt.datetime, bounds: StartBounds, plan: Plan | None
) -> tuple[int, Cause] | None:
    """A pod the scheduler holds back for its PersistentVolumeClaim: one that does not exist (named after the
    grace), or one not bound yet (waited for until the timeout, from the pod's creation)."""
    missing = _missing_object(said)
    if missing is not None:
        if since is not None and now - since < bounds.grace:
            return None
        reason, named, what = missing
        message = f"{what}: {info.describe(plan)} cannot be scheduled: {said}"
        return 1, _cause(reason, message, True, missing=named)
    if not _UNBOUND_CLAIM.search(said):
        return None
    created = info.created or since
    waited = now - created if created is not None else dt.timedelta(0)
    if waited < bounds.grace:
        return None
    waiting = waited < bounds.timeout
    message = f"{info.describe(plan)} waits for its volume claim {_seconds(waited)} after it was created: {said}"
    if waiting:
        message = f"{message} (waiting up to {_seconds(bounds.timeout)})"
    return 6, _cause(CLAIM_NOT_BOUND, message, waiting=waiting)


def pods_not_started(pods: Sequence[Mapping], now: dt.datetime, bounds: StartBounds) -> bool:
    """Whether a pod of the job has waited `bounds.grace` to start (bound but Pending, or held back by the
    scheduler): then its diagnosis names the plan's processes on it, and the caller reads the plan."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Pending" or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        since = _bound_since(pod) or _time((pod.get("metadata") or {}).get("creationTimestamp"))
        if since is not None and now - since >= bounds.grace:
            return True
    return False


def _start_problem(
    info: _Pod, pod: Mapping, events: Sequence[Mapping], now: dt.datetime, bounds: StartBounds, plan: Plan | None
) -> tuple[int, Cause] | None:
    """A pod bound to its node whose containers have not started `bounds.grace` later, explained from its init
    containers, its containers' waiting states and its Warning events, read generally: a missing object is
    permanent, an init container that failed retries with backoff, anything else is waited for until
    `bounds.timeout` (and said meanwhile)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or not (pod.get("spec") or {}).get("nodeName"):
        return None
    if status.get("phase") not in ("Pending", "Failed"):
        return None
    bound = _bound_since(pod) or info.created
    if bound is None or now - bound < bounds.grace:
        return None
    where = info.describe(plan)
    for init in status.get("initContainerStatuses") or []:
        for state in ((init.get("state") or {}).get("terminated"), (init.get("lastState") or {}).get("terminated")):
            if state and state.get("exitCode") not in (0, None):
                exited = f"exit code {state['exitCode']}" + (f", {state['reason']}" if state.get("reason") else "")
                detail = f": {state['message']}" if state.get("message") else ""
                restarts = init.get("restartCount", 0)
                message = f"{where} init container '{init.get('name')}' failed ({exited}, {restarts} restarts){detail}"
                return 3, _cause(INIT_CONTAINER_FAILED, message)
    if status.get("phase") != "Pending":
        return None
    # What the kubelet says: its containers' waiting messages (envFrom's missing Secret), then, while no
    # container has run yet (volumes are mounted before the first one starts), its Warning events since the pod
    # was bound, newest first: a FailedScheduling from before the binding, or a FailedMount from before a Secret
    # appeared and the pod went on, is history.
    containers = [
        (waiting.get("reason") or "Waiting", waiting["message"])
        for container in _statuses(pod)
        if (waiting := (container.get("state") or {}).get("waiting") or {}).get("message")
    ]
    ran = any(
        (c.get("state") or {}).get("running") or (c.get("state") or {}).get("terminated") or c.get("lastState")
        for c in _statuses(pod)
    )
    since_bound = [
        (when, event)
        for event in ([] if ran else _pod_events(events, info.name))
        if _note(event) and ((when := _event_time(event)) is None or when >= bound - dt.timedelta(seconds=1))
    ]
    newest_first = [
        (event.get("reason") or "Warning", _note(event))
        for _, event in sorted(
            since_bound, key=lambda item: item[0] or dt.datetime.min.replace(tzinfo=dt.UTC), reverse=True
        )
    ]
    for why, text in [*containers, *newest_first]:
        missing = _missing_object(text)
        if missing is not None:
            reason, named, what = missing
            return 1, _cause(reason, f"{what}: {where} cannot start ({why}: {text})", True, missing=named)
    if ran:
        return None  # its containers started (KubeRay's workers wait in an init container for the head)
    waited = now - bound
    said = newest_first or containers
    if said:
        why, text = said[0]
        reason = VOLUME_NOT_READY if why in _VOLUME_EVENTS else POD_NOT_STARTED
        message = f"{where} not started {_seconds(waited)} after it was bound: {why}: {text}"
        waiting = waited < bounds.timeout
        if waiting:
            message = f"{message} (waiting up to {_seconds(bounds.timeout)})"
        return 7, _cause(reason, message, waiting=waiting)
    # Nothing wrong said: the kubelet is still at it (a large image's first pull takes minutes and says so only
    # in Normal events). Said, never acted on.
    states = sorted({((c.get("state") or {}).get("waiting") or {}).get("reason") or "" for c in _statuses(pod)} - {""})
    message = f"{where} not started {_seconds(waited)} after it was bound ({', '.join(states) or 'no status yet'}; no warning)"
    return 8, _cause(POD_NOT_STARTED, message, waiting=True)


# -- a lost process ------------------------------------------------------------------------------------------

#: The launcher's one-line errors in a driver's log (placement_core.errors), WorkerDiedError first.
_LAUNCHER_LINE = re.compile(r"\b(WorkerDiedError|LaunchError): (.+)$")
_DIED_RANK = re.compile(r"component '([^']+)' rank (\d+) \(node rank (\d+)\)")
#: Kubelet and controller events that say a pod (maybe gone since) was stopped, and why.
_LOSS_EVENTS = {
    "Killing": POD_DELETED,
    "Evicted": POD_EVICTED,
    "Preempted": POD_EVICTED,
    "TaintManagerEviction": NODE_NOT_READY,
    "NodeNotReady": NODE_NOT_READY,
    "OOMKilling": OOM_KILLED,
}


def _launcher_line(driver_log_tail: str) -> str | None:
    """The last line of the launcher's own error in the driver's log ([state-dump] lines never match)."""
    found = None
    for line in driver_log_tail.splitlines():
        if "[state-dump]" in line:
            continue
        match = _LAUNCHER_LINE.search(line)
        if match and (found is None or match.group(1) == "WorkerDiedError" or found[0] != "WorkerDiedError"):
            found = (match.group(1), match.group(2).strip())
    return found[1] if found else None


def _node_not_ready(nodes: Mapping[str, Mapping], name: str | None) -> tuple[dt.datetime | None, str] | None:
    if not name or name not in nodes:
        return None
    status = nodes[name].get("status") or {}
    taints = [t.get("key", "") for t in (nodes[name].get("spec") or {}).get("taints") or []]
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            state = "NotReady" if condition.get("status") == "False" else "unreachable"
            detail = condition.get("message") or condition.get("reason") or ""
            return _time(condition.get("lastTransitionTime")), f"node '{name}' {state}: {detail}"
    if "node.kubernetes.io/unreachable" in taints or "node.kubernetes.io/not-ready" in taints:
        return None, f"node '{name}' {'unreachable' if 'node.kubernetes.io/unreachable' in taints else 'NotReady'}"
    return None


def _terminated(pod: Mapping, oldest: dt.datetime | None) -> tuple[dt.datetime | None, str, Mapping, str] | None:
    """The first terminated container of a pod that did not exit cleanly, at `oldest` or later when given:
    (when, container, state, kind)."""
    for status in _statuses(pod):
        if status.get("name") == SUBMITTER_CONTAINER:
            continue  # SidecarMode's submitter in the head pod exits with the driver: the failure, not its cause
        for state in ((status.get("state") or {}).get("terminated"), (status.get("lastState") or {}).get("terminated")):
            if state and (state.get("exitCode") not in (0, None) or state.get("reason") == "OOMKilled"):
                when = _time(state.get("finishedAt"))
                if oldest is not None and when is not None and when < oldest:
                    continue
                return when, status.get("name") or "?", state, state.get("reason") or ""
    return None


def _pod_loss(
    info: _Pod, pod: Mapping, nodes: Mapping[str, Mapping], oldest: dt.datetime | None
) -> tuple[dt.datetime | None, str, str] | None:
    """(when, reason, what happened) for a pod of the job that is lost or losing its processes (a container's
    exit only at `oldest` or later when given)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if info.role == "submitter":
        return None  # the submitter ends with the driver; its exit is the failure, not its cause
    node = _node_not_ready(nodes, info.node)
    if node is not None:
        return node[0], NODE_NOT_READY, node[1]
    if status.get("phase") == "Failed" and status.get("reason") == "Evicted":
        return None, POD_EVICTED, f"evicted: {status.get('message', '')}"
    terminated = _terminated(pod, oldest)
    if terminated is not None:
        when, container, state, kind = terminated
        if kind == "OOMKilled":
            limit = _container_limit(pod, container, "memory")
            return (
                when,
                OOM_KILLED,
                f"container '{container}' OOMKilled" + (f" (memory limit {limit})" if limit else ""),
            )
        code = state.get("exitCode")
        signal = f", signal {state['signal']}" if state.get("signal") else ""
        return (
            when,
            CONTAINER_EXITED,
            f"container '{container}' exited with code {code}" + (f" ({kind}{signal})" if kind else signal),
        )
    if meta.get("deletionTimestamp"):
        deleted = _time(meta["deletionTimestamp"])
        grace = meta.get("deletionGracePeriodSeconds") or 0
        when = deleted - dt.timedelta(seconds=grace) if deleted is not None else None
        return when, POD_DELETED, "deleted"
    return None


def _gone_pod(name: str, host: str | None, clusters: set[str]) -> _Pod | None:
    """A pod known only by name: the head or a worker of one of `clusters` (KubeRay names them
    <cluster>-head-<random> and <cluster>-<group>-worker-<random>); None when it is no pod of theirs. Without
    clusters (none of the job's pods is left) any Ray-looking name counts."""
    rests = [name[len(cluster) + 1 :] for cluster in clusters if name.startswith(f"{cluster}-")] or (
        [] if clusters else [name]
    )
    for rest in rests:
        role = "head" if rest.startswith("head-") or "-head-" in rest else _role_from_name(rest)
        if role != "pod":
            return _Pod(name, role, _group_rank(rest) if role == "worker" else None, host, None)
    return None


def _gone_pod_loss(
    events: Sequence[Mapping], present: set[str], clusters: set[str], nodes: Mapping[str, Mapping]
) -> list[tuple[dt.datetime | None, _Pod, str, str]]:
    """Losses of the job's pods that no longer exist, from the events about them (the kubelet names the node
    it runs on as the event's source host)."""
    losses: dict[str, tuple[dt.datetime | None, _Pod, str, str]] = {}
    for event in events:
        involved = _involved(event)
        name = involved.get("name") or ""
        reason = _LOSS_EVENTS.get(event.get("reason") or "")
        if involved.get("kind") != "Pod" or name in present or reason is None:
            continue
        host = (event.get("source") or {}).get("host") or event.get("reportingInstance") or None
        info = _gone_pod(name, host, clusters)
        if info is None:
            continue
        when = _event_first_time(event)
        node = _node_not_ready(nodes, host)
        what = {
            POD_DELETED: "deleted",
            POD_EVICTED: f"evicted: {_note(event)}",
            NODE_NOT_READY: node[1] if node else _note(event),
            OOM_KILLED: f"OOMKilled: {_note(event)}",
        }[reason]
        if node is not None:
            reason = NODE_NOT_READY
            what = node[1]
        earlier = losses.get(name)
        if earlier is None or (when is not None and (earlier[0] is None or when < earlier[0])):
            losses[name] = (when, info, reason, what)
    return list(losses.values())


def seen_before(
    pods: Sequence[Mapping], events: Sequence[Mapping], ended: dt.datetime
) -> tuple[list[Mapping], list[Mapping]]:
    """The pods and events as they were before the driver ended at `ended`: a pod whose deletion began then or
    later (KubeRay deleting the cluster of a finished RayJob) and its events are left out, as are events first
    seen then or later: what happened after the driver's end is not why it failed."""
    late: set[str] = set()
    kept_pods = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        deleted = _time(meta.get("deletionTimestamp"))
        if deleted is not None:
            deleted -= dt.timedelta(seconds=meta.get("deletionGracePeriodSeconds") or 0)
            if deleted >= ended:
                late.add(meta.get("name") or "")
                continue
        kept_pods.append(pod)
    kept_events = [
        e
        for e in events
        if _involved(e).get("name") not in late and ((when := _event_first_time(e)) is None or when < ended)
    ]
    return kept_pods, kept_events


def lost_process(
    pods: Sequence[Mapping],
    events: Sequence[Mapping],
    nodes: Mapping[str, Mapping],
    plan: Plan | None,
    driver_log_tail: str,
    since: dt.datetime | None = None,
) -> Cause | None:
    """Which of the job's pods died first and why, with the plan's processes on it and the launcher's own line
    from the driver's log; None when nothing shows a loss.

    `pods` are the job's current Ray pods, `events` the events about them (including pods already deleted, whose
    names start with their RayCluster's name), `nodes` the job's nodes by name, `plan` the job's plan (None
    when unreadable), `driver_log_tail` the end of the driver's log. The earliest loss is the cause: when the
    head dies its workers follow, not the other way round. `since` is when the failed attempt's driver started:
    a loss known to be older (a worker container that exited and restarted while KubeRay made a new head, an
    event of the attempt before) is not why it failed. A node that is not Ready counts whenever it turned so.
    """
    # Kubernetes times have whole seconds, Ray's start time milliseconds: a loss in the driver's first second
    # may read up to 1 s earlier than the start.
    oldest = since - dt.timedelta(seconds=1) if since is not None else None
    ordered = _pods(pods)
    present = {info.name for info, _ in ordered}
    clusters = {
        cluster
        for _, pod in ordered
        if (cluster := ((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/cluster"))
    }
    losses: list[tuple[dt.datetime | None, _Pod, str, str]] = []
    for info, pod in ordered:
        loss = _pod_loss(info, pod, nodes, oldest)
        if loss is not None:
            losses.append((loss[0], info, loss[1], loss[2]))
    losses += _gone_pod_loss(events, present, clusters, nodes)
    if oldest is not None:
        losses = [loss for loss in losses if loss[2] == NODE_NOT_READY or loss[0] is None or loss[0] >= oldest]
    launcher = _launcher_line(driver_log_tail)
    if losses:
        far_future = dt.datetime.max.replace(tzinfo=dt.UTC)
        _, info, reason, what = min(losses, key=lambda item: (item[0] or far_future, item[1].order))
        message = f"{info.describe(plan)} {what}"
        if launcher:
            message = f"{_cut(message, 180)}; launcher: {launcher}"
        return _cause(reason, message, node=info.node)
    if launcher:
        died = _DIED_RANK.search(launcher)
        if died and plan is not None:
            node = next(
                (p.node_name for c, p in plan.processes() if c.name == died.group(1) and p.rank == int(died.group(2))),
                None,
            )
            if node:
                return _cause(WORKER_DIED, f"{launcher} (on node '{node}')", node=node)
        return _cause(WORKER_DIED, launcher)
    return None


# -- a framework job's driver ----------------------------------------------------------------------------------

_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'")


def framework_missing(framework: str, driver_log_tail: str) -> Cause | None:
    """A framework job whose driver could not import the framework (or what it needs): the image lacks it.
    None when the log shows no such import error."""
    match = _NO_MODULE.search(driver_log_tail)
    if match is None:
        return None
    module = match.group(1)
    what = "the framework" if module.split(".")[0] == framework else f"'{module}', which the program needs"
    message = f"the job's image cannot import {what} (No module named '{module}'; spec.framework {framework})"
    return Cause(FRAMEWORK_MISSING, message, True)
