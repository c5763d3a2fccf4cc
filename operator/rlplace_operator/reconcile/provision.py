"""Provision: validate -> demand -> admission (or Queued) -> plan on the admitted nodes -> desired children.

The rule for a job that holds its nodes (phase Provisioning or Running): it keeps the nodes it was planned on. It
is re-planned only when its spec changes (a new metadata.generation) or its rlplace.io/profile annotation changes;
never because NodeGroups or nodes changed (that is reported as NodeGroupChanged: controllers/nodegroup.py), and
never on an operator restart. A change that cannot be applied (an invalid spec or profile, too few GPUs) leaves it
running on its last good plan and is reported on the Validated or Placed condition, the message and a Warning
Event. Suspend and resume (spec.suspend) re-plan it on today's nodes.

Like every other decision, provisioning is a function of the observed World: it returns the objects the job
should have (its ConfigMap, ResourceClaimTemplates, RayCluster or RayJob, its Workload) as `Apply` actions, and the
status that says what they run; apply.py makes the calls. Its one effect is admission's: rlplace's queue reserves
the nodes it admits in the Ledger, as the queue pass does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from placement_core.errors import CapacityError, PlacementError
from rlplace_operator.admission import admitter
from rlplace_operator.admission.demand import oversized, plan_on, planned_demand
from rlplace_operator.admission.ledger import Ledger, PlannedDemand
from rlplace_operator.admission.queue import (
    admission_world,
    admit,
    groups_with_nodes,
    held_by_others,
    status_excluded,
)
from rlplace_operator.admission.rules import Pool, QueuedJob, Waiting, unmeetable
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import PROFILE_ANNOTATION
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.api.status import GpuClaim, JobPhase, RLJobStatus, holds_nodes, is_live
from rlplace_operator.builders.claims import claim_templates
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.progress import with_progress_reporting
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.builders.workload import for_workload, labels_for_children
from rlplace_operator.cluster.dra import PinError, device_pin
from rlplace_operator.cluster.selection import JobGroup
from rlplace_operator.cluster.snapshot import Snapshot, indexed
from rlplace_operator.frameworks import framework_of
from rlplace_operator.planning import recommend
from rlplace_operator.planning.plan import JobPlan
from rlplace_operator.reconcile.actions import (
    Apply,
    DeleteChildren,
    DeleteStale,
    LowerWorkload,
    Outcome,
    Post,
    ReleaseNodes,
    Retry,
    SuspendDriver,
)
from rlplace_operator.reconcile.driver import driver_status
from rlplace_operator.reconcile.pods import cluster_ready, mirrored_status, status_of
from rlplace_operator.reconcile.resize import resize_workers, resized_components
from rlplace_operator.reconcile.restarts import attempt_for_new_child
from rlplace_operator.reconcile.world import Job, World

#: Retries for causes that can change by themselves (a NodeGroup appears, nodes join, KubeRay is installed): the
#: first after this many seconds, then doubling up to the cap, so a job left Pending for hours costs the API server
#: one request every half minute.
FIRST_RETRY_DELAY = 5.0
MAX_RETRY_DELAY = 30.0
CLAIM_TEMPLATE_KIND = "ResourceClaimTemplate"
WORKLOAD_KIND = "Workload"


def retry_delay(retry: int) -> float:
    return min(MAX_RETRY_DELAY, FIRST_RETRY_DELAY * 2 ** min(retry, 8))


class Stop(Exception):
    """Provisioning ends here: the draft says why, `retry` whether and when to look again."""

    def __init__(self, retry: Retry) -> None:
        super().__init__(retry.message)
        self.retry = retry


class Draft:
    """One provision pass's status: read once, changed in memory, the Events it posts collected.

    An Event is posted when a condition's reason changes, not on every retry of the same cause. A job that runs
    keeps its phase when a change is refused: the refusal goes into the conditions and the message."""

    def __init__(self, job: Job, retry: int) -> None:
        self.job = job
        self.generation = job.generation
        self.before = dict(job.status)
        self.after = dict(job.status)
        self.live = is_live(self.before)
        self.retry = retry
        self.events: list[Post] = []

    @property
    def conditions(self) -> list[dict]:
        return list(self.after.get("conditions") or [])

    def condition(self, type_: str, ok: bool, reason: str, message: str = "") -> bool:
        """Set a condition; True when its status or reason changed."""
        before = cond.find(self.after.get("conditions"), type_) or {}
        self.after["conditions"] = cond.set_condition(self.conditions, type_, ok, reason, message, self.generation)
        return before.get("reason") != reason or before.get("status") != ("True" if ok else "False")

    def without(self, type_: str) -> None:
        """Drop a condition that no longer applies."""
        self.set(conditions=[c for c in self.conditions if c.get("type") != type_])

    def phase(self, phase: JobPhase, message: str | None = None) -> None:
        self.after.update(phase=str(phase), observedGeneration=self.generation)
        self.set(message=cond.short(message) if message else None)

    def set(self, **fields: object) -> None:
        """Set status fields (camelCase); None removes one."""
        for key, value in fields.items():
            if value is None:
                self.after.pop(key, None)
            else:
                self.after[key] = value

    def post(self, warning: bool, reason: str, message: str) -> None:
        self.events.append(Post(warning, reason, cond.short(message)))

    def _refuse(self, condition: str, reason: str, message: str, phase: JobPhase) -> None:
        if self.live:
            message = f"change not applied, the job keeps running its last plan: {message}"
        if self.condition(condition, False, reason, message):
            self.post(True, reason, message)
        if self.live:
            self.set(message=cond.short(message))
        else:
            self.phase(phase, message)

    def fail(self, condition: str, reason: str, message: str) -> Stop:
        """Phase Failed (or, for a running job, the change refused): retrying cannot help until the spec changes."""
        self._refuse(condition, reason, message, JobPhase.FAILED)
        return Stop(Retry(message, permanent=True))

    def wait(self, condition: str, reason: str, message: str) -> Stop:
        """Phase Pending (or, for a running job, the change waits): the cause can go away by itself."""
        self._refuse(condition, reason, message, JobPhase.PENDING)
        return Stop(Retry(message, delay=retry_delay(self.retry)))

    def waits(self, reason: str, event: str, waiting_for: str, message: str, position: int | None = None) -> None:
        """Phase Queued, saying what the job waits for (and its place in rlplace's queue); an Event `event` when
        what it waits for changes."""
        waiting_for = cond.short(waiting_for)
        self.condition(cond.ADMITTED, False, reason, message)
        if self.before.get("waitingFor") != waiting_for:
            self.post(False, event, message)
        self.phase(JobPhase.QUEUED, message)
        self.set(queuePosition=position, waitingFor=waiting_for)


def provision(job: Job, world: World, ledger: Ledger, retry: int = 0) -> Outcome:
    """The job's children and status from `world` (see the module's rule and docs/admission.md). `retry`: how often
    kopf retried the job's handler (the backoff of a Pending job)."""
    draft = Draft(job, retry)
    actions: list[Any] = []
    try:
        _provision(draft, job, world, ledger, actions)
    except Stop as stop:
        if not holds_nodes(draft.before) and ReleaseNodes() not in actions:
            # Nothing was made for it: what the queue pass reserved for it goes back (a job admitted there that
            # its NodeGroup, deleted since, cannot take must not keep those GPUs from others).
            actions.append(ReleaseNodes())
        return Outcome((*actions, *draft.events), status_of(draft.after), retry=stop.retry)
    return Outcome((*actions, *draft.events), status_of(draft.after))


def _validated_spec(draft: Draft, spec: Mapping[str, Any]) -> RLJobSpec:
    try:
        return RLJobSpec.model_validate(dict(spec))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise draft.fail(cond.VALIDATED, cond.INVALID_SPEC, f"spec.{where}: {first['msg']}") from None


def _same_spec_status(draft: Draft) -> RLJobStatus | None:
    """The job's status when it describes the current spec (a re-placement or a waiting recommendation is for that
    spec only); None for a new spec, or a status this operator's model cannot read."""
    if draft.before.get("observedGeneration") != draft.generation:
        return None
    try:
        return RLJobStatus.model_validate({k: v for k, v in draft.before.items() if v is not None})
    except ValidationError:
        return None


def _suspend(draft: Draft, spec: RLJobSpec, actions: list[Any]) -> None:
    if spec.entrypoint:
        # KubeRay stops the driver and deletes the RayCluster of a suspended RayJob; resuming starts both anew.
        actions.append(SuspendDriver())
        message = "the job is suspended; its driver was stopped and its RayCluster removed"
        draft.condition(cond.DRIVER_SUCCEEDED, False, cond.SUSPENDED, message)
    else:
        actions.append(DeleteChildren())
        message = "the job is suspended; its RayCluster was removed"
    actions.append(ReleaseNodes())
    draft.condition(cond.RAYCLUSTER_READY, False, cond.SUSPENDED, message)
    draft.phase(JobPhase.SUSPENDED, message)
    # A suspended job holds no nodes: the next start plans on the NodeGroups as they are then.
    draft.set(rayCluster=None)
    draft.without(cond.NODEGROUP_CHANGED)


def _groups(draft: Draft, spec: RLJobSpec, snapshot: Snapshot, ledger: Ledger) -> list[JobGroup]:
    groups, missing = [], []
    for name in spec.node_groups:
        entry = indexed(snapshot.nodegroups, name)
        if entry is None or not entry[1].get("observedGeneration"):
            missing.append(name)
            continue
        groups.append(ledger.group(name, entry))
    if missing:
        raise draft.wait(cond.VALIDATED, cond.NODEGROUP_NOT_FOUND, f"NodeGroup {', '.join(missing)} not found")
    return groups


def _planned(draft: Draft, compute: Any) -> Any:
    """`compute()` (a planning), or Pending (a cause that can go away) / Failed (a wrong spec)."""
    try:
        planned = compute()
    except CapacityError as err:
        draft.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
        raise draft.wait(cond.PLACED, cond.INSUFFICIENT_CAPACITY, str(err)) from None
    except PlacementError as err:
        raise draft.fail(cond.PLACED, cond.PLACEMENT_INVALID, str(err)) from None
    draft.condition(cond.VALIDATED, True, cond.SPEC_VALID, "spec and NodeGroups are valid")
    return planned


def _provision(draft: Draft, job: Job, world: World, ledger: Ledger, actions: list[Any]) -> None:
    spec = _validated_spec(draft, job.spec)
    if spec.suspend:
        _suspend(draft, spec, actions)
        return
    annotations = dict(job.annotations)
    # A re-placement from measured step times (planning/recommend.py) is planned instead of the spec's placement.
    status = _same_spec_status(draft)
    replaced = recommend.replaced_spec(spec, status) if status is not None else spec
    predicted: float | None = None
    as_written = spec
    if status is not None and replaced is not spec:
        annotations.pop(PROFILE_ANNOTATION, None)
        replacements = status.replacements
        waiting = recommend.at_restart(spec, status, cond.now())
        if waiting is not None:
            replacements = recommend.with_replacement(status, waiting)
            draft.set(replacements=[dump(r) for r in replacements], recommendation=None)
            status = status.model_copy(update={"replacements": replacements, "recommendation": None})
        predicted = replacements[-1].predicted_iteration_seconds
        spec = replaced
    planned = _admitted_plan(draft, job, spec, annotations, world, ledger, actions)
    if planned is None:
        return
    if predicted is not None:
        planned = dataclasses.replace(planned, predicted_iteration_time=predicted)
    # A restart's or a re-placement's new attempt keeps its number (counted when it was decided); else a new
    # RayJob's driver is attempt 1 again.
    attempt = attempt_for_new_child(draft.before, draft.generation)
    child = _children(draft, job, spec, planned, attempt, world, actions)
    _describe(draft, job, spec, as_written, planned, attempt, status, child, world.pods)


def _admitted_plan(
    draft: Draft,
    job: Job,
    spec: RLJobSpec,
    annotations: dict[str, str],
    world: World,
    ledger: Ledger,
    actions: list[Any],
) -> JobPlan | None:
    """Demand -> admission (rlplace's queue, or the Workload admitter for a job that names a LocalQueue): the plan
    on the nodes the job was admitted to, or None when it is Queued."""
    snapshot = world.snapshot
    assert snapshot is not None, "provisioning reads the indexes (Observer.for_provision)"
    groups = _groups(draft, spec, snapshot, ledger)
    blocked = next((group for group in groups if group.status.problem), None)
    if blocked is not None:
        # The group's own fault (its DeviceClass is missing): the job waits, holding nothing, until it is gone.
        said = f"NodeGroup {blocked.name}: {blocked.status.problem}"
        draft.waits(cond.DEVICE_CLASS_NOT_FOUND, cond.DEVICE_CLASS_NOT_FOUND, said, f"waiting for {said}")
        return None
    dra_groups = [group.name for group in groups if group.spec.dra_driver is not None]
    refusal = framework_of(spec).refusal(spec, dra_groups)
    if refusal is not None:
        raise draft.fail(cond.PLACED, cond.PLACEMENT_INVALID, refusal)
    unfit, too_small = oversized(spec, groups, snapshot.nodes)
    if unfit is not None:
        raise draft.wait(cond.PLACED, cond.REQUEST_TOO_LARGE, unfit)
    excluded = {**too_small, **status_excluded(draft.before, draft.generation)}
    demand = _planned(
        draft,
        lambda: planned_demand(job.key, job.generation, spec, annotations, groups, snapshot.nodes, excluded, ledger),
    )
    gpus: dict[str, tuple[int, ...]] = {}
    if job.by_workload:
        granted = _workload_admission(draft, job, spec, groups, demand, world, ledger, dra_groups, actions)
        if granted is None:
            return None
        cluster, nodes = granted.cluster, granted.nodes
        ledger.hold(job.key, nodes)  # rlplace's own queue must not hand these nodes to another job
        admitted_by = "Kueue granted"
    else:
        within = spec.required_topology_level
        queued = QueuedJob(job.key, spec.priority, job.created, demand.demand, demand.excluded, within)
        admission = admission_world(ledger, snapshot)
        unmet = unmeetable(queued, Pool(admission.groups, domains=admission.domains, levels=admission.levels))
        if unmet is not None:
            raise draft.wait(cond.PLACED, cond.TOPOLOGY_UNSATISFIABLE, unmet)
        decision = admit(ledger, admission, queued)
        if isinstance(decision, Waiting):
            message = f"waiting for {decision.reason} (position {decision.position} in the queue)"
            draft.waits(cond.QUEUED, cond.QUEUED, decision.reason, message, decision.position)
            return None
        cluster, nodes, admitted_by = decision.cluster, decision.worker_nodes, "admission picked"
        gpus = dict(decision.gpus)
    planned = _planned(draft, lambda: plan_on(demand.spec, {}, groups_with_nodes(groups, cluster), snapshot.nodes))
    planned = dataclasses.replace(planned, predicted_iteration_time=demand.predicted_iteration_time)
    if not {w.name for w in planned.workers} <= nodes or any(
        len(w.held_gpus) != len(gpus[w.name]) for w in planned.workers if w.name in gpus
    ):
        # Only when a group mixes node sizes: the plan on the picked nodes differs from the one on all nodes.
        actions.append(ReleaseNodes())
        raise draft.wait(cond.PLACED, cond.NODES_DIFFER, f"the free nodes {admitted_by} do not fit the placement")
    if gpus:
        planned = _pinned(draft, job, planned, groups, snapshot, gpus)
    if job.by_workload:
        # A shrink in place keeps the hosts Kueue granted in the Workload; the job holds only those it runs on.
        ledger.hold(job.key, frozenset(w.name for w in planned.workers))
    processes = sum(c.processes for c in planned.summary.components)
    draft.condition(cond.PLACED, True, cond.PLACEMENT_APPLIED, f"{processes} processes on {len(planned.workers)} nodes")
    if not job.by_workload and draft.condition(
        cond.ADMITTED, True, cond.ADMITTED, f"reserved {len(planned.workers)} nodes"
    ):
        draft.post(False, cond.ADMITTED, f"reserved nodes {', '.join(w.name for w in planned.workers)}")
    return planned


def _workload_admission(
    draft: Draft,
    job: Job,
    spec: RLJobSpec,
    groups: Sequence[JobGroup],
    demand: PlannedDemand,
    world: World,
    ledger: Ledger,
    dra_groups: Sequence[str],
    actions: list[Any],
) -> admitter.Granted | None:
    """What the job's Workload admitter granted, or None while the job waits (Queued, saying why)."""
    assert world.queue_objects is not None and world.snapshot is not None
    previous = cond.find(draft.conditions, cond.ADMITTED)
    said = admitter.admission(
        job.namespace,
        job.name,
        job.labels,
        spec,
        groups,
        demand,
        world.snapshot.nodes,
        world.queue_objects,
        previous,
        dra_groups,
        running=draft.before.get("phase") == JobPhase.RUNNING and holds_nodes(draft.before),
    )
    if said.create is not None:
        actions.append(Apply((said.create,), job.body()))
    if said.keep is not None:
        actions.append(DeleteStale(WORKLOAD_KIND, said.keep))
    if said.lower is not None:
        actions.append(LowerWorkload(*said.lower))
    draft.set(**said.status)
    verdict = said.verdict
    if isinstance(verdict, admitter.Refusal):
        raise (draft.fail if verdict.permanent else draft.wait)(cond.ADMITTED, verdict.reason, verdict.message)
    if isinstance(verdict, admitter.Grows):
        raise draft.wait(cond.PLACED, verdict.reason, verdict.message)  # it runs on as it is meanwhile
    if isinstance(verdict, admitter.Waits):
        draft.waits(verdict.reason, cond.WAITING_FOR_KUEUE, verdict.waiting_for, verdict.message)
        return None
    # Kueue sees another job's pods only once they exist: a node rlplace's queue gave a job of its own just before
    # the grant is that job's until it ends. Pods made now would wait unbound (and be made again on the same grant
    # after each bind timeout); the job waits for the node instead, saying whose it is, and holds its grant so
    # that rlplace's queue does not give the node to another of its jobs once the holder ends.
    taken = held_by_others(ledger, admission_world(ledger, world.snapshot), job.key, verdict.nodes)
    if taken:
        node, holder = min(taken.items())
        said = f"node {node}, which Kueue granted, to be freed by RLJob {'/'.join(holder)}"
        draft.waits(cond.GRANTED_NODE_HELD, cond.GRANTED_NODE_HELD, said, f"waiting for {said}")
        ledger.hold(job.key, verdict.nodes)
        return None
    if draft.condition(cond.ADMITTED, True, cond.ADMITTED_BY_KUEUE, verdict.message):
        draft.post(False, cond.ADMITTED_BY_KUEUE, verdict.message)
    return verdict


def _pinned(
    draft: Draft,
    job: Job,
    planned: JobPlan,
    groups: Sequence[JobGroup],
    snapshot: Snapshot,
    gpus: Mapping[str, tuple[int, ...]],
) -> JobPlan:
    """The plan with the exact GPUs admission reserved on each DRA node pinned on its worker (the k-th of the plan's
    GPUs on the node is the k-th reserved one, so the plan's order is kept)."""
    settings = {}
    for group in groups:
        dra = group.spec.dra_driver
        if dra is not None:
            for entry in group.status.nodes:
                settings.setdefault(entry.name, dra)
    attempt = attempt_for_new_child(draft.before, draft.generation)
    workers = []
    for worker in planned.workers:
        if worker.name in gpus:
            info = indexed(snapshot.nodes, worker.name)
            dra = settings[worker.name]
            try:
                pin = device_pin(job.name, worker.rank, attempt, dra, info.devices(dra.driver), gpus[worker.name])
            except (PinError, IndexError) as err:
                raise draft.fail(cond.PLACED, cond.PLACEMENT_INVALID, str(err)) from None
            worker = dataclasses.replace(worker, pin=pin, requests={})
        workers.append(worker)
    # A pod that claims its GPUs uses those only, not its node's.
    total = sum(len(w.pin.host_gpus) if w.pin is not None else w.gpus for w in workers)
    return dataclasses.replace(planned, workers=workers, gpus=total)


def _children(
    draft: Draft, job: Job, spec: RLJobSpec, planned: JobPlan, attempt: int, world: World, actions: list[Any]
) -> Mapping[str, Any]:
    """The ConfigMap, the claim templates and the RayCluster or (with an entrypoint) the RayJob, in the order they
    are applied; returns the child as it will be once applied."""
    if not world.kuberay_served:
        kind = "RayJob" if spec.entrypoint else "RayCluster"
        raise draft.wait(
            cond.RAYCLUSTER_READY, cond.KUBERAY_MISSING, f"the ray.io {kind} CRD is not installed (install KubeRay)"
        )
    framework = framework_of(spec)
    name = job.name
    pod_gpus = {w.rank: w.held_gpus for w in planned.workers if w.pin is not None}
    configmap = build_placement_configmap(name, planned.plan, framework.configmap_files(), pod_gpus)
    templates = claim_templates(name, planned.workers)
    child = (
        build_rayjob(name, spec, planned.workers, attempt)
        if spec.entrypoint
        else build_raycluster(name, spec, planned.workers)
    )
    child = with_progress_reporting(
        child, name, world.settings.progress_url, workers=framework.progress_from_every_pod()
    )
    owner = job.body()
    if job.by_workload:
        child = for_workload(child)
        owner = job.body(labels=labels_for_children(job.labels))
    # The claim templates before the pods that name them (a pod whose template is missing is not scheduled);
    # templates of an earlier pin are immutable and no longer named: they go.
    actions.append(Apply((configmap, *templates), owner))
    actions.append(DeleteStale(CLAIM_TEMPLATE_KIND, frozenset(t["metadata"]["name"] for t in templates)))
    actions.append(Apply((child,), owner))
    if (
        spec.entrypoint
        and world.rayjob is not None  # not a restart's new RayJob (decide.py: _restart_for_new_spec)
        and holds_nodes(draft.before)
        and draft.before.get("observedGeneration") != draft.generation
    ):
        # A running job planned again (its replicas changed, docs/elastic.md): its RayCluster and its driver follow.
        resize = resize_workers(draft.before, child, [w.name for w in planned.workers], world.pods, planned.plan)
        if resize is not None:
            actions.append(resize)
    # The child as the API server has it once applied: this spec, and the state KubeRay wrote of it so far (a
    # resumed RayJob is still Suspended in its status until KubeRay acts on the new spec).
    observed = world.rayjob if spec.entrypoint else world.raycluster
    return {**child, "status": dict((observed or {}).get("status") or {})}


def _describe(
    draft: Draft,
    job: Job,
    spec: RLJobSpec,
    as_written: RLJobSpec,
    planned: JobPlan,
    attempt: int,
    status: RLJobStatus | None,
    child: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
) -> None:
    """The status of a job whose children are made: what they run, and the child's state as it is (its pods: those
    of a job that already had children)."""
    claims = [
        dump(
            GpuClaim(
                node=w.name,
                devices=[d.name for d in w.pin.devices],
                host_gpus=list(w.pin.host_gpus),
                template=w.pin.template,
            )
        )
        for w in planned.workers
        if w.pin is not None
    ]
    draft.set(
        placement=dump(planned.summary),
        appliedPlacement=[dump(e) for e in planned.applied],
        predictedIterationTime=planned.predicted_iteration_time,
        gpus=planned.gpus,
        nodes=len(planned.workers),
        gpuClaims=claims or None,
        queuePosition=None,
        waitingFor=None,
        retryAfter=None,
    )
    if draft.before.get("observedGeneration") != draft.generation:
        # A new spec starts a new history, with every node again and no recommendation.
        draft.set(
            restarts=None,
            provisioningRetries=None,
            restartCount=None,
            excludedNodes=None,
            recommendation=None,
            replacements=None,
        )
        if holds_nodes(draft.before) and draft.before.get("phase") == JobPhase.RUNNING:
            # Its Replace components' replicas changed in place: which ranks were added, and an Event each.
            components, events = resized_components(draft.before, planned.plan, cond.now())
            if components is not None:
                draft.set(components=components)
                for event in events:
                    draft.post(event.warning, event.reason, event.message)
    if spec.entrypoint and not holds_nodes(draft.before):
        # A new RayJob: its driver's first submission is attempt 1 again (not a restart of the last one), unless it
        # is a restart's new attempt.
        draft.set(attempts=attempt if attempt > 1 else None, driverStartTime=None, driverEndTime=None)
    # The new plan is on the NodeGroups as they are now: an earlier NodeGroupChanged no longer applies.
    draft.without(cond.NODEGROUP_CHANGED)
    profiled = recommend.profiling_condition(as_written, status if status is not None else RLJobStatus())
    if profiled is not None:
        draft.condition(cond.PROFILED, *profiled)
    elif cond.find(draft.conditions, cond.PROFILED) is not None:  # a spec that no longer profiles first
        draft.without(cond.PROFILED)
    kind = "RayJob" if spec.entrypoint else "RayCluster"
    if spec.entrypoint:
        driver = driver_status(
            draft.after, child, None, job.namespace, job.name, spec.run.submission_mode, draft.generation
        )
        phase, message = driver.pop("phase"), driver.pop("message")
        draft.set(**driver)
        draft.phase(JobPhase(phase), message)
    else:
        draft.set(rayCluster=child["metadata"]["name"])
        waiting = cluster_ready(draft.after, child, pods)
        mirrored = mirrored_status({"conditions": draft.conditions}, waiting, draft.generation)
        draft.set(conditions=mirrored["conditions"])
        draft.phase(mirrored["phase"])
    draft.post(False, cond.PLACEMENT_APPLIED, f"{planned.summary.mode} placement applied; {kind} {job.name}")
