"""Observe: the snapshot of what exists around one job, which `decide` and `provision` read.

An `Observer` builds a `World` for a job from copies of the kopf indexes (its pods, its RayCluster or RayJob) and a
few API reads where no index keeps what is needed (the Workload its admitter writes, Warning events, the driver's
log, the plan in its ConfigMap, the nodes of a failed attempt). What it reads depends on the job's state: a queued
job costs no read, a job whose driver failed a few. Everything it reads goes through kube.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import itertools
import re
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from placement_core.contract import plan_from_configmap
from placement_core.errors import CapacityError, PlacementError
from placement_core.observe.verify import BindingReport, find_report, find_report_after
from placement_core.plan import Plan
from rlplace_operator.admission import admitter
from rlplace_operator.admission.demand import oversized, planned_demand
from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.admission.queue import admission_world, admit, groups_with_nodes, status_excluded
from rlplace_operator.admission.rules import Admitted, Decision, QueuedJob
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.names import (
    SUBMITTER_CONTAINER,
    JobKey,
    placement_configmap_name,
    raycluster_name,
    rayjob_name,
)
from rlplace_operator.api.rljob import PlacementMode, RLJobSpec
from rlplace_operator.api.status import JobPhase, holds_nodes
from rlplace_operator.cluster.dra import with_claims_checked
from rlplace_operator.cluster.selection import job_cluster
from rlplace_operator.cluster.snapshot import JOB_PODS_INDEX, RAYCLUSTER_INDEX, RAYJOB_INDEX, Snapshot, indexed, one
from rlplace_operator.diagnosis.causes import event_time
from rlplace_operator.diagnosis.starting import pods_not_started
from rlplace_operator.kube import Kube
from rlplace_operator.reconcile.driver import (
    DRIVER_LOG_TAIL_LINES,
    REPORT_LOG_BYTES,
    DriverState,
    driver_log_selector,
    driver_state,
)
from rlplace_operator.reconcile.pods import cluster_ready, pod_problems
from rlplace_operator.reconcile.replicas import has_replace, replaced_unverified
from rlplace_operator.reconcile.resize import draining
from rlplace_operator.reconcile.world import Job, Settings, World, admitted_since, owned

#: Events this much older than the job's admission belong to an earlier attempt (clocks differ a little).
EVENT_SLACK_SECONDS = 2.0


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
        when = event_time(event)
        if since is not None and when is not None and when < since - dt.timedelta(seconds=EVENT_SLACK_SECONDS):
            continue
        found.append(event)
    return found


def recommendation_due(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """A running job the closed loop models whose status.progress is newer than its recommendation, or whose
    recommendation waits for the next report to be applied (planning/recommend.py)."""
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


class Observer:
    """Builds `World`s: a job's own entries are copied from the live indexes as it is looked at, the whole
    `Snapshot` (what admission reads) once, when first needed; Warning events are listed once per namespace."""

    def __init__(
        self,
        kube: Kube,
        indexes: Mapping[str, Any],
        ledger: Ledger,
        snapshot: Snapshot | None = None,
        settings: Settings | None = None,
        checkpoint_requests: set[JobKey] | None = None,
    ) -> None:
        self.kube = kube
        self.indexes = indexes
        self.ledger = ledger
        self.settings = settings or Settings()
        #: Jobs whose driver is asked to checkpoint now (the progress endpoint answers their reports so).
        self.checkpoint_requests = set() if checkpoint_requests is None else checkpoint_requests
        self._snapshot = snapshot
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

    def look(self, job: Job, queue: Decision | None = None, fresh: bool = False) -> World:
        """Everything `decide` reads for the job now."""
        return self.with_room(job, self.with_workload(job, self.with_cluster(job, self.world(job, queue, fresh))))

    def with_cluster(self, job: Job, world: World) -> World:
        """`world` with the job's cluster when its recommendation is due (planning/recommend.py), and a child made
        before the job's last re-placement counted as not known yet: it is being deleted, and the job is planned
        again only once it is gone."""
        status, spec = job.status, job.spec
        child = world.rayjob if job.entrypoint else world.raycluster
        replacements = status.get("replacements") or []
        if child is not None and replacements:
            created = (child.get("metadata") or {}).get("creationTimestamp") or ""
            if created < replacements[-1].get("time", ""):
                return dataclasses.replace(world, rayjob=None, raycluster=None, child_known=False)
        if not recommendation_due(job.spec, status):
            return world
        held = {n for c in (status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}
        snapshot = self.snapshot
        groups = [
            self.ledger.group(name, entry)
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
        """`world` with the Workload that holds the job's admission, read from the API (its admitter writes it; no
        index keeps it), and, while it holds quota, whether the LocalQueue the job names still exists."""
        name = admitter.workload_name(job.status)
        if not job.by_workload or not name:
            return world
        body = self.kube.get_workload(job.namespace, name)
        if body is None or not owned(body, job.uid):
            return world
        state = admitter.workload_state(body)
        queue = admitter.queue_name(job.labels)
        found = True
        if state is not None and state.holds_quota and queue is not None:
            found = self.kube.get_localqueue(job.namespace, queue) is not None
        return dataclasses.replace(world, workload=state, queue_found=found)

    def with_room(self, job: Job, world: World) -> World:
        """`world` with the room a running job's elastic loop may grow into (World.room; asked only when the loop
        would grow), when its loop is on and rlplace's queue admits it (a Workload's job is not resized in place)."""
        if not (job.spec.get("elastic") or {}).get("enabled") or job.by_workload:
            return world
        if job.status.get("phase") != JobPhase.RUNNING:
            return world
        return dataclasses.replace(world, room=functools.partial(self._room, job), waiting_above=self._above(job))

    def _above(self, job: Job) -> dict[str, str]:
        """The job's NodeGroups that share a node with a NodeGroup a job of higher priority is queued for by
        rlplace's queue -> that job (groups are selections of nodes: two names may hold the same node)."""
        priority = int(job.spec.get("priority") or 0)
        snapshot = self.snapshot
        members: dict[str, set[str]] = {}

        def nodes_of(group: str) -> set[str]:
            if group not in members:
                entry = indexed(snapshot.nodegroups, group)
                nodes = self.ledger.group(group, entry).status.nodes if entry is not None else []
                members[group] = {n.name for n in nodes}
            return members[group]

        found: dict[str, str] = {}
        for key in snapshot.rljobs:
            entry = indexed(snapshot.rljobs, key)
            if entry is None or int(entry.get("priority") or 0) <= priority:
                continue
            if (entry.get("status") or {}).get("phase") != JobPhase.QUEUED or admitter.queue_name(entry["labels"]):
                continue
            wanted = set().union(*(nodes_of(g) for g in entry.get("nodeGroups") or []))
            for group in job.spec.get("nodeGroups") or []:
                if nodes_of(group) & wanted:
                    found.setdefault(group, f"job {key[0]}/{key[1]} of priority {entry.get('priority')}")
        return found

    def _room(self, job: Job, index: int, now: int, wanted: int) -> int:
        """The most replicas from `now` to `wanted` of spec.components[index] admissible now (the count it runs is
        taken as admissible: its nodes are its own); room is monotone in the count, so a bisection finds it."""
        spec = job.spec
        low, high = now, wanted
        while low < high:
            middle = (low + high + 1) // 2
            components = [dict(c) for c in spec.get("components") or []]
            components[index]["replicas"] = middle
            if self._admissible(job, RLJobSpec.model_validate({**spec, "components": components})):
                low = middle
            else:
                high = middle - 1
        return low

    def _admissible(self, job: Job, spec: RLJobSpec) -> bool:
        """Whether `spec` (the job's, with other replicas) would be admitted now, as provisioning it would be."""
        snapshot = self.snapshot
        entries = [indexed(snapshot.nodegroups, name) for name in spec.node_groups]
        if any(entry is None for entry in entries):
            return False
        groups = [self.ledger.group(name, entry) for name, entry in zip(spec.node_groups, entries, strict=True)]
        unfit, too_small = oversized(spec, groups, snapshot.nodes)
        if unfit is not None:
            return False
        excluded = {**too_small, **status_excluded(job.status, job.generation)}
        try:
            demand = planned_demand(
                job.key, job.generation, spec, job.annotations, groups, snapshot.nodes, excluded, self.ledger
            )
        except (PlacementError, CapacityError):
            return False
        within = spec.required_topology_level
        queued = QueuedJob(job.key, spec.priority, job.created, demand.demand, demand.excluded, within)
        decision = admit(self.ledger, admission_world(self.ledger, snapshot), queued, reserve=False)
        return isinstance(decision, Admitted)

    def for_provision(self, job: Job, world: World) -> World:
        """`world` with what provisioning reads: the indexes, whether KubeRay is installed, and what the job's
        Workload admitter reads."""
        served = self.kube.rayjob_served() if job.entrypoint else self.kube.raycluster_served()
        objects = None
        wanted = admitter.queue_objects_wanted(job.labels)
        if wanted is not None:
            objects = self._queue_objects(job, *wanted)
        return dataclasses.replace(
            world, snapshot=self.snapshot, kuberay_served=served, queue_objects=objects, settings=self.settings
        )

    def _queue_objects(self, job: Job, queue: str, priority_class: str | None) -> admitter.QueueObjects:
        if not self.kube.workloads_served():
            return admitter.QueueObjects(served=False)
        local = self.kube.get_localqueue(job.namespace, queue)
        cluster_queue = (local or {}).get("spec", {}).get("clusterQueue")
        return admitter.QueueObjects(
            served=True,
            workloads=tuple(w for w in self.kube.job_workloads(job.namespace, job.name) if owned(w, job.uid)),
            local_queue=local,
            cluster_queue=self.kube.get_clusterqueue(cluster_queue) if cluster_queue else None,
            priority_class=self.kube.get_workload_priority_class(priority_class) if priority_class else None,
        )

    def world(self, job: Job, queue: Decision | None = None, fresh: bool = False) -> World:
        now = dt.datetime.now(dt.UTC)
        bounds = self.settings.start_bounds
        if not holds_nodes(job.status):
            # A waiting job's RayJob, if one is left (a restart's previous attempt): from the index, no API read.
            left = one(self.indexes, RAYJOB_INDEX, job.key) if job.entrypoint else None
            left = left if owned(left, job.uid) else None
            return World(now=now, rayjob=left, child_known=False, queue=queue, start_bounds=bounds)
        key = job.key
        store = self.indexes[JOB_PODS_INDEX].get(key)
        pods = [p for p in (list(store) if store is not None else []) if isinstance(p, Mapping)]
        if job.entrypoint:
            rayjob = one(self.indexes, RAYJOB_INDEX, key)
            if rayjob is None or fresh:
                rayjob = self.kube.get_rayjob(job.namespace, rayjob_name(job.name))  # the index may lag an apply
            rayjob = rayjob if owned(rayjob, job.uid) else None
            return self._driver_world(job, now, rayjob, pods)
        cluster = one(self.indexes, RAYCLUSTER_INDEX, key)
        if cluster is None or fresh:
            cluster = self.kube.get_raycluster(job.namespace, raycluster_name(job.name))
        cluster = cluster if owned(cluster, job.uid) else None
        if cluster is None or cluster_ready(job.status, cluster, pods) is None:
            return World(now=now, raycluster=cluster, pods=pods, start_bounds=bounds)
        events = job_events(
            self.events(job.namespace), job, cluster["metadata"]["name"], pods, admitted_since(job.status)
        )
        return World(
            now=now,
            raycluster=cluster,
            pods=pods,
            events=events,
            plan=self._plan_if_not_started(job, pods, now),
            start_bounds=bounds,
        )

    def _plan(self, job: Job) -> Plan | None:
        configmap = self.kube.get_configmap(job.namespace, placement_configmap_name(job.name))
        try:
            return None if configmap is None else plan_from_configmap(configmap)
        except PlacementError:
            return None

    def _plan_if_not_started(self, job: Job, pods: Sequence[Mapping[str, Any]], now: dt.datetime) -> Plan | None:
        """The job's plan when a pod of it waits to start (its diagnosis names the processes on that pod)."""
        return self._plan(job) if pods_not_started(pods, now, self.settings.start_bounds) else None

    def _job_nodes(self, job: Job, pods: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
        names = {(p.get("spec") or {}).get("nodeName") for p in pods} - {None, ""}
        names |= {n for c in (job.status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}
        nodes = {}
        for name in sorted(names):
            node = self.kube.get_node(name)
            if node is not None:
                nodes[name] = node
        return nodes

    def _driver_world(self, job: Job, now: dt.datetime, rayjob: Mapping[str, Any] | None, pods: list) -> World:
        bounds = self.settings.start_bounds
        if rayjob is None:
            return World(now=now, rayjob=None, pods=pods, start_bounds=bounds)
        state = driver_state(rayjob)
        status = rayjob.get("status") or {}
        cluster = status.get("rayClusterName")
        started = (status.get("rayJobInfo") or {}).get("startTime")
        restarted = bool(started and job.status.get("driverStartTime") and started != job.status.get("driverStartTime"))
        failed_now = state.finished and job.status.get("phase") not in (JobPhase.SUCCEEDED, JobPhase.FAILED)
        events: list[Mapping[str, Any]] = []
        if not state.started or failed_now or restarted:
            events = job_events(self.events(job.namespace), job, cluster, pods, admitted_since(job.status))
        nodes: dict[str, Mapping[str, Any]] = {}
        plan, tail = None, ""
        if (failed_now and state.phase is JobPhase.FAILED) or restarted:
            nodes, plan = self._job_nodes(job, pods), self._plan(job)
        elif not state.started:
            plan = self._plan_if_not_started(job, pods, now)
        elif not state.finished and has_replace(job.spec):
            # Which ranks a lost pod held, whether they may be replaced while the job runs (replicas.py), and
            # whether their node is gone for good (relocate.py).
            plan = self._plan(job)
            lost = pod_problems(job.status, cluster, pods).workers
            nodes = {name: node for name in lost if (node := self.kube.get_node(name)) is not None}
        if failed_now and state.phase is JobPhase.FAILED:
            tail = self._log_tail(job, rayjob)
        verified = any(c.get("type") == cond.BINDING_VERIFIED for c in job.status.get("conditions") or [])
        awaited = replaced_unverified(job.status)
        report = None
        if awaited and state.started and not state.finished and not restarted:
            # The replaced ranks are verified by the first report the driver printed after it started them.
            report = find_report_after(self._log_tail(job, rayjob), awaited)
        elif state.started and (not verified or restarted):
            report = self._report(job, rayjob, state, now)
        elif state.started and not state.finished and draining(job.status):
            # A resize took ranks away: the driver's report printed once it stopped them (resize.py).
            report = find_report(self._log_tail(job, rayjob))
        return World(
            now=now,
            rayjob=rayjob,
            pods=pods,
            events=events,
            nodes=nodes,
            plan=plan,
            driver_log_tail=tail,
            report=report,
            start_bounds=bounds,
        )

    def _log_heads(self, job: Job, rayjob: Mapping[str, Any]) -> Iterable[str]:
        """The heads of the driver's logs where a report is looked for: every submitter pod, newest first, and
        KubeRay's status message (which quotes the end of a failed driver's log) last; while the driver runs, only
        the newest pod (after a restart the pods before it hold the previous attempt's report, and the new
        attempt must verify its own).

        KubeRay's submitter Job retries a pod that exits non-zero, so when a driver fails the newest pod is often a
        retry that has not started (or only started following the log) while the pod before it printed the run."""
        selector = driver_log_selector(
            job.name, job.submission_mode, (rayjob.get("status") or {}).get("rayClusterName")
        )
        running = not driver_state(rayjob).finished
        if selector is None:
            return ()
        heads = self.kube.container_log_heads(job.namespace, selector, SUBMITTER_CONTAINER, REPORT_LOG_BYTES, running)
        message = "" if running else (rayjob.get("status") or {}).get("message") or ""
        return itertools.chain(heads, [message] if message else [])

    def _log_tail(self, job: Job, rayjob: Mapping[str, Any]) -> str:
        """The end of the driver's log (what a failed driver printed last), '' when there is none."""
        selector = driver_log_selector(
            job.name, job.submission_mode, (rayjob.get("status") or {}).get("rayClusterName")
        )
        return (
            ""
            if selector is None
            else self.kube.container_log_tail(job.namespace, selector, SUBMITTER_CONTAINER, DRIVER_LOG_TAIL_LINES)
        )

    def _report(
        self, job: Job, rayjob: Mapping[str, Any], state: DriverState, now: dt.datetime
    ) -> BindingReport | None:
        """The binding report of the driver's attempt, as its framework finds it in the driver's log (for a
        framework that reads the plan, final once the driver ended or the bound on its workers' start,
        --pod-start-timeout from the driver's start, passed), checked against the GPUs the job claims."""
        framework = job.framework
        plan = None
        if framework.reads_plan_for_report():
            plan = self._plan(job)
            if plan is None:
                return None
        started = cond.parse_time(job.status.get("driverStartTime"))
        bound_passed = started is not None and now - started > self.settings.start_bounds.timeout
        # A driver that failed is named by its failure (an image without the framework, a lost pod), not by the
        # workers it never started; one that succeeded without starting them did not run as planned.
        final = state.phase is JobPhase.SUCCEEDED if state.finished else bound_passed
        report = framework.binding_report(plan, self._log_heads(job, rayjob), final)  # type: ignore[arg-type]
        claimed = {c["node"]: c.get("hostGpus") or [] for c in job.status.get("gpuClaims") or []}
        return None if report is None else with_claims_checked(report, claimed)
