"""The snapshot a reconcile decides on: the job as observed (`Job`) and what exists around it (`World`).

Wire-form dicts as the API returns them, and the operator's typed copies of what its indexes hold: `decide` and
`provision` read nothing else, so each decision is a pure function of a World (a recorded snapshot in a test).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement_core.cluster import Cluster
from placement_core.observe.verify import BindingReport
from placement_core.plan import Plan
from rlplace_operator.admission import admitter
from rlplace_operator.admission.rules import Decision
from rlplace_operator.api.conditions import ADMITTED, find, parse_time
from rlplace_operator.api.names import API_VERSION, JobKey
from rlplace_operator.api.rljob import OnBindingMismatch, SubmissionMode
from rlplace_operator.cluster.snapshot import Snapshot
from rlplace_operator.diagnosis.causes import StartBounds
from rlplace_operator.frameworks import framework_named
from rlplace_operator.frameworks.base import Framework


@dataclass(frozen=True)
class Settings:
    """The operator's settings a reconcile reads (from its command line, made once at start-up)."""

    start_bounds: StartBounds = field(default_factory=StartBounds)
    """How long a job's pods may take to start (--pod-start-grace and --pod-start-timeout)."""
    progress_url: str | None = None
    """Base URL at which a job's pods reach the operator's progress endpoint (None: not served)."""


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
    #: The RLJob's labels: its children carry them (a gang scheduler's labels reach the RayCluster).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The update handler saw the rlplace.io/profile annotation change (a re-plan, as a spec change).
    profile_changed: bool = False
    #: Read from the API just now (a handler's body, a GET), not from an index that may lag behind writes.
    fresh: bool = False

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.name)

    @property
    def entrypoint(self) -> bool:
        return bool(self.spec.get("entrypoint"))

    @property
    def framework(self) -> Framework:
        return framework_named(self.spec.get("framework"))

    @property
    def by_workload(self) -> bool:
        """A Workload holds the job's admission (its labels name a LocalQueue), not rlplace's own queue."""
        return admitter.by_workload(self.labels)

    @property
    def on_binding_mismatch(self) -> OnBindingMismatch:
        return OnBindingMismatch(self.spec.get("onBindingMismatch") or OnBindingMismatch.FAIL)

    @property
    def submission_mode(self) -> SubmissionMode:
        run = self.spec.get("run") or {}
        return SubmissionMode(run.get("submissionMode") or SubmissionMode.K8S_JOB)

    def body(self, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The job as an owner of its children: apiVersion, kind and the metadata they copy (`labels`: the labels
        they carry, by default all of the job's)."""
        metadata = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "creationTimestamp": self.created,
            "annotations": dict(self.annotations),
            "labels": dict(self.labels if labels is None else labels),
        }
        return {"apiVersion": API_VERSION, "kind": "RLJob", "metadata": metadata}


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
    start_bounds: StartBounds = field(default_factory=StartBounds)
    """How long the job's pods may take to start (the operator's --pod-start-grace and --pod-start-timeout)."""
    driver_log_tail: str = ""
    """The end of the driver's log (read only when it failed)."""
    report: BindingReport | None = None
    """The binding report of the current attempt, if read and found."""
    queue: Decision | None = None
    """What this queue pass decided for a waiting job whose demand is known (None: not decided here)."""
    cluster: Cluster | None = None
    """The running job's nodes as placement_core sees them, when its recommendation is due (recommend.py)."""
    workload: admitter.WorkloadState | None = None
    """The job's Workload as its admitter left it (a job admitted by a Workload, once rlplace made it)."""
    queue_found: bool = True
    """Whether the LocalQueue a job admitted by a Workload names exists (read with its Workload)."""
    room: Callable[[int, int, int], int] | None = None
    """For a running job whose elastic loop is on: room(index, now, wanted) is the most replicas from `now` (what
    it runs) to `wanted` that spec.components[index] could run now, as rlplace's queue would admit them (jobs ahead
    of it first; nothing is reserved by asking). None: not read (any count is taken as placeable)."""
    waiting_above: Mapping[str, str] = field(default_factory=dict)
    """For a running job whose elastic loop is on: each of its NodeGroups that shares a node with a NodeGroup a job
    of higher priority is queued for by rlplace's queue -> that job (`job NAMESPACE/NAME of priority P`)."""
    # -- read only for a job being provisioned (Observer.for_provision) --
    snapshot: Snapshot | None = None
    """The operator's indexes at this moment: NodeGroups, nodes, what other jobs hold."""
    kuberay_served: bool = True
    """Whether the API serves KubeRay's RayCluster (or, with an entrypoint, RayJob) kind."""
    queue_objects: admitter.QueueObjects | None = None
    """What the job's Workload admitter reads (its LocalQueue, ClusterQueue, Workloads)."""
    settings: Settings = field(default_factory=Settings)


def job_of(key: JobKey, entry: Mapping[str, Any], profile_changed: bool = False, fresh: bool = False) -> Job:
    """The job from its index entry (controllers/indexes.py: rljob_index)."""
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
    """The job from its body as the API returned it."""
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


def owned(child: Mapping[str, Any] | None, uid: str) -> bool:
    """Whether `child` is owned by the object of `uid` (a child of the same name but another job's is not)."""
    refs = (child or {}).get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def admitted_since(status: Mapping[str, Any]) -> dt.datetime | None:
    admitted = find(status.get("conditions"), ADMITTED)
    if admitted is None or admitted.get("status") != "True":
        return None
    return parse_time(admitted.get("lastTransitionTime"))
