"""One level-triggered reconcile of an RLJob: `reconcile(job, world) -> Outcome(actions, status)`.

The shape is KubeRay's `Reconcile` -> `calculateStatus`: every handler and timer that has a reason to look at a
job (it was created or changed, its RayCluster or RayJob changed, the queue moved, time passed) builds the same
snapshot of what exists (`handlers/lifecycle.py` observes it from kopf indexes copied once and a few API reads)
and calls this pure function, which decides what to do and what the status is; the caller applies the actions
and writes the status once, with optimistic concurrency. A failure seen in a real cluster is a unit test over
its recorded snapshot (tests/operator/test_reconcile.py).

What this function decides itself: a queued job's place, provisioning failures (pods refused, images that
cannot be pulled, containers that crash at start, pods unschedulable on their pinned node, worker pods not
bound in time) and what to do about them, the driver's state, its restarts, its binding check and what died
when it failed. Planning and admission (which nodes) are the `Provision` action: `admission.decide` over the
queue, under the reservation ledger's lock, then the children are applied.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement_core.cluster import Cluster
from placement_core.observe.verify import BindingReport
from placement_core.plan import Plan
from rlplace_operator import diagnosis
from rlplace_operator.admission import kueue
from rlplace_operator.admission.rules import Admitted, Decision, Waiting
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import dump
from rlplace_operator.api.conditions import Condition
from rlplace_operator.api.names import ATTEMPT_ANNOTATION, JOB_LABEL, KUBERAY_NODE_TYPE_LABEL
from rlplace_operator.api.podspec import OnMissingObject
from rlplace_operator.api.rljob import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_PREEMPTION_GRACE_SECONDS,
    Framework,
    OnBindingMismatch,
    RestartPolicy,
    RLJobSpec,
    SubmissionMode,
)
from rlplace_operator.api.status import MAX_RESTARTS_KEPT, JobPhase, RLJobStatus
from rlplace_operator.handlers.raycluster import mirrored_status, raycluster_ready
from rlplace_operator.handlers.rayjob import BINDING_CONDITION, driver_state, driver_status
from rlplace_operator.planning import recommend

#: A job with a worker pod still unbound this long after the pod was created (another workload took its node in
#: between) gives its nodes back and queues again.
BIND_TIMEOUT_SECONDS = 30.0
#: How long the scheduler may say a worker pod "cannot allocate all claims" (its pinned DRA GPUs are another
#: claim's) before the job gives its GPUs back: a moment for a claim of the job's own stopped pods to go.
GPUS_UNAVAILABLE_SECONDS = 10.0
#: The scheduler's words for a pod whose claims it cannot allocate (kube-scheduler's DynamicResources plugin).
CLAIMS_UNALLOCATABLE = "cannot allocate all claims"
#: How often live and queued jobs are looked at again without any watch event (the NodeGroup timer's period):
#: a provisioning failure is seen within DIAGNOSIS_SECONDS + this.
RECHECK_SECONDS = 5.0
#: Backoff after a provisioning failure that may pass: the first retry after this long, doubling up to the cap.
FIRST_BACKOFF_SECONDS = 10.0
MAX_BACKOFF_SECONDS = 300.0
#: Messages written into status are cut to this: they say what happened in a line; logs stay in logs.
MAX_STATUS_MESSAGE = 300


# -- the snapshot ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """The RLJob as observed (wire form)."""

    namespace: str
    name: str
    uid: str
    generation: int | None
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    resource_version: str | None = None
    created: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: The RLJob's labels: its children carry them (a gang scheduler's or Kueue's labels reach the RayCluster).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The update handler saw the rlplace.io/profile annotation change (a re-plan, as a spec change).
    profile_changed: bool = False
    #: Read from the API just now (a handler's body, a GET), not from an index that may lag behind writes.
    fresh: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def entrypoint(self) -> bool:
        return bool(self.spec.get("entrypoint"))

    @property
    def framework(self) -> Framework:
        return Framework(self.spec.get("framework") or Framework.RLPLACE)

    @property
    def framework_job(self) -> bool:
        """A framework job: the framework's own program starts its processes (models.Framework)."""
        return self.framework is not Framework.RLPLACE

    @property
    def stops_on_mismatch(self) -> bool:
        return (self.spec.get("onBindingMismatch") or OnBindingMismatch.FAIL) == OnBindingMismatch.FAIL

    @property
    def kueue_queue(self) -> str | None:
        """The LocalQueue the job names: Kueue admits it (docs/kueue.md)."""
        return kueue.queue_name(self.labels)

    @property
    def submission_mode(self) -> SubmissionMode:
        run = self.spec.get("run") or {}
        return SubmissionMode(run.get("submissionMode") or SubmissionMode.K8S_JOB)


@dataclass(frozen=True)
class World:
    """What exists around one job at one moment (API JSON dicts), as much as the job's state needs."""

    now: dt.datetime
    raycluster: Mapping[str, Any] | None = None
    """The job's own RayCluster (no entrypoint)."""
    rayjob: Mapping[str, Any] | None = None
    """The job's RayJob (with an entrypoint)."""
    child_known: bool = True
    """False when the children were not looked up (a queued job): a missing one then says nothing."""
    pods: Sequence[Mapping[str, Any]] = ()
    """The job's Ray pods (head and workers)."""
    events: Sequence[Mapping[str, Any]] = ()
    """Warning events about the job's RayCluster, RayJob, submitter and pods since it was admitted."""
    nodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The job's nodes, by name (read only when its driver failed)."""
    plan: Plan | None = None
    """The job's plan from its ConfigMap (read only when its driver failed, or a pod of it has not started)."""
    start_bounds: diagnosis.StartBounds = field(default_factory=diagnosis.StartBounds)
    """How long the job's pods may take to start (the operator's --pod-start-grace and --pod-start-timeout)."""
    driver_log_tail: str = ""
    """The end of the driver's log (read only when it failed)."""
    report: BindingReport | None = None
    """The binding report of the current attempt, if read and found."""
    queue: Decision | None = None
    """What this queue pass decided for a waiting job whose demand is known (None: not decided here)."""
    cluster: Cluster | None = None
    """The running job's nodes as placement_core sees them, when its recommendation is due (recommend.py)."""
    workload: kueue.WorkloadState | None = None
    """The job's Kueue Workload as Kueue left it (a job that names a LocalQueue, once rlplace made it)."""


# -- actions ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Provision:
    """Plan the job, pass it through admission and apply its ConfigMap and RayCluster or RayJob (or queue it)."""


@dataclass(frozen=True)
class DeleteChildren:
    """Delete the job's RayCluster or RayJob: its pods go, its nodes are free for the queue."""


@dataclass(frozen=True)
class ReleaseNodes:
    """Drop this operator's reservation of the job's nodes."""


@dataclass(frozen=True)
class Post:
    """An Event on the RLJob."""

    warning: bool
    reason: str
    message: str


@dataclass(frozen=True)
class RequestCheckpoint:
    """Ask the job's driver to save a checkpoint now (the answer to its next progress report)."""


@dataclass(frozen=True)
class MarkWorkload:
    """Set a condition on the job's Kueue Workload (PodsReady, Finished), as a Kueue job reconciler would."""

    workload: str
    condition: str
    reason: str
    message: str


@dataclass(frozen=True)
class ReleaseWorkload:
    """Give the evicted Workload's quota back to Kueue (every pod of the job is gone): `requeue` unless it was
    deactivated."""

    workload: str
    requeue: bool


Action = Provision | DeleteChildren | ReleaseNodes | Post | RequestCheckpoint | MarkWorkload | ReleaseWorkload


@dataclass(frozen=True)
class Outcome:
    actions: tuple[Action, ...]
    status: RLJobStatus
    #: Look at the job again after this many seconds even if nothing changes (None: the next event will do).
    requeue_after: float | None = None


# -- helpers ---------------------------------------------------------------------------------------------------


def brief(message: str, limit: int = MAX_STATUS_MESSAGE) -> str:
    """One line of at most `limit` characters: the first line of a log dump, never the dump."""
    line = " ".join((message or "").strip().splitlines()[:1]).strip()
    if len((message or "").strip().splitlines()) > 1:
        line += " ..."
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def backoff_seconds(retries: int) -> float:
    """Seconds before the `retries`-th retry after a provisioning failure."""
    return min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** max(0, min(retries - 1, 10)))


def admitted_since(status: Mapping[str, Any]) -> dt.datetime | None:
    admitted = cond.find(status.get("conditions"), cond.ADMITTED)
    if admitted is None or admitted.get("status") != "True":
        return None
    return parse_time(admitted.get("lastTransitionTime"))


def holds_nodes(status: Mapping[str, Any]) -> bool:
    """Whether the job was admitted and its RayCluster or RayJob was made (phase Provisioning or Running)."""
    live = status.get("phase") in (JobPhase.PROVISIONING, JobPhase.RUNNING)
    return live and bool(status.get("rayCluster") or status.get("rayJob"))


def _driver_done(job: Job) -> bool:
    status = job.status
    if status.get("observedGeneration") != job.generation:
        return False
    return status.get("phase") in (JobPhase.SUCCEEDED, JobPhase.FAILED)


def _worker_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        p
        for p in pods
        if (p.get("metadata", {}).get("labels") or {}).get(KUBERAY_NODE_TYPE_LABEL) == "worker"
        and not p.get("metadata", {}).get("deletionTimestamp")
    ]


def _status(wire: Mapping[str, Any]) -> RLJobStatus:
    return RLJobStatus.model_validate({k: v for k, v in wire.items() if v is not None})


# -- the decision ----------------------------------------------------------------------------------------------


def reconcile(job: Job, world: World) -> Outcome:
    """What to do about `job` in `world`, and the status that describes it (see the module docstring)."""
    status = dict(job.status)
    if _driver_done(job) and not job.profile_changed:
        return Outcome((), _status(status))  # ended for this spec: nothing to do until the spec changes
    if job.spec.get("suspend"):
        if status.get("phase") == JobPhase.SUSPENDED and status.get("observedGeneration") == job.generation:
            return Outcome((), _status(status))
        return Outcome((Provision(),), _status(status))
    if world.workload is not None and world.workload.evicted and world.workload.holds_quota:
        return _evicted(job, world, status, world.workload)
    moved = _kueue_moved(job, world, status) if world.workload is not None else None
    if moved is not None:
        return moved
    if not holds_nodes(status) or status.get("observedGeneration") != job.generation or job.profile_changed:
        return _waiting(job, world, status)
    child = world.rayjob if job.entrypoint else world.raycluster
    if job.entrypoint and child is not None and stale_attempt(job, child):
        # A RayJob of an attempt before a restart (being deleted, or left by an operator that stopped between
        # writing the restart and deleting it): delete it (again); the new attempt is made once it is gone.
        return Outcome((DeleteChildren(),), _status(status), RECHECK_SECONDS)
    if world.child_known and child is None:
        return Outcome((Provision(),), _status(status))  # its RayCluster or RayJob is gone: plan it again
    if not world.child_known:
        return Outcome((), _status(status), RECHECK_SECONDS)
    assert child is not None
    if job.entrypoint:
        return _with_driver(job, world, status, child)
    return _with_cluster(job, world, status, child)


def _waiting(job: Job, world: World, status: dict[str, Any]) -> Outcome:
    """A job that holds no nodes: through admission, unless its backoff runs or the queue pass placed it."""
    retry_after = parse_time(status.get("retryAfter"))
    backing_off = retry_after is not None and world.now < retry_after
    if status.get("phase") == JobPhase.QUEUED and status.get("observedGeneration") == job.generation and backing_off:
        return Outcome((), _status(status), (retry_after - world.now).total_seconds())
    if job.entrypoint and world.rayjob is not None and stale_attempt(job, world.rayjob):
        # The last attempt's RayJob is still there (its KubeRay finalizer runs, or an operator that restarted
        # never deleted it): applying the new one now would patch it. Delete it (again) and look again.
        message = "waiting for the previous attempt's RayJob to be deleted"
        status.update(message=message, waitingFor="the previous attempt to stop")
        return Outcome((DeleteChildren(),), _status(status), RECHECK_SECONDS)
    if status.get("phase") == JobPhase.QUEUED and isinstance(world.queue, Waiting):
        waiting = world.queue
        message = f"waiting for {waiting.reason} (position {waiting.position} in the queue)"
        status["conditions"] = cond.set_condition(
            status.get("conditions"), cond.ADMITTED, False, cond.QUEUED, message, job.generation
        )
        actions: tuple[Action, ...] = ()
        if status.get("waitingFor") != waiting.reason:
            actions = (Post(False, cond.QUEUED, message),)
        status.update(message=message, queuePosition=waiting.position, waitingFor=waiting.reason)
        return Outcome(actions, _status(status))
    if isinstance(world.queue, Admitted) or world.queue is None:
        return Outcome((Provision(),), _status(status))
    return Outcome((), _status(status))


def _grace_seconds(job: Job, status: Mapping[str, Any]) -> int:
    """How long an evicted job's driver may take to checkpoint on request: spec.checkpoint's grace for a running
    driver that can checkpoint, else none."""
    checkpoint = job.spec.get("checkpoint")
    if not checkpoint or not job.entrypoint or status.get("phase") != JobPhase.RUNNING:
        return 0
    return int(checkpoint.get("preemptionGraceSeconds", DEFAULT_PREEMPTION_GRACE_SECONDS))


def _attempt_stopped(job: Job, status: dict[str, Any], reason: str, message: str, **fields: Any) -> None:
    """`status` as of a job whose attempt is being stopped (its children deleted, its nodes given back): Admitted
    False with `reason`, and nothing left of the attempt (binding, driver times, progress, children, place in the
    queue); `fields` set the rest (phase, attempts, restarts, ...)."""
    status["conditions"] = cond.set_condition(
        [c for c in status.get("conditions") or [] if c.get("type") != BINDING_CONDITION],
        cond.ADMITTED,
        False,
        reason,
        message,
        job.generation,
    )
    status.update(
        message=brief(message),
        rayCluster=None,
        rayJob=None,
        binding=None,
        driverStartTime=None,
        driverEndTime=None,
        progress=None,
        queuePosition=None,
        waitingFor=None,
        observedGeneration=job.generation,
        **fields,
    )


def _evicted(job: Job, world: World, status: dict[str, Any], workload: kueue.WorkloadState) -> Outcome:
    """Kueue evicted the job (preempted by a job of higher priority, its PodsReady timeout, deactivated): a
    checkpointed move, not a kill. The driver is asked to checkpoint and given spec.checkpoint's grace, then the
    job's Ray children are deleted; once none of its pods is left the Workload's quota is released (Kueue waits
    for that before it admits the preemptor) and the job is Queued again as its next attempt, which resumes from
    the checkpoint wherever Kueue admits it next. A deactivated Workload suspends the job instead."""
    said = f"Kueue evicted the job ({workload.evicted_reason}: {brief(workload.evicted_message, 200)})"
    child = world.rayjob if job.entrypoint else world.raycluster
    stopping = child is not None and not (child.get("metadata") or {}).get("deletionTimestamp")
    progress = status.get("progress") or {}
    preemption = status.get("preemption")
    if stopping:
        if preemption is None:
            preemption = {
                "reason": workload.evicted_reason or "Evicted",
                "message": brief(workload.evicted_message),
                "since": cond.timestamp(world.now),
                "checkpointStep": progress.get("checkpointStep"),
            }
            status["preemption"] = {k: v for k, v in preemption.items() if v is not None}
            grace = _grace_seconds(job, status)
            if grace:
                message = f"{said}; asking its driver to checkpoint (up to {grace} s)"
                status["message"] = message
                return Outcome((RequestCheckpoint(), Post(True, cond.PREEMPTED, message)), _status(status), 1.0)
        grace = _grace_seconds(job, status)
        since = parse_time(preemption.get("since")) or world.now
        saved = progress.get("checkpointStep")
        checkpointed = saved is not None and saved != preemption.get("checkpointStep")
        left = grace - (world.now - since).total_seconds()
        if left > 0 and not checkpointed:
            return Outcome((), _status(status), min(2.0, left))
        how = (
            f"checkpointed at step {saved}"
            if checkpointed
            else "no checkpoint asked for"
            if not grace
            else (f"no checkpoint within {grace} s")
        )
        message = f"{said}; {how}: stopping its Ray pods"
        status["message"] = message
        return Outcome((DeleteChildren(), Post(False, cond.PREEMPTED, message)), _status(status), RECHECK_SECONDS)
    if world.pods:
        status["message"] = f"{said}; waiting for its {len(world.pods)} Ray pods to stop"
        return Outcome((), _status(status), 2.0)
    deactivated = workload.evicted_reason == kueue.DEACTIVATED or not workload.active
    attempt = attempt_of(status) + 1 if holds_nodes(status) and job.entrypoint else attempt_of(status)
    preemptions = int(status.get("preemptions") or 0) + (1 if holds_nodes(status) else 0)
    if deactivated:
        message = f"{said}; its Workload was deactivated: suspended until it is active again"
        phase, reason = JobPhase.SUSPENDED, cond.SUSPENDED
    else:
        message = f"{said}; its quota is released and it is queued again as attempt {attempt}"
        phase, reason = JobPhase.QUEUED, cond.PREEMPTED
    restarts = list(status.get("restarts") or [])
    if holds_nodes(status):
        record = {"attempt": attempt, "time": cond.timestamp(world.now), "reason": reason, "message": brief(message)}
        restarts = [*restarts, record][-MAX_RESTARTS_KEPT:]
    _attempt_stopped(
        job,
        status,
        reason,
        message,
        phase=str(phase),
        attempts=attempt if job.entrypoint and attempt > 1 else status.get("attempts"),
        preemptions=preemptions or None,
        restarts=restarts or None,
        preemption=None,
        kueue=None,
    )
    actions = (ReleaseWorkload(workload.name, not deactivated), ReleaseNodes(), Post(True, reason, message))
    return Outcome(actions, _status(status), RECHECK_SECONDS)


#: Restart reason of a job whose node Kueue replaced inside its admitted Workload.
NODE_REPLACED = "NodeReplaced"


def _kueue_moved(job: Job, world: World, status: dict[str, Any]) -> Outcome | None:
    """Kueue's topology-aware scheduling replaced a node of the running job inside its admitted Workload (the node
    became NotReady or tainted): the job follows, as after a lost node. Its attempt is stopped, the node is left out
    of its next plans, and it is planned again at once on the hosts Kueue now grants, as its next attempt (resuming
    from its checkpoint). Not counted against run.maxRestarts: Kueue, not the job, moved it."""
    workload = world.workload
    if workload is None or not holds_nodes(status) or not workload.admitted or workload.evicted:
        return None
    try:
        granted = {host for hosts in workload.hosts().values() for host in hosts}
    except kueue.AssignmentError:
        return None
    planned = {n for c in (status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}
    gone = sorted(planned - granted)
    if not granted or not gone:
        return None
    attempt = attempt_of(status) + 1
    new = ", ".join(sorted(granted - planned)) or "none"
    message = brief(
        f"Kueue replaced node {', '.join(gone)} of the job's Workload {workload.name} (now {new}): "
        f"restarting as attempt {attempt} on the granted nodes"
    )
    excluded = {e["name"]: e for e in status.get("excludedNodes") or []}
    for name in gone:
        excluded[name] = {"name": name, "reason": f"replaced by Kueue during attempt {attempt_of(status)}"}
    record = {
        "attempt": attempt,
        "time": cond.timestamp(world.now),
        "reason": NODE_REPLACED,
        "message": message,
        "nodesReplaced": gone,
    }
    _attempt_stopped(
        job,
        status,
        NODE_REPLACED,
        message,
        phase=str(JobPhase.QUEUED),
        attempts=attempt if job.entrypoint else status.get("attempts"),
        preemptions=int(status.get("preemptions") or 0) + 1,
        restarts=[*list(status.get("restarts") or []), record][-MAX_RESTARTS_KEPT:],
        excludedNodes=list(excluded.values()),
    )
    actions = (DeleteChildren(), ReleaseNodes(), Post(True, NODE_REPLACED, message))
    return Outcome(actions, _status(status), RECHECK_SECONDS)


def with_kueue(job: Job, world: World, outcome: Outcome) -> Outcome:
    """`outcome` with what the job's Kueue Workload must be told, as Kueue's own job reconciler would: PodsReady
    once the job runs (an admin's waitForPodsReady evicts a Workload without it), Finished when it ends (the
    quota frees at once)."""
    workload = world.workload
    if workload is None or not workload.admitted or workload.evicted or workload.finished:
        return outcome
    phase = outcome.status.phase
    if phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
        mark = MarkWorkload(workload.name, kueue.FINISHED, str(phase), f"the RLJob {phase.lower()}")
    elif phase == JobPhase.RUNNING and not workload.pods_ready:
        mark = MarkWorkload(workload.name, kueue.PODS_READY, "Started", "every Ray pod of the RLJob runs")
    else:
        return outcome
    status = outcome.status
    if mark.condition == kueue.PODS_READY and status.kueue is not None:
        # Said in the job's status too: the timer looks again at a running job until it is (lifecycle._needs_look).
        status = status.model_copy(update={"kueue": status.kueue.model_copy(update={"pods_ready": True})})
    return dataclasses.replace(outcome, actions=(*outcome.actions, mark), status=status)


def _bind_timeout(job: Job, world: World) -> str | None:
    """Why the job gives its nodes back because a worker pod has waited BIND_TIMEOUT_SECONDS for its node (another
    workload took it), or None. Counted from each pod's creation, not from admission: KubeRay makes the pods, and
    under a burst it makes them later than that (at 1,000 jobs on the 2-core local cluster, most pods came more
    than 30 s after admission, and giving their nodes back then only made the queue churn)."""
    since = admitted_since(job.status)
    if since is None or (world.now - since).total_seconds() < BIND_TIMEOUT_SECONDS:
        return None
    if job.status.get("attempts"):
        return None  # its driver ran on these nodes: a retry's new pods are KubeRay's to bring up, not a bind race
    workers = _worker_pods(world.pods)
    unbound = [p for p in workers if not (p.get("spec") or {}).get("nodeName")]
    waited = [
        p
        for p in unbound
        if (world.now - (parse_time(p["metadata"].get("creationTimestamp")) or world.now)).total_seconds()
        >= BIND_TIMEOUT_SECONDS
    ]
    if not waited:
        return None
    expected = int(job.status.get("nodes") or 0)
    return (
        f"{len(workers) - len(unbound)} of {expected} worker pods bound, {waited[0]['metadata']['name']} unbound "
        f"{BIND_TIMEOUT_SECONDS:.0f} s after it was created (another workload took a node): gave the nodes back "
        "and queued again"
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
        return Outcome(tuple(actions), _status(status))
    retries = int(status.get("provisioningRetries") or 0) + (1 if backoff else 0)
    delay = backoff_seconds(retries) if backoff else 0.0
    if backoff:
        message = f"{message}; gave the nodes back, retrying in {delay:.0f} s (retry {retries})"
        status.update(provisioningRetries=retries, retryAfter=cond.timestamp(world.now + dt.timedelta(seconds=delay)))
        conditions = cond.set_condition(conditions, cond.RAYCLUSTER_READY, False, reason, message, job.generation)
    status["conditions"] = cond.set_condition(conditions, cond.ADMITTED, False, reason, message, job.generation)
    status.update(phase=str(JobPhase.QUEUED), message=brief(message), observedGeneration=job.generation)
    # Recorded as a restart too: the attempt the job goes on to, and why it gave its nodes back.
    attempt = int(status.get("attempts") or 0) + 1
    restart = {"attempt": attempt, "time": cond.timestamp(world.now), "reason": reason, "message": brief(message)}
    status["restarts"] = [*list(status.get("restarts") or []), restart][-MAX_RESTARTS_KEPT:]
    actions.append(Post(True, reason, message))
    return Outcome(tuple(actions), _status(status), delay or RECHECK_SECONDS)


def _provisioning_checks(job: Job, world: World, status: dict[str, Any]) -> Outcome | None:
    """A job whose Ray pods are not all up: a named failure ends it or requeues it; so does a bind timeout. What
    may pass (a volume attaching, a claim being bound) is said in the status while the job keeps its nodes."""
    cause = diagnosis.provisioning_failure(
        list(world.pods), list(world.events), world.now, world.start_bounds, world.plan
    )
    if cause is not None and cause.waiting:
        return _start_awaited(job, status, cause)
    if cause is not None:
        message = brief(cause.message)
        permanent = cause.permanent
        if cause.missing and _on_missing_object(job) is OnMissingObject.RETRY:
            permanent = False
            message = brief(f"{message}; pods.onMissingObject Retry waits for {cause.missing}")
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
    for pod in _worker_pods(world.pods):
        if (pod.get("spec") or {}).get("nodeName"):
            continue
        for condition in (pod.get("status") or {}).get("conditions") or []:
            said = str(condition.get("message") or "")
            if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
                continue
            if CLAIMS_UNALLOCATABLE not in said:
                continue
            since = parse_time(condition.get("lastTransitionTime")) or world.now
            if (world.now - since).total_seconds() < GPUS_UNAVAILABLE_SECONDS:
                continue
            return (
                f"worker pod {pod['metadata']['name']}: the scheduler {CLAIMS_UNALLOCATABLE} (another claim holds one "
                "of its pinned GPUs); gave its GPUs back and queued again"
            )
    return None


def _on_missing_object(job: Job) -> OnMissingObject:
    return OnMissingObject((job.spec.get("pods") or {}).get("onMissingObject") or OnMissingObject.FAIL)


def _start_awaited(job: Job, status: dict[str, Any], cause: diagnosis.Cause) -> Outcome:
    """A pod of the job has not started for a reason that may pass: the status says which pod waits for what
    (a Normal Event when that changes: the kubelet's own Warning is on the pod), the job keeps its nodes until the
    cause is past StartBounds.timeout."""
    message = brief(cause.message)
    before = cond.find(status.get("conditions"), cond.RAYCLUSTER_READY) or {}
    status["conditions"] = cond.set_condition(
        status.get("conditions"), cond.RAYCLUSTER_READY, False, cause.reason, message, job.generation
    )
    status["message"] = message
    actions: tuple[Action, ...] = ()
    if before.get("reason") != cause.reason:
        actions = (Post(False, cause.reason, message),)
    return Outcome(actions, _status(status), RECHECK_SECONDS)


def _with_cluster(job: Job, world: World, status: dict[str, Any], cluster: Mapping[str, Any]) -> Outcome:
    """A job without an entrypoint: its phase follows its RayCluster's readiness."""
    ready = raycluster_ready(dict(cluster))
    if not ready:
        failed = _provisioning_checks(job, world, status)
        if failed is not None:
            return failed
    status.update(mirrored_status(status, ready, job.generation))
    status["phase"] = str(status["phase"])
    return Outcome((), _status(status), None if ready else RECHECK_SECONDS)


def _with_driver(job: Job, world: World, status: dict[str, Any], rayjob: Mapping[str, Any]) -> Outcome:
    """A job with an entrypoint: its phase follows the RayJob; restarts, binding and what died are recorded."""
    state = driver_state(rayjob)
    if not state.started and not state.finished:
        failed = _provisioning_checks(job, world, status)
        if failed is not None:
            return failed
    actions: list[Action] = []
    restart = _new_attempt(job, world, rayjob)
    if restart is not None:
        status["attempts"] = restart["attempt"]
        status["restartCount"] = restart["attempt"] - 1
        status["restarts"] = [*list(status.get("restarts") or []), restart][-MAX_RESTARTS_KEPT:]
        # The new attempt has not verified anything yet: its own report is looked for again.
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != BINDING_CONDITION]
        status["binding"] = None
        status["driverStartTime"] = None
        actions.append(Post(True, restart["reason"], restart["message"]))
    report = world.report
    mismatch_fails = not job.framework_job or job.stops_on_mismatch
    new = driver_status(
        status, rayjob, report, job.namespace, job.name, job.submission_mode, job.generation, mismatch_fails
    )
    if state.started and not status.get("attempts"):
        new["attempts"] = 1
    if job.framework_job and mismatch_fails and not state.finished and report is not None and not report.ok:
        # The framework's own launcher put a process elsewhere than planned: nothing in its program stops it
        # (an rlplace driver exits on its own check), so the operator does; the job is Failed, the rank named.
        actions.append(DeleteChildren())
    elif new["phase"] == JobPhase.FAILED and status.get("phase") != JobPhase.FAILED:
        new = _failure_named(job, world, new, state.reason)
        restarted = restart_on_failure(job, world, status, new)
        if restarted is not None:
            return restarted
    for condition in new.get("conditions") or []:
        condition["message"] = brief(condition.get("message") or "", cond.MAX_MESSAGE_CHARS)
    status.update(new)
    status["message"] = brief(status.get("message") or "", MAX_STATUS_MESSAGE + 200)
    status["phase"] = str(status["phase"])
    if status["phase"] == JobPhase.RUNNING and status.get("nodes") is not None:
        status["queuePosition"] = None
    status["observedGeneration"] = job.generation
    finished = state.finished or status["phase"] in (JobPhase.SUCCEEDED, JobPhase.FAILED)
    before = {c.get("type"): (c.get("status"), c.get("reason")) for c in job.status.get("conditions") or []}
    for condition in status.get("conditions") or []:
        kind = condition.get("type")
        # An Event for the binding check's result and for the driver's outcome; the driver's way there
        # (Initializing, Submitting, Running, ...) is in the condition and the phase.
        if kind not in ("DriverSucceeded", BINDING_CONDITION) or (kind == "DriverSucceeded" and not finished):
            continue
        if before.get(kind) != (condition.get("status"), condition.get("reason")):
            actions.append(Post(condition.get("status") != "True", condition["reason"], condition["message"]))
    if finished:
        actions.append(ReleaseNodes())
    unverified = state.started and not any(c.get("type") == BINDING_CONDITION for c in status.get("conditions") or [])
    return Outcome(tuple(actions), _status(status), RECHECK_SECONDS if unverified or not state.started else None)


def _failure_named(job: Job, world: World, new: dict[str, Any], kuberay_reason: str) -> dict[str, Any]:
    """A failed driver's status says what died when a process or pod did, in one line; else KubeRay's reason
    with the first line of its message (the full log stays where driverLog points)."""
    conditions = new.get("conditions") or []
    if any(c.get("type") == BINDING_CONDITION and c.get("status") == "False" for c in conditions):
        return new  # the binding check failed: its message names the rank already
    since = parse_time(new.get("driverStartTime"))
    cause = diagnosis.lost_process(
        list(world.pods), list(world.events), world.nodes, world.plan, world.driver_log_tail, since
    )
    if cause is None and job.framework_job:
        cause = diagnosis.framework_missing(str(job.spec.get("framework")), world.driver_log_tail)
    log = new.get("driverLog")
    if cause is None:
        new["message"] = f"{brief(new['message'].split(' (driver log: ')[0])} (driver log: {log})"
        return new
    message = brief(cause.message)
    new["conditions"] = cond.set_condition(conditions, "DriverSucceeded", False, cause.reason, message, job.generation)
    new["message"] = f"{message} (driver log: {log})"
    return new


def _new_attempt(job: Job, world: World, rayjob: Mapping[str, Any]) -> dict[str, Any] | None:
    """A restart record when KubeRay submitted the driver again since the status was written: the driver's
    start time (KubeRay's rayJobInfo.startTime, from the Ray job's own record) differs from the one recorded.
    A new head pod (the old one lost) or KubeRay's retry count tells why."""
    info = (rayjob.get("status") or {}).get("rayJobInfo") or {}
    started, recorded = info.get("startTime"), job.status.get("driverStartTime")
    if not started or not recorded or started == recorded:
        return None
    attempt = int(job.status.get("attempts") or 1) + 1
    base = {"attempt": attempt, "time": cond.timestamp(world.now), "inPlace": True}
    # A new head first: when the head goes, the workers lose its GCS and exit too, so a worker's exit beside a
    # new head is the consequence, not the cause.
    recorded_at = parse_time(recorded)
    heads = [
        p
        for p in world.pods
        if (p.get("metadata", {}).get("labels") or {}).get(KUBERAY_NODE_TYPE_LABEL) == "head"
        and (parse_time(p["metadata"].get("creationTimestamp")) or world.now) > (recorded_at or world.now)
    ]
    if heads:
        head = heads[0]
        node = (head.get("spec") or {}).get("nodeName") or "an unbound node"
        message = (
            f"the head pod was lost and replaced by {head['metadata']['name']} on {node}; "
            f"KubeRay submitted the driver again (attempt {attempt})"
        )
        return {**base, "reason": "HeadPodReplaced", "message": message}
    cause = diagnosis.lost_process(list(world.pods), list(world.events), world.nodes, world.plan, "", recorded_at)
    if cause is not None:
        return {**base, "reason": cause.reason, "message": brief(f"{cause.message}; the driver was submitted again")}
    failed = int((rayjob.get("status") or {}).get("failed") or 0)
    reason = "DriverRetried" if failed else "DriverResubmitted"
    message = f"KubeRay submitted the driver again (attempt {attempt}, started {started})"
    return {**base, "reason": reason, "message": message}


# -- restarts on failure (spec.run.restartPolicy; docs/restarts.md) -----------------------------------------------

#: The condition reason and Event of a restart the operator makes.
RESTARTING = "Restarting"
#: The failure causes (diagnosis.lost_process) a restart can help with: something was lost, not the driver's
#: own error (that would fail again the same way).
RESTARTABLE = frozenset(
    {
        diagnosis.POD_DELETED,
        diagnosis.POD_EVICTED,
        diagnosis.OOM_KILLED,
        diagnosis.NODE_NOT_READY,
        diagnosis.CONTAINER_EXITED,
        diagnosis.WORKER_DIED,
    }
)


def attempt_of(status: Mapping[str, Any]) -> int:
    """The attempt the job's current (or next) RayJob runs: 1 until a restart."""
    return int(status.get("attempts") or 1)


def attempt_for_new_child(status: Mapping[str, Any], generation: int | None) -> int:
    """The attempt a RayJob made now runs (its rlplace.io/attempt annotation and RLPLACE_ATTEMPT): the job's
    current one when the status already counts attempts of this spec (a restart waiting for its nodes, a
    re-placement, a RayJob deleted under a running job), else 1. Anything lower reads as a stale attempt and is
    deleted again (`stale_attempt`)."""
    same_spec = status.get("observedGeneration") == generation
    continuing = holds_nodes(status) or bool(status.get("restartCount")) or bool(status.get("preemptions"))
    return attempt_of(status) if same_spec and continuing else 1


def rayjob_attempt(status: Mapping[str, Any]) -> int:
    """The attempt the operator made the job's current RayJob for: the current attempt, less the attempts KubeRay
    began since within that same RayJob (restarts recorded inPlace: a new head pod, a retried submitter)."""
    in_place = 0
    for restart in reversed(status.get("restarts") or []):
        if not restart.get("inPlace"):
            break
        in_place += 1
    return max(1, attempt_of(status) - in_place)


def stale_attempt(job: Job, rayjob: Mapping[str, Any]) -> bool:
    """Whether the RayJob belongs to an attempt before the one the operator last made a RayJob for (its
    rlplace.io/attempt annotation is older; a RayJob without it predates restarts and is the current one)."""
    metadata = rayjob.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return True  # the operator deletes a RayJob only to end its attempt
    made_for = (metadata.get("annotations") or {}).get(ATTEMPT_ANNOTATION)
    return made_for is not None and made_for.isdigit() and int(made_for) < rayjob_attempt(job.status)


def _run_settings(job: Job) -> tuple[RestartPolicy, int]:
    run = job.spec.get("run") or {}
    policy = RestartPolicy(run.get("restartPolicy") or RestartPolicy.ON_FAILURE)
    limit = run.get("maxRestarts")
    return policy, DEFAULT_MAX_RESTARTS if limit is None else int(limit)


def _node_fault(name: str, world: World, cause: diagnosis.Cause) -> str | None:
    """Why the job should leave node `name` out of its next attempts, or None (the node is not at fault: a pod
    deleted by hand, a process that ran out of memory or crashed)."""
    node = world.nodes.get(name)
    if node is None:
        return "gone" if world.nodes and name == cause.node else None
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            return "NotReady" if condition.get("status") == "False" else "unreachable"
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    if name == cause.node and cause.reason == diagnosis.POD_EVICTED:
        return "evicted the job's pod"
    return None


def bad_nodes(world: World, cause: diagnosis.Cause) -> dict[str, str]:
    """The job's nodes at fault for a lost process, with why: NotReady, unreachable, cordoned, gone, evicting."""
    names = [*world.nodes, *([cause.node] if cause.node and cause.node not in world.nodes else [])]
    found = {}
    for name in names:
        fault = _node_fault(name, world, cause)
        if fault is not None:
            found[name] = fault
    return found


def restart_on_failure(job: Job, world: World, status: dict[str, Any], failed: dict[str, Any]) -> Outcome | None:
    """The driver failed (`failed` is its status as Failed): a new attempt when a process, pod or node was lost,
    run.restartPolicy is OnFailure and restarts are left; None to end Failed as `failed` says.

    The attempt is stopped (its RayJob deleted, its reservation dropped at once), the nodes at fault are recorded
    in status.excludedNodes (left out of every later plan of this spec), and the job is Queued with its own
    creation time and priority, so it is ahead of every job of its priority created after it; the next reconcile
    plans it through the normal Provision path on healthy free nodes."""
    conditions = failed.get("conditions") or []
    if any(c.get("type") == BINDING_CONDITION and c.get("status") == "False" for c in conditions):
        return None  # the plan did not hold inside the pods: a new attempt would fail the same way
    pods, events = list(world.pods), list(world.events)
    ended = parse_time(failed.get("driverEndTime")) or parse_time(
        ((world.rayjob or {}).get("status") or {}).get("endTime")
    )
    if ended is not None:
        # KubeRay deletes a finished RayJob's cluster at once (ttlSecondsAfterFinished 0): those deletions
        # followed the failure, they did not cause it.
        pods, events = diagnosis.seen_before(pods, events, ended)
    since = parse_time(failed.get("driverStartTime"))
    cause = diagnosis.lost_process(pods, events, world.nodes, world.plan, world.driver_log_tail, since)
    if cause is None or cause.reason not in RESTARTABLE:
        return None
    policy, limit = _run_settings(job)
    restarts = int(status.get("restartCount") or 0)
    if policy is RestartPolicy.NEVER:
        return None
    if restarts >= limit:
        failed["message"] = brief(f"{failed.get('message') or cause.message}; no restarts left (maxRestarts {limit})")
        return None
    bad = bad_nodes(world, cause)
    excluded = {e["name"]: e for e in status.get("excludedNodes") or []}
    for name, why in bad.items():
        excluded[name] = {"name": name, "reason": f"{why} during attempt {attempt_of(status)}"}
    attempt = attempt_of(status) + 1
    given_up = f"; left out node {', '.join(sorted(bad))}" if bad else ""
    message = brief(f"{cause.message}{given_up}; restarting as attempt {attempt} ({restarts + 1} of {limit})")
    record = {
        "attempt": attempt,
        "time": cond.timestamp(world.now),
        "reason": cause.reason,
        "message": message,
        "nodesReplaced": sorted(bad),
    }
    _attempt_stopped(
        job,
        status,
        RESTARTING,
        message,
        phase=str(JobPhase.QUEUED),
        attempts=attempt,
        restartCount=restarts + 1,
        restarts=[*list(status.get("restarts") or []), record][-MAX_RESTARTS_KEPT:],
        excludedNodes=list(excluded.values()),
        retryAfter=None,
    )
    status["conditions"] = cond.set_condition(
        status["conditions"], "DriverSucceeded", False, cause.reason, message, job.generation
    )
    actions = (DeleteChildren(), ReleaseNodes(), Post(True, RESTARTING, message))
    return Outcome(actions, _status(status), RECHECK_SECONDS)


def with_recommendation(job: Job, world: World, outcome: Outcome) -> Outcome:
    """`outcome` with the running job's recommendation brought up to date (recommend.py): its Events posted, and
    when Auto re-places the job now, the re-placement recorded and its children deleted (the next look plans it
    again through Provision, on the re-placement's entries). Unchanged without `world.cluster`."""
    status = outcome.status
    if (
        world.cluster is None
        or status.phase != JobPhase.RUNNING
        or any(isinstance(a, Provision) for a in outcome.actions)
    ):
        return outcome
    try:
        spec = RLJobSpec.model_validate(job.spec)
    except ValueError:
        return outcome
    step = recommend.step(spec, status, world.cluster, world.now)
    update: dict[str, Any] = {"recommendation": step.recommendation}
    actions: list[Action] = [*outcome.actions, *(Post(False, reason, message) for reason, message in step.events)]
    if step.replacement is not None:
        update["replacements"] = recommend.with_replacement(status, step.replacement)
        update["message"] = brief(step.events[0][1]) if step.events else None
        # The re-placement is the job's next attempt (RLPLACE_ATTEMPT; the driver resumes from its checkpoint):
        # counted now, so the RayJob made for it carries that number, and nothing of the last driver is kept
        # (its start time would read the new driver as a resubmission, its binding as the new one's).
        update.update(
            attempts=attempt_of(dump(status)) + 1,
            driver_start_time=None,
            driver_end_time=None,
            binding=[],
            conditions=[c for c in status.conditions if c.type != BINDING_CONDITION],
        )
        actions.append(DeleteChildren())
    new = status.model_copy(update=update)
    profiled = recommend.profiling_condition(spec, new)
    if profiled is not None:
        conditions = cond.set_condition(
            [dump(c) for c in new.conditions], recommend.PROFILED, *profiled, job.generation
        )
        new = new.model_copy(update={"conditions": [Condition.model_validate(c) for c in conditions]})
    return Outcome(tuple(actions), new, outcome.requeue_after)


def job_pod_key(labels: Mapping[str, str], namespace: str) -> tuple[str, str] | None:
    """The job a Ray pod belongs to (its job label), for the pods index."""
    job = labels.get(JOB_LABEL)
    return (namespace, job) if job else None


def status_wire(status: RLJobStatus) -> dict[str, Any]:
    """The status as written: camelCase, no nulls, and no empty top-level lists (an unset list is absent on
    the wire, so an unchanged job compares equal and costs no write)."""
    return {key: value for key, value in dump(status).items() if value != []}
