"""Kueue admission of an RLJob: the Workload rlplace makes for it, and what Kueue wrote in its status. Pure.

An RLJob labelled `kueue.x-k8s.io/queue-name` is admitted by Kueue, never by rlplace's own queue. rlplace makes
one `kueue.x-k8s.io/v1beta2` Workload for it, owned by the job: one PodSet per NodeGroup the job uses, `count`
whole-node pods each (the worker pod's requests: all of a node's GPUs), so Kueue does quota, flavors,
priorities and preemption, and its Topology-Aware Scheduling (a Topology whose lowest level is
`kubernetes.io/hostname`) picks the nodes. When the Workload is admitted, `topologyAssignment` names the
granted hosts; rlplace plans on exactly those and makes the RayCluster or RayJob with no queue label, so no
Kueue integration manages it (builders/workload.py builds both).

No Kueue job reconciler owns such a Workload, so rlplace does what one would (Kueue's `jobframework`): it sets
`PodsReady` once every worker pod runs, `Finished` at the end (the quota frees at once), and after an eviction,
once none of the job's pods is left, it releases the reservation (clears `status.admission`, `QuotaReserved`
and `Admitted` False, `Requeued` True), which Kueue waits for before it admits the preemptor (docs/kueue.md).

Every Kueue decision is here; pure: the objects observed in, typed decisions out, which the reconcile applies.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlplace_operator.admission.kueue.status import (  # noqa: F401  (the package's names for what Kueue wrote)
    DEACTIVATED,
    EVICTED,
    FINISHED,
    PODS_READY,
    QUOTA_RESERVED,
    REQUEUED,
    SLICE_REPLACED,
    WORKLOAD_ADMITTED,
    AssignmentError,
    Grant,
    WorkloadState,
    assigned_hosts,
    condition_of,
    released,
    with_condition,
)
from rlplace_operator.admission.ledger import PlannedDemand
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.names import (
    ELASTIC_JOB_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    SLICE_REPLACEMENT_ANNOTATION,
)
from rlplace_operator.api.rljob import DEFAULT_PREEMPTION_GRACE_SECONDS, RLJobSpec, TopologyMode
from rlplace_operator.api.status import JobPhase
from rlplace_operator.builders.workload import (
    PodSet,
    Priority,
    asked_pod_sets,
    build_workload,
    lowered_counts,
    pod_set_name,
    pod_sets_digest,
)
from rlplace_operator.cluster.selection import JobGroup, ready_nodes, unit_resource
from rlplace_operator.cluster.snapshot import indexed
from rlplace_operator.planning.elastic import elastic_components

#: Kueue's limit on a Workload's PodSets: at most this many NodeGroups in a job admitted by Kueue.
MAX_POD_SETS = 18


def queue_name(labels: Mapping[str, str]) -> str | None:
    """The LocalQueue an RLJob names (None: rlplace's own queue admits it)."""
    return labels.get(QUEUE_LABEL) or None


# -- admission: the Workload of a job's demand, and what Kueue granted -------------------------------------------


@dataclass(frozen=True)
class QueueObjects:
    """What Kueue admission of one job reads from the API (observed by the reconcile when it provisions)."""

    served: bool
    """Whether the API serves Kueue's Workloads (Kueue is installed)."""
    workloads: tuple[Mapping[str, Any], ...] = ()
    """The Workloads rlplace made for the job (its job label, owned by it)."""
    local_queue: Mapping[str, Any] | None = None
    cluster_queue: Mapping[str, Any] | None = None
    priority_class: Mapping[str, Any] | None = None
    """The WorkloadPriorityClass the job's label names, when it names one and it exists."""


@dataclass(frozen=True)
class Refusal:
    """Kueue cannot admit the job as it is: `permanent` ends it (the spec must change), else it waits with a
    retry (what is missing may appear)."""

    reason: str
    message: str
    permanent: bool


@dataclass(frozen=True)
class Waits:
    """The job stays Queued until Kueue admits it."""

    reason: str
    waiting_for: str
    message: str


@dataclass(frozen=True)
class Granted:
    """Kueue admitted the job: per NodeGroup in the job's order, the granted nodes in the group's rank order."""

    cluster: tuple[tuple[str, tuple[str, ...]], ...]
    flavors: Mapping[str, str]
    """NodeGroup -> the ResourceFlavor its nodes were granted from."""
    message: str

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(n for _, names in self.cluster for n in names)


@dataclass(frozen=True)
class Grows:
    """A running job's growth waits for Kueue to admit its Workload slice: the job runs on as it is meanwhile."""

    reason: str
    message: str


@dataclass(frozen=True)
class Admission:
    """What Kueue admission decided for a job now, and the Workload objects to make, change or delete for it."""

    verdict: Granted | Waits | Refusal | Grows
    create: Mapping[str, Any] | None = None
    """The job's Workload to create (not adopted yet: the reconcile makes the job its owner)."""
    keep: frozenset[str] | None = None
    """The job's Workloads to keep: its others (of an earlier demand, a slice Kueue replaced) go. None: all stay."""
    lower: tuple[str, list[dict[str, Any]]] | None = None
    """(Workload, JSON patch): the admitted elastic Workload's lower counts (a running job shrank in place)."""
    status: Mapping[str, Any] = field(default_factory=dict)
    """The RLJob status fields that say how the admitter sees the job (wire form)."""


def elastic_workload(spec: RLJobSpec) -> bool:
    """Whether the job's Workload is elastic (Kueue admits its growth as a slice and takes lower counts): it has
    resizable components and asks for no topology level (Kueue places elastic slices unconstrained only)."""
    return bool(elastic_components(spec)) and (spec.topology is None or spec.topology.level is None)


def _running_slice(workloads: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The job's admitted elastic Workload that a change of its replicas resizes (not evicted, not finished)."""
    for body in workloads:
        annotations = body["metadata"].get("annotations") or {}
        state = WorkloadState.of(body)
        if (
            annotations.get(ELASTIC_JOB_ANNOTATION) == "true"
            and state.admitted
            and not (state.evicted or state.finished)
        ):
            return body
    return None


def _replaced(workload: Mapping[str, Any]) -> bool:
    """Whether Kueue finished the Workload as a slice another one replaced."""
    finished = condition_of(workload.get("status") or {}, FINISHED) or {}
    return finished.get("status") == "True" and finished.get("reason") == SLICE_REPLACED


def _counts(workload: Mapping[str, Any]) -> dict[str, int]:
    return {p["name"]: int(p.get("count") or 0) for p in (workload.get("spec") or {}).get("podSets") or []}


def _resized(current: Mapping[str, Any], found: Sequence[PodSet]) -> str | None:
    """ "grow" or "shrink" when `found` asks for the same PodSets as the admitted `current` but for other counts
    (its digest with current's counts is current's), else None (another demand: a new Workload)."""
    counts = _counts(current)
    if [pod_set_name(p.group) for p in found] != list(counts):
        return None
    as_current = [dataclasses.replace(p, count=counts[pod_set_name(p.group)]) for p in found]
    if pod_sets_digest(as_current) != asked_pod_sets(current):
        return None
    wanted = {pod_set_name(p.group): p.count for p in found}
    if any(wanted[name] > counts[name] for name in counts):
        return "grow"
    return "shrink" if wanted != counts else None


def queue_objects_wanted(labels: Mapping[str, str]) -> tuple[str, str | None] | None:
    """(LocalQueue, WorkloadPriorityClass or None) a job's admission reads, or None for a job Kueue does not admit."""
    queue = queue_name(labels)
    return None if queue is None else (queue, labels.get(PRIORITY_CLASS_LABEL) or None)


#: The Kueue PodSet group (topologyRequest.podSetGroupName) of a job's two weight-exchanging NodeGroups.
EXCHANGE_POD_SET_GROUP = "weight-exchange"


def grouped(pod_sets: Sequence[PodSet], exchanging: Sequence[int]) -> list[PodSet]:
    """The PodSets, the two at `exchanging` (the weight-exchanging NodeGroups) in one Kueue PodSet group where
    Kueue v0.19.2 takes one: two PodSets at a topology level, one of them a single pod (its leader-and-workers
    case), and one ResourceFlavor for both (Kueue assigns a group one flavor: PodSets whose nodes differ, as an
    a800 trainer and a 4090 rollout do, are never admitted together; benchmarks/topology.py found it). rlplace
    can only know the flavor is one when the two select the same nodes."""
    found = list(pod_sets)
    if len(exchanging) != 2:
        return found
    first, second = (found[i] for i in exchanging)
    if first.level is None or min(first.count, second.count) != 1 or first.selector != second.selector:
        return found
    for i in exchanging:
        found[i] = dataclasses.replace(found[i], group_name=EXCHANGE_POD_SET_GROUP)
    return found


def pod_sets(
    spec: RLJobSpec, groups: Sequence[JobGroup], demand: PlannedDemand, node_index: Mapping[str, Any]
) -> list[PodSet] | Refusal:
    """The job's PodSets: per NodeGroup its plan uses, that many whole-node worker pods."""
    found = []
    by_name = {group.name: group for group in groups}
    # Every PodSet asks Kueue's topology-aware scheduling for the job's level, if it names one.
    topology = spec.topology
    level = None if topology is None else topology.level
    required = topology is not None and topology.mode is TopologyMode.REQUIRED
    for group_demand in demand.demand:
        if not group_demand.used:
            continue
        group = by_name[group_demand.group]
        ranked = ready_nodes(group, node_index)
        resource = unit_resource(group.spec)
        units = {indexed(node_index, ranked[i]).count(resource) for i in group_demand.used} if resource else set()
        if len(units) > 1:
            return Refusal(
                cond.KUEUE_UNSUPPORTED,
                f"NodeGroup {group.name} has nodes of {' and '.join(map(str, sorted(units)))} {resource}: a Kueue "
                "PodSet is pods of one size, so give each node size its own NodeGroup",
                permanent=True,
            )
        requests = {"cpu": spec.ray.worker_resources.cpu, "memory": spec.ray.worker_resources.memory}
        if resource and units and max(units) > 0:
            requests[resource] = str(max(units))
        tolerations = tuple(spec.pods.for_workers([group.name]).tolerations)
        found.append(
            PodSet(group.name, len(group_demand.used), requests, group.spec.node_selector, tolerations, level, required)
        )
    found = grouped(found, [i for i, d in enumerate(d for d in demand.demand if d.used) if d.exchanges])
    if len(found) > MAX_POD_SETS:
        return Refusal(
            cond.KUEUE_UNSUPPORTED,
            f"the job uses {len(found)} NodeGroups; a Kueue Workload holds at most {MAX_POD_SETS}",
            permanent=True,
        )
    return found


def cluster_queue_problem(objects: QueueObjects, namespace: str, queue: str) -> tuple[str | None, str | None]:
    """The LocalQueue's ClusterQueue, and why it admits nothing now (missing, stopped, inactive), if so."""
    if objects.local_queue is None:
        return None, f"LocalQueue {namespace}/{queue} not found"
    cluster_queue = (objects.local_queue.get("spec") or {}).get("clusterQueue")
    body = objects.cluster_queue
    if body is None:
        return cluster_queue, f"ClusterQueue {cluster_queue} of LocalQueue {namespace}/{queue} not found"
    if ((body.get("spec") or {}).get("stopPolicy") or "None") != "None":
        return cluster_queue, f"ClusterQueue {cluster_queue} is stopped (stopPolicy {body['spec']['stopPolicy']})"
    active = next((c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == "Active"), None)
    if active is not None and active.get("status") != "True":
        return (
            cluster_queue,
            f"ClusterQueue {cluster_queue} is inactive: {active.get('message') or active.get('reason')}",
        )
    return cluster_queue, None


def _waits(previous_admitted: Mapping[str, Any] | None, waiting_for: str, message: str) -> Waits:
    """Queued until Kueue admits the job, saying what Kueue says. A preempted job keeps reason Preempted until it
    is admitted again."""
    before = previous_admitted or {}
    preempted = before.get("status") == "False" and before.get("reason") == cond.PREEMPTED
    return Waits(cond.PREEMPTED if preempted else cond.WAITING_FOR_KUEUE, waiting_for, message)


def admission(
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    spec: RLJobSpec,
    groups: Sequence[JobGroup],
    demand: PlannedDemand,
    node_index: Mapping[str, Any],
    objects: QueueObjects,
    previous_admitted: Mapping[str, Any] | None,
    dra_groups: Sequence[str] = (),
    running: bool = False,
) -> Admission:
    """Kueue's admission of the job now: the nodes it granted (per NodeGroup, in rank order), or why it waits.

    The job's Workload is made on the first look; a new demand (a new spec) makes a new Workload and deletes the
    job's others. `dra_groups`: the job's NodeGroups whose GPUs come from DRA (not admitted through a Workload).
    `running`: the job runs and its replicas change in place (docs/elastic.md): the same PodSets with more pods are
    a Workload slice that replaces its admitted elastic Workload once Kueue admits it, fewer pods lower the admitted
    Workload's counts."""
    queue = queue_name(labels)
    assert queue is not None
    if dra_groups:
        message = (
            f"NodeGroup {dra_groups[0]} allocates GPUs through DRA, which rlplace does not yet admit through Kueue: "
            "drop the kueue.x-k8s.io/queue-name label or use a devicePlugin NodeGroup"
        )
        return Admission(Refusal(cond.KUEUE_UNSUPPORTED, message, permanent=True))
    if not objects.served:
        message = f"the job names LocalQueue {queue} but Kueue is not installed (no kueue.x-k8s.io/v1beta2 Workloads)"
        return Admission(Refusal(cond.KUEUE_MISSING, message, permanent=False))
    found = pod_sets(spec, groups, demand, node_index)
    if isinstance(found, Refusal):
        return Admission(found)
    wanted = pod_sets_digest(found)
    body = next((w for w in objects.workloads if asked_pod_sets(w) == wanted and not _replaced(w)), None)
    create: Mapping[str, Any] | None = None
    keep: frozenset[str] | None = None
    lower: tuple[str, list[dict[str, Any]]] | None = None
    current = _running_slice(objects.workloads) if running else None
    checked = cluster_queue_problem(objects, namespace, queue)
    if body is None:
        cluster_queue, problem = checked
        if problem is not None and cluster_queue is None:
            return Admission(Refusal(cond.LOCALQUEUE_NOT_FOUND, problem, permanent=False))
        priority = None
        priority_class = labels.get(PRIORITY_CLASS_LABEL)
        if priority_class:
            if objects.priority_class is None:
                message = f"WorkloadPriorityClass {priority_class} not found"
                return Admission(Refusal(cond.PRIORITY_CLASS_NOT_FOUND, message, permanent=False))
            priority = Priority(priority_class, int(objects.priority_class.get("value") or 0))
        resize = _resized(current, found) if current is not None else None
        if current is not None and resize == "shrink":
            # Fewer pods of the same PodSets: the admitted Workload takes the lower counts (Kueue frees the quota).
            body = current
            lower = (current["metadata"]["name"], lowered_counts(current, found))
            keep = frozenset({current["metadata"]["name"]})
        elif current is not None and resize == "grow":
            # More pods: a slice that replaces the admitted Workload once Kueue admits it (the job runs on as it
            # is meanwhile); a slice asked for before and no longer wanted goes.
            replaces = f"{namespace}/{current['metadata']['name']}"
            create = body = build_workload(name, queue, found, priority, elastic=True, replaces=replaces)
            keep = frozenset({current["metadata"]["name"], body["metadata"]["name"]})
        else:
            create = body = build_workload(name, queue, found, priority, elastic=elastic_workload(spec))
            keep = frozenset({body["metadata"]["name"]})
    state = WorkloadState.of(body)
    kueue: dict[str, Any] = {
        "workload": state.name,
        **({"clusterQueue": state.cluster_queue} if state.cluster_queue else {}),
    }
    evicting = state.evicted and state.holds_quota
    if not state.admitted or evicting:
        cluster_queue, problem = checked
        said = problem or state.pending_message or "Kueue has not looked at it yet"
        where = f"ClusterQueue {cluster_queue}" if cluster_queue else f"LocalQueue {queue}"
        slice_of_running = SLICE_REPLACEMENT_ANNOTATION in (body["metadata"].get("annotations") or {})
        if current is not None and slice_of_running and not state.admitted:
            message = f"growing waits for Kueue to admit Workload slice {state.name} ({where}): {said}"
            return Admission(Grows(cond.WAITING_FOR_KUEUE, message), create, keep)
        if evicting:
            said = f"its eviction to end ({state.evicted_reason}: {state.evicted_message})"
        waits = _waits(
            previous_admitted,
            f"Kueue ({where}): {said}",
            f"waiting for Kueue to admit Workload {state.name} ({where}): {said}",
        )
        return Admission(waits, create, keep, None, {"kueue": kueue})
    try:
        hosts = state.hosts()
    except AssignmentError as err:
        refusal = Refusal(cond.KUEUE_UNSUPPORTED, str(err), permanent=False)
        return Admission(refusal, create, keep, None, {"kueue": kueue})
    failed = sorted(set(state.unhealthy_nodes) & {host for granted in hosts.values() for host in granted})
    if failed:
        # A grant that still names a failed node (a restart after its loss, Kueue finding no other node yet): pods
        # made now would wait on a node that cannot run them. The job waits for Kueue's replacement instead.
        nodes = ", ".join(failed)
        said = f"Kueue to replace failed node {nodes} in Workload {state.name} (no other node of its flavor is free)"
        waits = Waits(cond.WAITING_FOR_KUEUE, said, f"waiting for {said}")
        return Admission(waits, create, keep, None, {"kueue": kueue})
    cluster, flavors = [], {}
    for pod_set in found:
        granted = set(hosts.get(pod_set_name(pod_set.group), ()))
        group = next(g for g in groups if g.name == pod_set.group)
        # In the group's rank order: the plan numbers its nodes in that order.
        cluster.append((group.name, tuple(e.name for e in group.status.nodes if e.name in granted)))
        grant = state.grants.get(pod_set_name(pod_set.group))
        if grant is not None and grant.flavors:
            flavors[group.name] = grant.flavors.get(unit_resource(group.spec) or "cpu") or next(
                iter(grant.flavors.values())
            )
    said = ", ".join(f"{g} from {f}" for g, f in flavors.items())
    message = f"admitted by Kueue (ClusterQueue {state.cluster_queue}): {said}"
    kueue = {"workload": state.name, "clusterQueue": state.cluster_queue, "flavors": flavors}
    if state.pods_ready:
        kueue["podsReady"] = True  # told before (a running job planned again): nothing more to tell it
    # Admitted: the job's other Workloads (a slice Kueue replaced, a slice no longer wanted) go.
    keep = keep if keep is not None else frozenset({state.name})
    return Admission(Granted(tuple(cluster), flavors, message), create, keep, lower, {"kueue": kueue})


# -- a running job: what its Workload says, and what the Workload is told -----------------------------------------


def admitted_word(namespace: str, queue: str, cluster_queue: str | None, queue_found: bool) -> tuple[str, str]:
    """(reason, message) of the Admitted condition of a job Kueue admitted, as its LocalQueue stands now.

    Kueue keeps an admitted Workload admitted when its LocalQueue is deleted (only a Workload waiting for quota is
    told that the LocalQueue does not exist), so the job runs on and its quota is freed when it ends; the job says
    so, since an eviction meanwhile would leave it waiting until the LocalQueue exists again."""
    where = f"ClusterQueue {cluster_queue}" if cluster_queue else "its ClusterQueue"
    if queue_found:
        return cond.ADMITTED_BY_KUEUE, f"admitted by Kueue ({where})"
    return (
        cond.LOCALQUEUE_NOT_FOUND,
        f"admitted by Kueue ({where}); LocalQueue {namespace}/{queue} has since been deleted: the job keeps its "
        "admission until it ends, and were it evicted it would wait until the LocalQueue exists again",
    )


def grace_seconds(spec: Mapping[str, Any], phase: str | None) -> int:
    """How long an evicted job's driver may take to checkpoint on request: spec.checkpoint's grace for a running
    driver that can checkpoint, else none."""
    checkpoint = spec.get("checkpoint")
    if not checkpoint or not spec.get("entrypoint") or phase != JobPhase.RUNNING:
        return 0
    return int(checkpoint.get("preemptionGraceSeconds", DEFAULT_PREEMPTION_GRACE_SECONDS))


@dataclass(frozen=True)
class Eviction:
    """What to do now about a Workload Kueue evicted (preempted by a job of higher priority, its PodsReady timeout,
    deactivated): a checkpointed move, not a kill.

    The steps, in order: ask the driver to checkpoint (`checkpoint`), wait for it within the grace (`wait`), stop
    the job's Ray children (`stop`), wait until none of its pods is left (`wait`), then give the quota back
    (`release`: queued again as its next attempt, or suspended when the Workload was deactivated)."""

    step: str
    message: str
    preemption: Mapping[str, Any] | None = None
    """status.preemption while the eviction is carried out (wire form)."""
    wait_seconds: float | None = None
    requeue: bool = True
    """For `release`: queue the job again (False: the Workload was deactivated; the job is suspended)."""
    released: Mapping[str, Any] = field(default_factory=dict)
    """For `release`: the RLJob status fields of the admission given back (wire form; None removes one)."""


CHECKPOINT, WAIT, STOP, RELEASE = "checkpoint", "wait", "stop", "release"
#: What a released eviction leaves of the job's status: nothing of its admission and of the eviction itself.
RELEASED_FIELDS: Mapping[str, Any] = {"preemption": None, "kueue": None}


def eviction(
    workload: WorkloadState,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    child_stopping: bool,
    pods_left: int,
    now: dt.datetime,
) -> Eviction:
    """The next step of an eviction (see `Eviction`). `child_stopping`: the job's RayCluster or RayJob still exists
    and is not being deleted; `pods_left`: its Ray pods still there."""
    said = f"Kueue evicted the job ({workload.evicted_reason}: {cond.brief(workload.evicted_message, 200)})"
    progress = status.get("progress") or {}
    preemption = status.get("preemption")
    grace = grace_seconds(spec, status.get("phase"))
    if child_stopping:
        if preemption is None:
            preemption = {
                "reason": workload.evicted_reason or "Evicted",
                "message": cond.brief(workload.evicted_message),
                "since": cond.timestamp(now),
                "checkpointStep": progress.get("checkpointStep"),
            }
            preemption = {k: v for k, v in preemption.items() if v is not None}
            if grace:
                message = f"{said}; asking its driver to checkpoint (up to {grace} s)"
                return Eviction(CHECKPOINT, message, preemption, 1.0)
        since = cond.parse_time(preemption.get("since")) or now
        saved = progress.get("checkpointStep")
        checkpointed = saved is not None and saved != preemption.get("checkpointStep")
        left = grace - (now - since).total_seconds()
        if left > 0 and not checkpointed:
            return Eviction(WAIT, "", preemption, min(2.0, left))
        how = (
            f"checkpointed at step {saved}"
            if checkpointed
            else "no checkpoint asked for"
            if not grace
            else (f"no checkpoint within {grace} s")
        )
        return Eviction(STOP, f"{said}; {how}: stopping its Ray pods", preemption)
    if pods_left:
        return Eviction(WAIT, f"{said}; waiting for its {pods_left} Ray pods to stop", preemption, 2.0)
    if workload.evicted_reason == DEACTIVATED or not workload.active:
        message = f"{said}; its Workload was deactivated: suspended until it is active again"
        return Eviction(RELEASE, message, None, None, False, RELEASED_FIELDS)
    # Queued again: it waits for Kueue from this write on (its next pass says Kueue's own words for why), never
    # a moment without saying what it waits for.
    requeued = {**RELEASED_FIELDS, "waitingFor": f"Kueue to admit Workload {workload.name} again"}
    return Eviction(RELEASE, said, None, None, True, requeued)


def replaced_nodes(workload: WorkloadState, planned: set[str]) -> tuple[list[str], list[str]] | None:
    """Kueue's topology-aware scheduling replaced nodes of the running job inside its admitted Workload (a node
    became NotReady or tainted): (the planned nodes no longer granted, the granted nodes not planned), or None."""
    if not workload.admitted or workload.evicted:
        return None
    try:
        granted = {host for hosts in workload.hosts().values() for host in hosts}
    except AssignmentError:
        return None
    gone = sorted(planned - granted)
    if not granted or not gone:
        return None
    return gone, sorted(granted - planned)


@dataclass(frozen=True)
class Mark:
    """A condition to set on the job's Workload, as a Kueue job reconciler would."""

    condition: str
    reason: str
    message: str


def mark(workload: WorkloadState, phase: JobPhase | None) -> Mark | None:
    """PodsReady once the job runs (an admin's waitForPodsReady evicts a Workload without it), Finished when it
    ends (the quota frees at once); None when the Workload needs no word."""
    if not workload.admitted or workload.evicted or workload.finished:
        return None
    if phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
        return Mark(FINISHED, str(phase), f"the RLJob {phase.lower()}")
    if phase == JobPhase.RUNNING and not workload.pods_ready:
        return Mark(PODS_READY, "Started", "every Ray pod of the RLJob runs")
    return None


def told_pods_ready(status_kueue: Mapping[str, Any]) -> dict[str, Any]:
    """status.kueue once the Workload was told PodsReady."""
    return {**status_kueue, "podsReady": True}


def awaits_pods_ready(status: Mapping[str, Any]) -> bool:
    """A running job whose Workload was not told PodsReady yet (one that started running in a provision pass):
    the timer looks at it again until it is."""
    said = status.get("kueue") or {}
    return status.get("phase") == JobPhase.RUNNING and bool(said.get("workload")) and not said.get("podsReady")
