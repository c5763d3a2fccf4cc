"""A job's Ray pods: whether they are up, and what to do when they cannot come up.

Provisioning failures (pods refused, images that cannot be pulled, containers that crash at start, pods
unschedulable on their pinned node, worker pods not bound in time, pinned GPUs another claim holds) end the job or
give its nodes back and queue it again, with backoff where the cause may pass; what may pass is said in the status
while the job keeps its nodes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlplace_operator.api import conditions as cond
from rlplace_operator.api.names import KUBERAY_NODE_TYPE_LABEL, RAY_CLUSTER_POD_LABEL
from rlplace_operator.api.podspec import OnMissingObject
from rlplace_operator.api.status import MAX_RESTARTS_KEPT, JobPhase, RLJobStatus
from rlplace_operator.diagnosis.causes import Cause
from rlplace_operator.diagnosis.starting import provisioning_failure
from rlplace_operator.reconcile.actions import Action, DeleteChildren, Outcome, Post, ReleaseNodes
from rlplace_operator.reconcile.world import Job, World, admitted_since

#: A job with a worker pod still unbound this long after the pod was created (another workload took its node in
#: between, a taint came: the scheduler says which) gives its nodes back and queues again.
BIND_TIMEOUT_SECONDS = 30.0
#: How long the scheduler may say a worker pod "cannot allocate all claims" (its pinned DRA GPUs are another
#: claim's) before the job gives its GPUs back: a moment for a claim of the job's own stopped pods to go.
GPUS_UNAVAILABLE_SECONDS = 10.0
#: The scheduler's words for a pod whose claims it cannot allocate (kube-scheduler's DynamicResources plugin).
CLAIMS_UNALLOCATABLE = "cannot allocate all claims"
#: How soon a job in a state that changes without an event of its own (its driver not verified yet, pods starting,
#: an attempt being stopped) asks to be looked at again.
LOOK_AGAIN_SECONDS = 5.0
#: Backoff after a provisioning failure that may pass: the first retry after this long, doubling up to the cap.
FIRST_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 300.0


def backoff_seconds(retries: int) -> float:
    """Seconds before the `retries`-th retry after a provisioning failure."""
    return min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** max(0, min(retries - 1, 10)))


def worker_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        p
        for p in pods
        if (p.get("metadata", {}).get("labels") or {}).get(KUBERAY_NODE_TYPE_LABEL) == "worker"
        and not p.get("metadata", {}).get("deletionTimestamp")
    ]


def head_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The Ray head pods among `pods` not being deleted (as worker_pods for the workers)."""
    return [
        p
        for p in pods
        if (p.get("metadata", {}).get("labels") or {}).get(KUBERAY_NODE_TYPE_LABEL) == "head"
        and not p.get("metadata", {}).get("deletionTimestamp")
    ]


def status_of(wire: Mapping[str, Any]) -> RLJobStatus:
    """The status model of a status in wire form (None values: absent)."""
    return RLJobStatus.model_validate({k: v for k, v in wire.items() if v is not None})


def _bind_timeout(job: Job, world: World) -> str | None:
    """Why the job gives its nodes back because a worker pod has waited BIND_TIMEOUT_SECONDS for its node, in the
    scheduler's words (another workload took it, a taint came), or None. Counted from each pod's creation, not from admission: KubeRay makes the pods, and
    under a burst it makes them later than that (at 1,000 jobs on the 2-core local cluster, most pods came more
    than 30 s after admission, and giving their nodes back then only made the queue churn)."""
    since = admitted_since(job.status)
    if since is None or (world.now - since).total_seconds() < BIND_TIMEOUT_SECONDS:
        return None
    if job.status.get("attempts"):
        return None  # its driver ran on these nodes: a retry's new pods are KubeRay's to bring up, not a bind race
    workers = worker_pods(world.pods)
    unbound = [p for p in workers if not (p.get("spec") or {}).get("nodeName")]
    waited = [
        p
        for p in unbound
        if (world.now - (cond.parse_time(p["metadata"].get("creationTimestamp")) or world.now)).total_seconds()
        >= BIND_TIMEOUT_SECONDS
    ]
    if not waited:
        return None
    expected = int(job.status.get("nodes") or 0)
    # The scheduler's own words for the pod (another workload took its node, a taint came, resources ran out).
    pod = waited[0]
    scheduled = next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    said = scheduled.get("message") or "it has not placed the pod yet"
    return (
        f"{len(workers) - len(unbound)} of {expected} worker pods bound, {pod['metadata']['name']} unbound "
        f"{BIND_TIMEOUT_SECONDS:.0f} s after it was created (the scheduler: {said}): gave the nodes back and queued "
        "again"
    )


def _give_back(
    job: Job, world: World, status: dict[str, Any], reason: str, message: str, *, permanent: bool, backoff: bool
) -> Outcome:
    """The job lets go of its nodes: Failed (retrying cannot help) or Queued again (with backoff if asked)."""
    actions: list[Action] = [DeleteChildren(), ReleaseNodes()]
    conditions = cond.set_condition(
        status.get("conditions"), cond.RAYCLUSTER_READY, False, reason, message, job.generation
    )
    status.update(rayCluster=None, rayJob=None, queuePosition=None, waitingFor=None)
    if permanent:
        status.update(phase=str(JobPhase.FAILED), message=message, observedGeneration=job.generation)
        status["conditions"] = conditions
        actions.append(Post(True, reason, message))
        return Outcome(tuple(actions), status_of(status))
    retries = int(status.get("provisioningRetries") or 0) + (1 if backoff else 0)
    delay = backoff_seconds(retries) if backoff else 0.0
    # Queued says what it waits for in this very write (its next pass says the queue's or Kueue's own words).
    status["waitingFor"] = f"nodes again, after {reason}"
    if backoff:
        message = f"{message}; gave the nodes back, retrying in {delay:.0f} s (retry {retries})"
        retry_after = cond.timestamp(world.now + dt.timedelta(seconds=delay))
        status.update(provisioningRetries=retries, retryAfter=retry_after, waitingFor=f"its retry at {retry_after}")
        conditions = cond.set_condition(conditions, cond.RAYCLUSTER_READY, False, reason, message, job.generation)
    status["conditions"] = cond.set_condition(conditions, cond.ADMITTED, False, reason, message, job.generation)
    status.update(phase=str(JobPhase.QUEUED), message=cond.brief(message), observedGeneration=job.generation)
    # Recorded as a restart too: the attempt the job goes on to, and why it gave its nodes back.
    attempt = int(status.get("attempts") or 0) + 1
    restart = {"attempt": attempt, "time": cond.timestamp(world.now), "reason": reason, "message": cond.brief(message)}
    status["restarts"] = [*list(status.get("restarts") or []), restart][-MAX_RESTARTS_KEPT:]
    actions.append(Post(True, reason, message))
    return Outcome(tuple(actions), status_of(status), delay or LOOK_AGAIN_SECONDS)


def provisioning_checks(job: Job, world: World, status: dict[str, Any]) -> Outcome | None:
    """A job whose Ray pods are not all up: a named failure ends it or requeues it; so does a bind timeout. What
    may pass (a volume attaching, a claim being bound) is said in the status while the job keeps its nodes."""
    cause = provisioning_failure(list(world.pods), list(world.events), world.now, world.start_bounds, world.plan)
    if cause is not None and (cause.waiting or cause.holds):
        return _start_awaited(job, status, cause)
    if cause is not None:
        message = cond.brief(cause.message)
        permanent = cause.permanent
        if cause.missing and _on_missing_object(job) is OnMissingObject.RETRY:
            permanent = False
            message = cond.brief(f"{message}; pods.onMissingObject Retry waits for {cause.missing}")
        return _give_back(job, world, status, cause.reason, message, permanent=permanent, backoff=True)
    taken = _gpus_unavailable(world)
    if taken is not None:
        return _give_back(job, world, status, cond.GPUS_UNAVAILABLE, taken, permanent=False, backoff=False)
    timeout = _bind_timeout(job, world)
    if timeout is not None:
        return _give_back(job, world, status, cond.BIND_TIMEOUT, timeout, permanent=False, backoff=False)
    return None


def _gpus_unavailable(world: World) -> str | None:
    """Why the job gives its GPUs back because the scheduler has said for GPUS_UNAVAILABLE_SECONDS that a worker
    pod's claim cannot be allocated: a claim that is not the job's holds one of its pinned GPUs (docs/dra.md).
    The job goes back to the queue, where admission sees that claim and picks other GPUs or waits."""
    for pod in worker_pods(world.pods):
        if (pod.get("spec") or {}).get("nodeName"):
            continue
        for condition in (pod.get("status") or {}).get("conditions") or []:
            said = str(condition.get("message") or "")
            if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
                continue
            if CLAIMS_UNALLOCATABLE not in said:
                continue
            since = cond.parse_time(condition.get("lastTransitionTime")) or world.now
            if (world.now - since).total_seconds() < GPUS_UNAVAILABLE_SECONDS:
                continue
            return (
                f"worker pod {pod['metadata']['name']}: the scheduler {CLAIMS_UNALLOCATABLE} (another claim holds one "
                "of its pinned GPUs); gave its GPUs back and queued again"
            )
    return None


def _on_missing_object(job: Job) -> OnMissingObject:
    return OnMissingObject((job.spec.get("pods") or {}).get("onMissingObject") or OnMissingObject.FAIL)


def _start_awaited(job: Job, status: dict[str, Any], cause: Cause) -> Outcome:
    """A pod of the job has not started for a reason that may pass: the status says which pod waits for what
    (a Normal Event when that changes: the kubelet's own Warning is on the pod), the job keeps its nodes until the
    cause is past StartBounds.timeout."""
    message = cond.brief(cause.message)
    before = cond.find(status.get("conditions"), cond.RAYCLUSTER_READY) or {}
    status["conditions"] = cond.set_condition(
        status.get("conditions"), cond.RAYCLUSTER_READY, False, cause.reason, message, job.generation
    )
    status["message"] = message
    actions: tuple[Action, ...] = ()
    if before.get("reason") != cause.reason:
        actions = (Post(False, cause.reason, message),)
    return Outcome(actions, status_of(status), LOOK_AGAIN_SECONDS)


def running_and_ready(pod: Mapping[str, Any]) -> str | None:
    """Why a pod is not Running and Ready, as the API shows it (None: it is)."""
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    scheduled = conditions.get("PodScheduled") or {}
    if not (pod.get("spec") or {}).get("nodeName"):
        said = scheduled.get("message") or "the scheduler has not placed it yet"
        return f"not scheduled: {said}"
    if status.get("phase") != "Running":
        waiting = [
            (c.get("state") or {}).get("waiting") or {}
            for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        ]
        found = next((w for w in waiting if w.get("reason")), {})
        # The kubelet's own words where it has them (`secret "token" not found`): the reason alone names the kind
        # of failure, not what to fix.
        said = (
            f"{found['reason']}: {cond.brief(found['message'], 120)}" if found.get("message") else found.get("reason")
        )
        return f"{status.get('phase') or 'Pending'}{f' ({said})' if said else ''}"
    ready = conditions.get("Ready") or {}
    return (
        None if ready.get("status") == "True" else f"Running, not Ready ({ready.get('reason') or 'no Ready condition'})"
    )


@dataclass(frozen=True)
class PodProblems:
    """What keeps the job's planned Ray pods from all running: the head's problem, and each planned node's whose
    worker pod is not Running and Ready there (in node order)."""

    head: str | None
    workers: dict[str, str]
    pods: dict[str, str] = field(default_factory=dict)
    """Planned node -> the uid of the job's worker pod bound there (Ready or not)."""
    created: dict[str, str] = field(default_factory=dict)
    """Planned node -> when that pod was created (RFC 3339)."""

    def first(self) -> str | None:
        return self.head or next(iter(self.workers.values()), None)


def planned_nodes(status: Mapping[str, Any]) -> set[str]:
    """The nodes of status.placement: one worker pod each."""
    return {n for c in (status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}


def pod_problems(status: Mapping[str, Any], cluster: str | None, pods: Sequence[Mapping[str, Any]]) -> PodProblems:
    """Which of the job's planned Ray pods is not Running and Ready on its planned node, and why. The plan's pods
    are the head and one worker per node of status.placement; a pod counts if it belongs to the job's current Ray
    cluster (`cluster`, KubeRay's ray.io/cluster label) and is not being deleted. KubeRay's own readiness is not
    enough: it judges the pods it has listed, so a head that runs before a worker pod exists reads as ready
    (ray-project/kuberay#2188)."""
    own = [
        p
        for p in pods
        if not (p.get("metadata") or {}).get("deletionTimestamp")
        and (cluster is None or (p.get("metadata", {}).get("labels") or {}).get(RAY_CLUSTER_POD_LABEL) == cluster)
    ]
    heads = head_pods(own)
    head = None
    if not heads:
        head = "the Ray head pod does not exist yet"
    elif (why := running_and_ready(heads[0])) is not None:
        head = f"Ray head pod {heads[0]['metadata']['name']}: {why}"
    workers = worker_pods(own)
    bound = {(p.get("spec") or {}).get("nodeName"): p for p in workers}
    unbound = [p for p in workers if not (p.get("spec") or {}).get("nodeName")]
    problems: dict[str, str] = {}
    for node in sorted(planned_nodes(status)):
        pod = bound.get(node)
        if pod is None:
            problems[node] = (
                f"worker pod {unbound[0]['metadata']['name']}: {running_and_ready(unbound[0])}"
                if unbound
                else f"no worker pod on node {node} yet"
            )
        elif (why := running_and_ready(pod)) is not None:
            problems[node] = f"worker pod {pod['metadata']['name']} on node {node}: {why}"
    uids = {node: (pod.get("metadata") or {}).get("uid", "") for node, pod in bound.items() if node}
    created = {node: (pod.get("metadata") or {}).get("creationTimestamp", "") for node, pod in bound.items() if node}
    return PodProblems(head, problems, uids, created)


def waiting_pod(status: Mapping[str, Any], cluster: str | None, pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The first of `pod_problems` (None: every planned pod runs, Ready, on its planned node)."""
    return pod_problems(status, cluster, pods).first()


def cluster_ready(
    status: Mapping[str, Any], cluster: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why the job's RayCluster is not ready (None: KubeRay says so and every planned pod runs and is Ready)."""
    name = (cluster.get("metadata") or {}).get("name")
    waiting = waiting_pod(status, name, pods)
    if waiting is not None:
        return waiting
    return None if raycluster_ready(dict(cluster)) else "waiting for KubeRay to see the Ray pods ready"


def with_cluster(job: Job, world: World, status: dict[str, Any], cluster: Mapping[str, Any]) -> Outcome:
    """A job without an entrypoint: its phase follows its Ray pods (every planned one Running and Ready on its node)
    and its RayCluster's readiness."""
    waiting = cluster_ready(status, cluster, world.pods)
    if waiting is not None:
        failed = provisioning_checks(job, world, status)
        if failed is not None:
            return failed
    status.update(mirrored_status(status, waiting, job.generation))
    status["phase"] = str(status["phase"])
    return Outcome((), status_of(status), None if waiting is None else LOOK_AGAIN_SECONDS)


#: KubeRay's condition type on a RayCluster whose pods all came up.
KUBERAY_PROVISIONED = "RayClusterProvisioned"


def raycluster_ready(body: dict) -> bool:
    """KubeRay marks a cluster ready with state `ready` or the RayClusterProvisioned condition."""
    status = body.get("status") or {}
    return status.get("state") == "ready" or cond.is_true(status.get("conditions"), KUBERAY_PROVISIONED)


def mirrored_status(job_status: Mapping[str, Any], waiting: str | None, generation: int | None) -> dict:
    """The RLJob status fields that follow its Ray pods: Running once none is `waiting` (what one waits for)."""
    ready = waiting is None
    return {
        "phase": JobPhase.RUNNING if ready else JobPhase.PROVISIONING,
        "conditions": cond.set_condition(
            job_status.get("conditions"),
            cond.RAYCLUSTER_READY,
            ready,
            cond.RAYCLUSTER_IS_READY if ready else cond.RAYCLUSTER_PROVISIONING,
            "all Ray pods are ready" if ready else waiting,
            generation,
        ),
    }
