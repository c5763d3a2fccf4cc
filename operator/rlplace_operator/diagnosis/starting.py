"""What keeps a job's Ray pods from starting, named from what the API shows.

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
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence

from placement_core.plan import Plan
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.conditions import parse_time
from rlplace_operator.diagnosis.causes import (
    ADMISSION_REFUSED,
    CLAIM_NOT_BOUND,
    CLAIM_NOT_FOUND,
    CONFIGMAP_NOT_FOUND,
    CONTAINER_START_FAILED,
    CONTAINER_START_GRACE,
    CRASH_LOOP_BACK_OFF,
    HOST_PATH_MISSING,
    IMAGE_PULL_FAILED,
    IMAGE_PULL_GRACE,
    IMAGE_RUNS_AS_ROOT,
    INIT_CONTAINER_FAILED,
    INVALID_IMAGE,
    LIMIT_RANGE_EXCEEDED,
    POD_INVALID,
    POD_NOT_STARTED,
    POD_REJECTED,
    POD_SECURITY_REFUSED,
    QUOTA_EXCEEDED,
    SECRET_NOT_FOUND,
    UNSCHEDULABLE,
    UNSCHEDULABLE_GRACE,
    VOLUME_NOT_READY,
    Cause,
    PodView,
    StartBounds,
    container_limit,
    container_statuses,
    event_first_time,
    event_note,
    event_time,
    group_rank,
    involved_object,
    make_cause,
    pod_events,
    pod_views,
)

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


def _refusal(pods: list[tuple[PodView, Mapping]], events: Sequence[Mapping]) -> Cause | None:
    """A pod refused by the API server and not created since: a refusal older than the newest pod of the same
    role (and worker group) was retried with success."""
    newest: dict[tuple[str, int | None], dt.datetime] = {}
    for pod, _ in pods:
        for key in ((pod.role, pod.node_rank), (pod.role, None)):
            if pod.created is not None and (key not in newest or pod.created > newest[key]):
                newest[key] = pod.created
    found: list[tuple[int, tuple[int, int], Cause]] = []
    for event in events:
        involved = involved_object(event)
        role = _REFUSAL_EVENTS.get((involved.get("kind"), event.get("reason")))
        if role is None or event.get("type", "Warning") != "Warning":
            continue
        error = event_note(event)
        classified = _classify_refusal(error)
        if classified is None:
            continue
        reason, quoted, permanent = classified
        named = _REFUSED_NAME.search(error)
        pod_name = named.group(1) if named else ""
        rank = group_rank(pod_name.removeprefix(involved.get("name") or "")) if role == "worker" else None
        seen = event_time(event)
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
        found.append((0 if permanent else 1, order, make_cause(reason, f"{what} {label}: {quoted.strip()}", permanent)))
    if not found:
        return None
    return min(found, key=lambda item: (item[0], item[1]))[2]


def _pull_started(pod: Mapping, events: Sequence[Mapping], name: str) -> dt.datetime | None:
    """When pulling the pod's image first failed (the kubelet's Failed event), else when the pod started."""
    failures = [
        time
        for event in pod_events(events, name)
        if event.get("reason") in ("Failed", "ErrImagePull") and "pull" in event_note(event).lower()
        if (time := event_first_time(event)) is not None
    ]
    if failures:
        return min(failures)
    status = pod.get("status") or {}
    return parse_time(status.get("startTime")) or parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


def _pull_error(events: Sequence[Mapping], name: str, fallback: str) -> str:
    """The kubelet's own words for the last failed pull (its event says what the registry answered)."""
    failures = [
        event
        for event in pod_events(events, name)
        if event.get("reason") == "Failed" and "pull" in event_note(event).lower()
    ]
    if failures:
        latest = max(failures, key=lambda e: event_time(e) or dt.datetime.min.replace(tzinfo=dt.UTC))
        return event_note(latest)
    return fallback


def _container_problem(
    info: PodView, pod: Mapping, events: Sequence[Mapping], now: dt.datetime
) -> tuple[int, Cause] | None:
    """The first container of a pod that cannot start, ranked: (rank, cause); lower ranks win."""
    for status in container_statuses(pod):
        container = status.get("name") or "?"
        waiting = (status.get("state") or {}).get("waiting") or {}
        why, said = waiting.get("reason"), waiting.get("message") or ""
        where = f"{info.describe()} container '{container}'"
        if why == "InvalidImageName":
            return 1, make_cause(
                INVALID_IMAGE, f"{where}: invalid image name '{status.get('image', '')}': {said}", True
            )
        if why in ("ErrImagePull", "ImagePullBackOff"):
            started = _pull_started(pod, events, info.name)
            error = _pull_error(events, info.name, said or why)
            if started is not None and now - started < IMAGE_PULL_GRACE:
                # A registry hiccup may pass: said while the kubelet retries, acted on after the grace.
                message = f"{where} cannot pull its image yet (retrying for {_seconds(IMAGE_PULL_GRACE)}): {error}"
                return 2, make_cause(IMAGE_PULL_FAILED, message, waiting=True)
            return 2, make_cause(IMAGE_PULL_FAILED, f"{where} cannot pull its image: {error}")
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
            if last.get("reason") == "OOMKilled" and (limit := container_limit(pod, container, "memory")):
                exited += f", memory limit {limit}"
            detail = f": {last['message']}" if last.get("message") else ""
            restarts = status.get("restartCount", 0)
            return 3, make_cause(
                CRASH_LOOP_BACK_OFF, f"{where} crashes at start ({exited}, {restarts} restarts){detail}"
            )
        if why == "CreateContainerConfigError" and _missing_object(said) is not None:
            continue  # a Secret or ConfigMap that does not exist: _start_problem names it
        if why == "CreateContainerConfigError" and ("runAsNonRoot" in said or "non-numeric user" in said):
            # The image's user is root or a name the kubelet cannot check: the same image never starts.
            return 1, make_cause(IMAGE_RUNS_AS_ROOT, f"{where} cannot start as non-root: {said}", True)
        if why in ("CreateContainerConfigError", "CreateContainerError", "RunContainerError"):
            started = parse_time((pod.get("status") or {}).get("startTime")) or info.created
            if started is not None and now - started < CONTAINER_START_GRACE:
                message = f"{where} cannot start yet ({why}, retrying for {_seconds(CONTAINER_START_GRACE)}): {said}"
                return 4, make_cause(CONTAINER_START_FAILED, message, waiting=True)
            return 4, make_cause(CONTAINER_START_FAILED, f"{where} cannot start ({why}): {said}")
    return None


#: The scheduler's words for a claim whose DeviceClass does not exist (kube-scheduler's DynamicResources plugin,
#: Kubernetes 1.35: 'device class gpu.example.com does not exist'; the API's 'deviceclass... "x" not found').
_DEVICE_CLASS = re.compile(r'device class (\S+) does not exist|deviceclass[a-z.]* "([^"]+)" not found', re.IGNORECASE)


def _scheduling_problem(
    info: PodView, pod: Mapping, now: dt.datetime, bounds: StartBounds, plan: Plan | None
) -> tuple[int, Cause] | None:
    status = pod.get("status") or {}
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    rejected = status.get("reason") not in (None, "", "Evicted")
    if status.get("phase") == "Failed" and not deleting and rejected and not container_statuses(pod):
        # The kubelet rejected the pod at admission (OutOfcpu, OutOfnvidia.com/gpu, NodeAffinity ...).
        return 5, make_cause(
            POD_REJECTED, f"{info.describe()} rejected by its node ({status['reason']}): {status.get('message', '')}"
        )
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            since = parse_time(condition.get("lastTransitionTime")) or info.created
            said = condition.get("message", "")
            missing = _DEVICE_CLASS.search(said)
            if missing is not None:
                name = missing.group(1) or missing.group(2)
                message = (
                    f"{info.describe(plan)} cannot be scheduled: DeviceClass {name} does not exist (create it, or set "
                    "its NodeGroup's dra.deviceClassName); the job keeps its GPUs and starts once it exists"
                )
                return 1, make_cause(cond.DEVICE_CLASS_NOT_FOUND, message, holds=True)
            claim = _claim_problem(info, said, since, now, bounds, plan)
            if claim is not None:
                return claim
            if since is not None and now - since < UNSCHEDULABLE_GRACE:
                return None
            return 6, make_cause(UNSCHEDULABLE, f"{info.describe()} unschedulable: {said}")
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
    ordered = pod_views(pods)
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
            return parse_time(condition.get("lastTransitionTime"))
    return None


def _seconds(delta: dt.timedelta) -> str:
    return f"{max(0, int(delta.total_seconds()))} s"


def _claim_problem(
    info: PodView, said: str, since: dt.datetime | None, now: dt.datetime, bounds: StartBounds, plan: Plan | None
) -> tuple[int, Cause] | None:
    """A pod the scheduler holds back for its PersistentVolumeClaim: one that does not exist (named after the
    grace), or one not bound yet (waited for until the timeout, from the pod's creation)."""
    missing = _missing_object(said)
    if missing is not None:
        if since is not None and now - since < bounds.grace:
            return None
        reason, named, what = missing
        message = f"{what}: {info.describe(plan)} cannot be scheduled: {said}"
        return 1, make_cause(reason, message, True, missing=named)
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
    return 6, make_cause(CLAIM_NOT_BOUND, message, waiting=waiting)


def pods_not_started(pods: Sequence[Mapping], now: dt.datetime, bounds: StartBounds) -> bool:
    """Whether a pod of the job has waited `bounds.grace` to start (bound but Pending, or held back by the
    scheduler): then its diagnosis names the plan's processes on it, and the caller reads the plan."""
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Pending" or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        since = _bound_since(pod) or parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
        if since is not None and now - since >= bounds.grace:
            return True
    return False


def _start_problem(
    info: PodView, pod: Mapping, events: Sequence[Mapping], now: dt.datetime, bounds: StartBounds, plan: Plan | None
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
                return 3, make_cause(INIT_CONTAINER_FAILED, message)
    if status.get("phase") != "Pending":
        return None
    # What the kubelet says: its containers' waiting messages (envFrom's missing Secret), then, while no
    # container has run yet (volumes are mounted before the first one starts), its Warning events since the pod
    # was bound, newest first: a FailedScheduling from before the binding, or a FailedMount from before a Secret
    # appeared and the pod went on, is history.
    containers = [
        (waiting.get("reason") or "Waiting", waiting["message"])
        for container in container_statuses(pod)
        if (waiting := (container.get("state") or {}).get("waiting") or {}).get("message")
    ]
    ran = any(
        (c.get("state") or {}).get("running") or (c.get("state") or {}).get("terminated") or c.get("lastState")
        for c in container_statuses(pod)
    )
    since_bound = [
        (when, event)
        for event in ([] if ran else pod_events(events, info.name))
        if event_note(event) and ((when := event_time(event)) is None or when >= bound - dt.timedelta(seconds=1))
    ]
    newest_first = [
        (event.get("reason") or "Warning", event_note(event))
        for _, event in sorted(
            since_bound, key=lambda item: item[0] or dt.datetime.min.replace(tzinfo=dt.UTC), reverse=True
        )
    ]
    for why, text in [*containers, *newest_first]:
        missing = _missing_object(text)
        if missing is not None:
            reason, named, what = missing
            return 1, make_cause(reason, f"{what}: {where} cannot start ({why}: {text})", True, missing=named)
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
        return 7, make_cause(reason, message, waiting=waiting)
    # Nothing wrong said: the kubelet is still at it (a large image's first pull takes minutes and says so only
    # in Normal events). Said, never acted on.
    states = sorted(
        {((c.get("state") or {}).get("waiting") or {}).get("reason") or "" for c in container_statuses(pod)} - {""}
    )
    message = f"{where} not started {_seconds(waited)} after it was bound ({', '.join(states) or 'no status yet'}; no warning)"
    return 8, make_cause(POD_NOT_STARTED, message, waiting=True)
