"""The kopf side of `reconcile.py`: observe a job's world, call `reconcile`, write its status once, act.

Every reason to look at an RLJob ends in `run`: the job was created, changed or the operator resumed
(`rljob_changed`), its RayCluster or RayJob changed (`raycluster_changed`, `rayjob_changed`), or time passed and
the queue moved (`nodegroup_jobs_recheck`). None calls another handler. Shared state is read from copies of
the kopf indexes (`Snapshot`), never from a live index that the watch streams change meanwhile.

The status is written by `run` alone, as a merge patch conditional on the resourceVersion it was computed from:
a 409 Conflict (someone wrote in between) reads the job again and reconciles again, so two writers never drop
each other's conditions. Actions (delete children, release nodes, Events) follow a successful write.

The timers are on NodeGroups, not on RLJobs: kopf puts a finalizer on every object a timer watches, and
deleting a job must not need the operator. Each job is looked at by the timer of its first NodeGroup only.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime as dt
import logging
import re
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from placement_core.contract import plan_from_configmap
from placement_core.errors import PlacementError
from placement_core.observe.verify import BindingReport
from placement_core.plan import Plan
from rlplace_operator.admission import kueue
from rlplace_operator.admission.rules import Decision
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import GROUP, VERSION
from rlplace_operator.api.names import (
    API_VERSION,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODEGROUP_PLURAL,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
    RAYJOB_PLURAL,
    RLJOB_PLURAL,
    placement_configmap_name,
    raycluster_name,
    rayjob_name,
)
from rlplace_operator.api.rljob import PlacementMode
from rlplace_operator.api.status import JobPhase
from rlplace_operator.cluster.dra import with_claims_checked
from rlplace_operator.cluster.selection import job_cluster
from rlplace_operator.diagnosis import StartBounds, pods_not_started
from rlplace_operator.handlers import rayjob as driver
from rlplace_operator.handlers import rljob
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.handlers.queue import Ledger, Snapshot, groups_with_nodes, queue_pass
from rlplace_operator.handlers.raycluster import raycluster_ready
from rlplace_operator.kube import Kube, StatusConflict, api_message
from rlplace_operator.reconcile import (
    DeleteChildren,
    Job,
    MarkWorkload,
    Outcome,
    Post,
    Provision,
    ReleaseNodes,
    ReleaseWorkload,
    RequestCheckpoint,
    World,
    admitted_since,
    holds_nodes,
    parse_time,
    reconcile,
    status_wire,
    with_kueue,
    with_recommendation,
)

logger = logging.getLogger(__name__)

#: How often the NodeGroup timer looks at its jobs: Queued ones (a freed node is used within about this long),
#: Provisioning ones (a failure is named within about this long after its cause shows) and drivers that have not
#: verified their binding yet.
RECHECK_SECONDS = 2.0
#: A job whose status write conflicts this many times in a row is left to its next trigger.
MAX_CONFLICTS = 3
#: Events this much older than the job's admission belong to an earlier attempt (clocks differ a little).
EVENT_SLACK_SECONDS = 2.0


# -- indexes of what each job owns -----------------------------------------------------------------------------


def _trimmed(body: Mapping[str, Any], spec_keys: Sequence[str] = ()) -> dict[str, Any]:
    """metadata (without managedFields), the named spec keys and the status: what reconcile reads of a child."""
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    spec = body.get("spec") or {}
    return {
        "kind": body.get("kind"),
        "metadata": metadata,
        "spec": {k: spec[k] for k in spec_keys if k in spec} if spec_keys else dict(spec),
        "status": dict(body.get("status") or {}),
    }


@kopf.index("", "v1", "pods", labels={JOB_LABEL: kopf.PRESENT})
def job_pods_index(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict]:
    """Each job's Ray pods (head and workers carry the job label): what provisioning failures are read from."""
    return {(namespace, labels[JOB_LABEL]): _trimmed(body)}


@kopf.index(RAY_GROUP, RAY_VERSION, RAYCLUSTER_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def ray_children_index(
    namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict] | None:
    """Each job's RayCluster (its own, or its RayJob's), status included."""
    job = labels.get(JOB_LABEL)
    return {(namespace, job): _trimmed(body, ("suspend",))} if job else None


@kopf.index(RAY_GROUP, RAY_VERSION, RAYJOB_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def rayjob_children_index(
    namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict] | None:
    """Each job's RayJob, status included."""
    job = labels.get(JOB_LABEL)
    return {(namespace, job): _trimmed(body, ("suspend", "submissionMode"))} if job else None


def one(indexes: Mapping[str, Any], index: str, key: object) -> Any | None:
    """A copy of the one value a kopf index holds for `key` (None: none), without copying the whole index."""
    store = indexes[index].get(key)
    values = list(store) if store is not None else []
    return values[0] if values else None


# -- observe ---------------------------------------------------------------------------------------------------


def job_of(key: tuple[str, str], entry: Mapping[str, Any], profile_changed: bool = False, fresh: bool = False) -> Job:
    return Job(
        namespace=key[0],
        name=key[1],
        uid=entry["uid"],
        generation=entry["generation"],
        spec=entry["spec"],
        status=entry["status"],
        resource_version=entry.get("resourceVersion"),
        created=entry.get("created", ""),
        annotations=entry.get("annotations") or {},
        labels=entry.get("labels") or {},
        profile_changed=profile_changed,
        fresh=fresh,
    )


def job_of_body(body: Mapping[str, Any], profile_changed: bool = False) -> Job:
    metadata = body["metadata"]
    entry = {
        "uid": metadata["uid"],
        "generation": metadata.get("generation"),
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
        "resourceVersion": metadata.get("resourceVersion"),
        "created": metadata.get("creationTimestamp", ""),
        "annotations": dict(metadata.get("annotations") or {}),
        "labels": dict(metadata.get("labels") or {}),
    }
    return job_of((metadata["namespace"], metadata["name"]), entry, profile_changed, fresh=True)


def _owned(child: Mapping[str, Any] | None, uid: str) -> bool:
    refs = (child or {}).get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def _event_time(event: Mapping[str, Any]) -> dt.datetime | None:
    for value in (
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("metadata", {}).get("creationTimestamp"),
    ):
        if value:
            try:
                return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            except ValueError:
                continue
    return None


def job_events(
    events: Sequence[Mapping[str, Any]],
    job: Job,
    cluster: str | None,
    pods: Sequence[Mapping[str, Any]],
    since: dt.datetime | None,
) -> list[Mapping[str, Any]]:
    """The Warning events about the job's RayCluster, RayJob, submitter Job and Ray pods since `since`."""
    names = {job.name, *(p["metadata"]["name"] for p in pods)}
    patterns = []
    if cluster:
        names.add(cluster)
        patterns.append(re.compile(rf"^{re.escape(cluster)}-(head|node-\d+-worker)-"))
    if job.entrypoint:
        patterns.append(re.compile(rf"^{re.escape(rayjob_name(job.name))}-[a-z0-9]{{5}}$"))  # submitter pods
    found = []
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") == "RLJob":
            continue
        name = involved.get("name") or ""
        if name not in names and not any(p.match(name) for p in patterns):
            continue
        when = _event_time(event)
        if since is not None and when is not None and when < since - dt.timedelta(seconds=EVENT_SLACK_SECONDS):
            continue
        found.append(event)
    return found


def _plan_of(kube: Kube, job: Job) -> Plan | None:
    configmap = kube.get_configmap(job.namespace, placement_configmap_name(job.name))
    try:
        return None if configmap is None else plan_from_configmap(configmap)
    except PlacementError:
        return None


def _job_nodes(kube: Kube, job: Job, pods: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    names = {(p.get("spec") or {}).get("nodeName") for p in pods} - {None, ""}
    names |= {n for c in (job.status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}
    nodes = {}
    for name in sorted(names):
        node = kube.get_node(name)
        if node is not None:
            nodes[name] = node
    return nodes


class Observer:
    """Builds `World`s from the kopf indexes: a job's own entries are copied as it is looked at, the whole
    `Snapshot` (what admission reads) once, when first needed; Warning events are listed once per namespace."""

    def __init__(
        self,
        kube: Kube,
        indexes: Mapping[str, Any],
        snapshot: Snapshot | None = None,
        start_bounds: StartBounds = StartBounds(),
        checkpoint_requests: set[tuple[str, str]] | None = None,
    ) -> None:
        self.kube = kube
        #: Jobs whose driver is asked to checkpoint now (the progress endpoint answers their reports so).
        self.checkpoint_requests = set() if checkpoint_requests is None else checkpoint_requests
        self.indexes = indexes
        self._snapshot = snapshot
        self.start_bounds = start_bounds
        self._events: MutableMapping[str, list[dict]] = {}

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            self._snapshot = Snapshot.of(self.indexes)
        return self._snapshot

    def events(self, namespace: str) -> list[dict]:
        if namespace not in self._events:
            self._events[namespace] = self.kube.warning_events(namespace)
        return self._events[namespace]

    def with_cluster(self, job: Job, world: World) -> World:
        """`world` with the job's cluster when its recommendation is due (recommend.py), and a child made before
        the job's last re-placement counted as not known yet: it is being deleted, and the job is planned again
        only once it is gone."""
        status, spec = job.status, job.spec
        child = world.rayjob if job.entrypoint else world.raycluster
        replacements = status.get("replacements") or []
        if child is not None and replacements:
            created = (child.get("metadata") or {}).get("creationTimestamp") or ""
            if created < replacements[-1].get("time", ""):
                return dataclasses.replace(world, rayjob=None, raycluster=None, child_known=False)
        if not _recommendation_due(job.spec, status):
            return world
        held = {n for c in (status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}
        snapshot = self.snapshot
        groups = [
            rljob.parsed_group(name, entry)
            for name in spec.get("nodeGroups") or []
            if (entry := indexed(snapshot.nodegroups, name)) is not None
        ]
        cut = groups_with_nodes(groups, [(g.name, [e.name for e in g.status.nodes if e.name in held]) for g in groups])
        infos = {name: info for name in held if (info := indexed(snapshot.nodes, name)) is not None}
        try:
            return dataclasses.replace(world, cluster=job_cluster(cut, infos))
        except PlacementError:
            return world

    def with_workload(self, job: Job, world: World) -> World:
        """`world` with the job's Kueue Workload, read from the API (Kueue writes it; no index keeps it)."""
        name = (job.status.get("kueue") or {}).get("workload")
        if job.kueue_queue is None or not name:
            return world
        body = self.kube.get_workload(job.namespace, name)
        if body is None or not _owned(body, job.uid):
            return world
        try:
            return dataclasses.replace(world, workload=kueue.WorkloadState.of(body))
        except kueue.AssignmentError:
            return world  # the provision pass says why on the job

    def world(self, job: Job, queue: Decision | None = None, fresh: bool = False) -> World:
        now = dt.datetime.now(dt.UTC)
        if not holds_nodes(job.status):
            # A waiting job's RayJob, if one is left (a restart's previous attempt): from the index, no API read.
            left = one(self.indexes, "rayjob_children_index", job.key) if job.entrypoint else None
            left = left if _owned(left, job.uid) else None
            return World(now=now, rayjob=left, child_known=False, queue=queue)
        key = job.key
        store = self.indexes["job_pods_index"].get(key)
        pods = [p for p in (list(store) if store is not None else []) if isinstance(p, Mapping)]
        if job.entrypoint:
            rayjob = one(self.indexes, "rayjob_children_index", key)
            if rayjob is None or fresh:
                rayjob = self.kube.get_rayjob(job.namespace, rayjob_name(job.name))  # the index may lag an apply
            rayjob = rayjob if _owned(rayjob, job.uid) else None
            return self._driver_world(job, now, rayjob, pods)
        cluster = one(self.indexes, "ray_children_index", key)
        if cluster is None or fresh:
            cluster = self.kube.get_raycluster(job.namespace, raycluster_name(job.name))
        cluster = cluster if _owned(cluster, job.uid) else None
        if cluster is None or raycluster_ready(dict(cluster)):
            return World(now=now, raycluster=cluster, pods=pods, start_bounds=self.start_bounds)
        events = job_events(
            self.events(job.namespace), job, cluster["metadata"]["name"], pods, admitted_since(job.status)
        )
        return World(
            now=now,
            raycluster=cluster,
            pods=pods,
            events=events,
            plan=self._plan_if_not_started(job, pods, now),
            start_bounds=self.start_bounds,
        )

    def _plan_if_not_started(self, job: Job, pods: Sequence[Mapping[str, Any]], now: dt.datetime) -> Plan | None:
        """The job's plan when a pod of it waits to start (its diagnosis names the processes on that pod)."""
        return _plan_of(self.kube, job) if pods_not_started(pods, now, self.start_bounds) else None

    def _driver_world(self, job: Job, now: dt.datetime, rayjob: Mapping[str, Any] | None, pods: list) -> World:
        if rayjob is None:
            return World(now=now, rayjob=None, pods=pods, start_bounds=self.start_bounds)
        state = driver.driver_state(rayjob)
        status = rayjob.get("status") or {}
        cluster = status.get("rayClusterName")
        started = (status.get("rayJobInfo") or {}).get("startTime")
        restarted = bool(started and job.status.get("driverStartTime") and started != job.status.get("driverStartTime"))
        failed_now = state.finished and job.status.get("phase") not in (JobPhase.SUCCEEDED, JobPhase.FAILED)
        events: list[Mapping[str, Any]] = []
        if not state.started or failed_now or restarted:
            since = admitted_since(job.status)
            events = job_events(self.events(job.namespace), job, cluster, pods, since)
        nodes: dict[str, Mapping[str, Any]] = {}
        plan, tail = None, ""
        if (failed_now and state.phase is JobPhase.FAILED) or restarted:
            nodes, plan = _job_nodes(self.kube, job, pods), _plan_of(self.kube, job)
        elif not state.started:
            plan = self._plan_if_not_started(job, pods, now)
        if failed_now and state.phase is JobPhase.FAILED:
            tail = driver.driver_log_tail(self.kube, job.namespace, job.name, job.submission_mode, rayjob)
        verified = any(c.get("type") == driver.BINDING_CONDITION for c in job.status.get("conditions") or [])
        report = None
        if state.started and (not verified or restarted):
            report = self._report(job, rayjob, state, now)
        return World(
            now=now,
            rayjob=rayjob,
            pods=pods,
            events=events,
            nodes=nodes,
            plan=plan,
            driver_log_tail=tail,
            report=report,
            start_bounds=self.start_bounds,
        )

    def _report(
        self, job: Job, rayjob: Mapping[str, Any], state: driver.DriverState, now: dt.datetime
    ) -> BindingReport | None:
        """The binding report of the driver's attempt: the one an rlplace driver printed, or for a framework
        job the one made from its processes' probe lines (final once the driver ended or the bound on its
        workers' start, --pod-start-timeout from the driver's start, passed)."""
        if not job.framework_job:
            report = driver.read_report(self.kube, job.namespace, job.name, job.submission_mode, rayjob)
            claimed = {c["node"]: c.get("hostGpus") or [] for c in job.status.get("gpuClaims") or []}
            return None if report is None else with_claims_checked(report, claimed)
        plan = _plan_of(self.kube, job)
        if plan is None:
            return None
        started = parse_time(job.status.get("driverStartTime"))
        bound_passed = started is not None and now - started > self.start_bounds.timeout
        # A driver that failed is named by its failure (an image without the framework, a lost pod), not by
        # the workers it never started; one that succeeded without starting them did not run as planned.
        final = state.phase is JobPhase.SUCCEEDED if state.finished else bound_passed
        return driver.read_framework_report(
            self.kube, job.namespace, job.name, job.submission_mode, rayjob, plan, final, job.framework
        )


# -- act -------------------------------------------------------------------------------------------------------


def _ref(job: Job) -> dict[str, Any]:
    metadata = {"namespace": job.namespace, "name": job.name, "uid": job.uid}
    return {"apiVersion": API_VERSION, "kind": "RLJob", "metadata": metadata}


def _write_workload(kube: Kube, namespace: str, name: str, change: Callable[[Mapping[str, Any]], dict]) -> None:
    """Read the Workload and write `change(status)` as its whole status; again when Kueue wrote in between."""
    for _ in range(MAX_CONFLICTS):
        body = kube.get_workload(namespace, name)
        if body is None:
            return
        try:
            kube.replace_workload_status(body, change(body.get("status") or {}))
            return
        except StatusConflict:
            continue
    logger.warning("Workload %s/%s: its status kept changing; the next look writes it again", namespace, name)


def _act(kube: Kube, ledger: Ledger, job: Job, outcome: Outcome, checkpoints: set[tuple[str, str]]) -> None:
    if not any(isinstance(a, RequestCheckpoint) for a in outcome.actions) and outcome.status.preemption is None:
        checkpoints.discard(job.key)
    for action in outcome.actions:
        if isinstance(action, RequestCheckpoint):
            checkpoints.add(job.key)
        elif isinstance(action, MarkWorkload):
            _write_workload(
                kube,
                job.namespace,
                action.workload,
                lambda status, a=action: kueue.with_condition(status, a.condition, True, a.reason, a.message),
            )
        elif isinstance(action, ReleaseWorkload):
            _write_workload(
                kube, job.namespace, action.workload, lambda status, a=action: kueue.released(status, a.requeue)
            )
        elif isinstance(action, DeleteChildren):
            if job.entrypoint:
                kube.delete_rayjob(job.namespace, rayjob_name(job.name))
            else:
                kube.delete_raycluster(job.namespace, raycluster_name(job.name))
        elif isinstance(action, ReleaseNodes):
            ledger.release(job.key)
        elif isinstance(action, Post):
            post = kopf.warn if action.warning else kopf.info
            post(_ref(job), reason=action.reason, message=cond.short(action.message))


def _write_provisioned(kube: Kube, job: Job, wanted: Mapping[str, Any]) -> None:
    """Write what a provision pass decided. Its children are applied already, so a later pass sees them and
    provisions nothing: this write is the only one that says what they run (placement, appliedPlacement, the
    Placed condition). When another writer got in first, this pass's changes are made again on the job as it
    is now, instead of being dropped with a conflict."""
    changes = cond.merge_patch(job.status, wanted)
    for _ in range(MAX_CONFLICTS):
        try:
            kube.write_rljob_status(_ref(job), job.status, wanted, job.resource_version)
            return
        except StatusConflict:
            again = _reread(kube, job)
            if again is None or again.generation != job.generation:
                return  # deleted, or a new spec: its own provision pass says what it runs
            job, wanted = again, cond.apply_merge_patch(again.status, changes)
    logger.warning("RLJob %s/%s: the status of its new children kept conflicting; not written", *job.key)


def _reread(kube: Kube, job: Job) -> Job | None:
    body = kube.get_rljob(job.namespace, job.name)
    return None if body is None else job_of_body(body, job.profile_changed)


def run(
    kube: Kube,
    ledger: Ledger,
    observer: Observer,
    job: Job,
    *,
    queue: Decision | None = None,
    retry: int = 0,
) -> float | None:
    """observe -> reconcile -> write the status (conditional) -> act; again on a conflict. Returns when to look
    again (None: the next event will do); raises the TemporaryError or PermanentError of a job that cannot be
    provisioned now, after its status says why."""
    fresh = False
    for _ in range(MAX_CONFLICTS):
        world = observer.with_workload(job, observer.with_cluster(job, observer.world(job, queue, fresh)))
        outcome = with_kueue(job, world, with_recommendation(job, world, reconcile(job, world)))
        try:
            if any(isinstance(a, Provision) for a in outcome.actions):
                if not job.fresh:
                    # Children are applied before the status is written: decide on the job as it is now, not
                    # on an index entry that may lag behind a write that already ended or requeued it.
                    raise StatusConflict(job.name)
                wanted, error = rljob.provision(job, kube, ledger, observer.snapshot, retry)
                _write_provisioned(kube, job, wanted)
                if error is not None:
                    raise error
                return None
            wanted = status_wire(outcome.status)
            kube.write_rljob_status(_ref(job), job.status, wanted, job.resource_version)
        except StatusConflict:
            again = _reread(kube, job)
            if again is None:
                return None
            job, queue, fresh = again, None, True
            continue
        _act(kube, ledger, job, outcome, observer.checkpoint_requests)
        return outcome.requeue_after
    logger.info("RLJob %s/%s: status kept changing under its reconcile; its next trigger looks again", *job.key)
    return RECHECK_SECONDS


def observer_of(memo: kopf.Memo, indexes: Mapping[str, Any], snapshot: Snapshot | None = None) -> Observer:
    """An Observer for one handler call, with the operator's settings and its checkpoint requests (main.py makes
    the set: the progress endpoint answers from it)."""
    return Observer(memo.kube, indexes, snapshot, start_bounds(memo), memo.checkpoint_requests)


def start_bounds(memo: kopf.Memo) -> StartBounds:
    """The operator's --pod-start-grace and --pod-start-timeout (the defaults where it was started without)."""
    return memo.get("start_bounds") or StartBounds()


# -- handlers --------------------------------------------------------------------------------------------------


@kopf.on.create(GROUP, VERSION, RLJOB_PLURAL, retries=None)
@kopf.on.update(GROUP, VERSION, RLJOB_PLURAL, retries=None)
@kopf.on.resume(GROUP, VERSION, RLJOB_PLURAL, retries=None)
def rljob_changed(
    body: kopf.Body, memo: kopf.Memo, diff: kopf.Diff | None = None, retry: int = 0, **kwargs: Any
) -> None:
    """A job created, changed (spec or profile annotation) or found at start-up: reconcile it."""
    job = job_of_body(body, rljob.profile_changed(diff))
    run(memo.kube, memo.ledger, observer_of(memo, kwargs), job, retry=retry)


def _child_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, kwargs: Mapping[str, Any]) -> None:
    """Reconcile the job a RayCluster or RayJob belongs to (its deletion too: a job that still holds nodes and
    lost its child is planned again)."""
    if JOB_LABEL not in labels:
        return
    key = (namespace, labels[JOB_LABEL])
    entry = one(kwargs, "rljob_index", key)
    if entry is None or not holds_nodes(entry["status"]):
        return
    _safely(memo, observer_of(memo, kwargs), job_of(key, entry))


@kopf.on.event(RAY_GROUP, RAY_VERSION, RAYCLUSTER_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def raycluster_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any) -> None:
    """A job's RayCluster changed (readiness, KubeRay's events): reconcile the job."""
    _child_changed(namespace, labels, memo, kwargs)


@kopf.on.event(kueue.KUEUE_GROUP, kueue.KUEUE_VERSION, kueue.WORKLOAD_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def workload_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any) -> None:
    """Kueue changed a job's Workload (admitted, evicted, a node swapped): reconcile the job, waiting or not."""
    if JOB_LABEL not in labels:
        return
    key = (namespace, labels[JOB_LABEL])
    entry = one(kwargs, "rljob_index", key)
    if entry is not None:
        _safely(memo, observer_of(memo, kwargs), job_of(key, entry))


@kopf.on.event(RAY_GROUP, RAY_VERSION, RAYJOB_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def rayjob_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any) -> None:
    """A job's RayJob changed (the driver started, ended or was submitted again): reconcile the job."""
    _child_changed(namespace, labels, memo, kwargs)


def _safely(memo: kopf.Memo, observer: Observer, job: Job, queue: Decision | None = None) -> float | None:
    """`run` for one job of a pass: its failure is logged and written to its status, never the pass's."""
    try:
        return run(memo.kube, memo.ledger, observer, job, queue=queue)
    except (kopf.TemporaryError, kopf.PermanentError):
        return None  # its status says why already
    except ApiException as err:
        if err.status == 404:
            return None
        # The API's own message names the refused verb and resource (a missing RBAC rule, say): say it whole.
        logger.warning(
            "RLJob %s/%s: reconcile failed (%s: %s); the next pass looks again", *job.key, err.status, api_message(err)
        )
        return None
    except Exception:  # one job's failure must not stop the pass (the queue never stalls): said, then go on
        logger.exception("RLJob %s/%s: reconcile failed; the next pass looks again", *job.key)
        return None


def _recommendation_due(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """A running job the closed loop models whose status.progress is newer than its recommendation, or whose
    recommendation waits for the next report to be applied (recommend.py)."""
    if status.get("phase") != JobPhase.RUNNING or not status.get("progress"):
        return False
    auto = spec.get("autoPlacement") or {}
    modelled = (
        auto.get("enabled") or auto.get("profileFirst") or spec.get("placementMode") == PlacementMode.MODEL_PARALLEL
    )
    if not modelled:
        return False
    progress, recommendation = status["progress"], status.get("recommendation") or {}
    return recommendation.get("iteration") != progress.get("iteration") or (
        recommendation.get("updatedAt", "") < progress.get("updatedAt", "")
    )


def _needs_look(entry: Mapping[str, Any]) -> bool:
    """Jobs the timer looks at: Queued ones, Provisioning ones, running drivers not verified yet, and running jobs
    whose recommendation is due."""
    status = entry["status"]
    phase = status.get("phase")
    if phase in (JobPhase.QUEUED, JobPhase.PROVISIONING) or _recommendation_due(entry["spec"], status):
        return True
    if status.get("preemption"):
        return True  # Kueue evicted it: the checkpoint grace and the pods' stop are timed
    kueue_status = status.get("kueue") or {}
    if phase == JobPhase.RUNNING and kueue_status.get("workload") and not kueue_status.get("podsReady"):
        return True  # its Workload is told PodsReady (a job that started running in a provision pass)
    unverified = not any(c.get("type") == driver.BINDING_CONDITION for c in status.get("conditions") or [])
    return phase == JobPhase.RUNNING and bool(status.get("rayJob")) and unverified


@kopf.timer(GROUP, VERSION, NODEGROUP_PLURAL, interval=RECHECK_SECONDS)
def nodegroup_jobs_recheck(name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    """The queue pass (one admission decision over every waiting job), then a reconcile of each job of this
    NodeGroup that waits, provisions or has not verified its driver's binding yet."""
    snapshot = Snapshot.of(kwargs)
    ledger: Ledger = memo.ledger
    decisions = queue_pass(ledger, rljob.admission_world(snapshot))
    observer = observer_of(memo, kwargs, snapshot)
    looks: list[tuple[Job, Decision | None]] = []
    for key in list(snapshot.rljobs):
        entry = indexed(snapshot.rljobs, key)
        if entry is None or entry["nodeGroups"][:1] != [name] or not _needs_look(entry):
            continue
        planned = key in ledger.demands  # a job whose demand this process knows can wait without re-planning
        looks.append((job_of(key, entry), decisions.get(key) if planned else None))
    # The jobs are independent once the pass has decided (their nodes are reserved): each reconcile is a few API
    # calls, so a burst's admitted jobs are provisioned side by side, not one call after another.
    # Each runs in a copy of this handler's context: kopf's Events (kopf.info) read their settings from it.
    pool: ThreadPoolExecutor = memo.pass_pool
    runs = [pool.submit(contextvars.copy_context().run, _safely, memo, observer, *look) for look in looks]
    for done in runs:
        done.result()


@kopf.on.delete(GROUP, VERSION, RLJOB_PLURAL, optional=True)
def rljob_release(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A deleted job's reservation goes (its RayCluster goes with it through the garbage collector)."""
    ledger: Ledger = memo.ledger
    ledger.forget((namespace, name))
