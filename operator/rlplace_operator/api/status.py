"""The RLJob status: what the operator observed and decided, written by one writer (docs/operator.md)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from rlplace_operator.api.base import CamelModel
from rlplace_operator.api.conditions import Condition
from rlplace_operator.api.rljob import AppliedPlacementEntry


class JobPhase(enum.StrEnum):
    PENDING = "Pending"
    QUEUED = "Queued"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: Phases in which a job's RayCluster exists and holds its planned nodes.
LIVE_PHASES = frozenset({JobPhase.PROVISIONING, JobPhase.RUNNING})


def is_live(status: Mapping[str, Any]) -> bool:
    """Whether a job (by its status on the wire) runs: its RayCluster exists and holds the planned nodes."""
    return status.get("phase") in LIVE_PHASES and bool(status.get("rayCluster"))


def holds_nodes(status: Mapping[str, Any]) -> bool:
    """Whether the job was admitted and its RayCluster or RayJob was made (phase Provisioning or Running): it holds
    its nodes from then on, also before KubeRay has made the RayJob's RayCluster."""
    return status.get("phase") in LIVE_PHASES and bool(status.get("rayCluster") or status.get("rayJob"))


class ComponentSummary(CamelModel):
    """Where one component runs."""

    name: str
    """Component name."""
    processes: int
    """Number of processes."""
    gpus: int
    """Distinct GPUs (hardware units) it uses."""
    nodes: list[str]
    """Kubernetes nodes it runs on."""


class ResolvedPlacement(CamelModel):
    """The placement the operator applied."""

    mode: str
    """collocated, disaggregated, hybrid or auto."""
    components: list[ComponentSummary] = []
    """Per component: processes, GPUs, nodes."""


class ComponentBinding(CamelModel):
    """How many of a component's processes checked, from inside, that they run as planned."""

    name: str
    """Component name."""
    verified: int
    """Processes whose environment, node and GPUs matched their plan entry."""
    processes: int
    """Processes the driver launched."""


class ObservedProcesses(CamelModel):
    """The processes of a component on one node and the GPU ids Ray gave each (observed, not enforced)."""

    component: str
    """Component name."""
    node: str
    """Kubernetes node name."""
    ranks: list[int]
    """The plan's ranks of the component's processes on the node, each matched to a process seen there (in the
    framework's rank order)."""
    gpus: list[str]
    """Per process (in the order of ranks): its GPU ids, comma-separated."""


class Restart(CamelModel):
    """One restart of the job: its driver submitted again, or its Ray cluster given back and queued again."""

    attempt: int
    """The attempt that this restart began (2: the first restart)."""
    time: str
    """When the operator saw it (RFC 3339)."""
    reason: str
    """Why, as a CamelCase reason (HeadPodReplaced, DriverResubmitted, ImagePullFailed, BindTimeout, ...)."""
    message: str
    """What happened, in one line."""
    nodes_replaced: list[str] = []
    """Nodes the job gave up for this restart (left out of its next attempts), when a node was at fault."""
    in_place: bool = False
    """KubeRay ran the driver again within the same RayJob (a new head pod, its submitter retried): the operator
    made no new RayJob for this attempt."""


class ExcludedNode(CamelModel):
    """A node left out of the job's attempts (until its spec changes) because it failed the job."""

    name: str
    """Kubernetes node name."""
    reason: str
    """Why, in one line (NotReady, unreachable, evicted, gone)."""


class GpuClaim(CamelModel):
    """The GPUs of one node a job's worker pod claims through DRA (a NodeGroup with gpuAllocation: dra)."""

    node: str
    """Kubernetes node name."""
    devices: list[str]
    """The claimed devices, by the driver's device names (gpu-4, ...), in the node's GPU order."""
    host_gpus: list[int]
    """Their positions among the node's GPUs (the host's GPU numbers, PCI order)."""
    template: str
    """The ResourceClaimTemplate the worker pod's claim is made from."""


#: Restarts kept in status (the oldest go first): the status stays small however often a job restarts.
MAX_RESTARTS_KEPT = 10


class ComponentSeconds(CamelModel):
    """One component's busy seconds per iteration."""

    name: str
    """Component name, as the driver timed it."""
    seconds: float
    """Median seconds the component was busy per iteration, over the last reported iterations."""


class Progress(CamelModel):
    """Step times the job's driver reported (docs/progress.md): the medians of its last reported iterations."""

    iteration: int
    """The latest iteration reported."""
    iteration_seconds: float
    """Median wall-clock seconds per iteration."""
    components: list[ComponentSeconds] = []
    """Per component: median busy seconds per iteration, in the order the driver timed them."""
    bottleneck: str | None = None
    """The component with the largest median busy seconds."""
    weight_sync_seconds: float | None = None
    """Seconds of the latest iteration's weight sync, when the driver timed it."""
    checkpoint_step: int | None = None
    """The step of the newest checkpoint the driver reported (a new attempt resumes after it), when it has one."""
    slowest_iteration: int | None = None
    """The slowest iteration of the reported window: a dip (a replica lost during it, docs/replace.md) shows here
    while the median stays steady."""
    slowest_iteration_seconds: float | None = None
    """Its wall-clock seconds."""
    updated_at: str
    """When the latest reported iteration ended (RFC 3339)."""


class Recommendation(CamelModel):
    """The placement auto placement finds for the collocated profile derived from status.progress (docs/autoplace.md)."""

    component_placement: list[AppliedPlacementEntry]
    """The recommended componentPlacement."""
    mode: str
    """collocated or disaggregated."""
    predicted_iteration_seconds: float
    """Its predicted seconds per iteration."""
    current_predicted_seconds: float
    """The current placement's predicted seconds per iteration, under the same model and profile (never below
    the observed time: what the model does not price is added to it)."""
    observed_iteration_seconds: float
    """The measured median seconds per iteration (status.progress)."""
    gain: float
    """1 - predicted / observed: the fraction of the observed iteration time it is predicted to save."""
    iteration: int
    """The reported iteration it was computed from."""
    streak: int = 0
    """Reports in a row whose recommendation promised minGain or more (Auto needs 3); while profiling, the
    reported iterations of the profiling run."""
    profiling: bool = False
    """Computed from the collocated profiling run (autoPlacement.profileFirst) while it lasts: until 3 iterations
    are measured, and with apply Auto until the job is re-placed."""
    decision: str
    """Keep, ApplyNow (re-placed at the next iteration report) or AtRestart."""
    reason: str
    """Why, in one line."""
    since: str
    """When this placement was first recommended (RFC 3339)."""
    updated_at: str
    """When it was last computed (RFC 3339)."""


class Replacement(CamelModel):
    """One re-placement of a running job from its recommendation."""

    time: str
    """When it was applied (RFC 3339)."""
    iteration: int
    """The reported iteration at which it was applied (the boundary)."""
    previous: list[AppliedPlacementEntry]
    """The componentPlacement it replaced."""
    component_placement: list[AppliedPlacementEntry]
    """The componentPlacement applied."""
    predicted_iteration_seconds: float
    """Predicted seconds per iteration of the new placement."""
    observed_iteration_seconds: float
    """Measured seconds per iteration before it."""


#: Re-placements kept in status (the oldest go first).
MAX_REPLACEMENTS_KEPT = 10


class KueueAdmission(CamelModel):
    """How Kueue admitted a job that names a LocalQueue (label kueue.x-k8s.io/queue-name; docs/kueue.md)."""

    workload: str
    """The Workload rlplace made for the job (owned by it)."""
    cluster_queue: str | None = None
    """The ClusterQueue whose quota admitted it."""
    flavors: dict[str, str] = {}
    """NodeGroup -> the ResourceFlavor its nodes were granted from."""
    pods_ready: bool | None = None
    """rlplace told the Workload that every pod of the job runs (its PodsReady condition)."""


class Preemption(CamelModel):
    """Kueue evicted the running job: rlplace asks its driver to checkpoint, then stops it and queues it again."""

    reason: str
    """Kueue's reason (Preempted, PodsReadyTimeout, Deactivated, ...)."""
    message: str = ""
    """Kueue's message."""
    since: str
    """When rlplace saw the eviction (RFC 3339): the checkpoint grace counts from here."""
    checkpoint_step: int | None = None
    """The driver's newest checkpoint then (status.progress.checkpointStep): a newer one ends the grace."""


class LostRanks(CamelModel):
    """Ranks of a Replace component whose pod is lost, while they are replaced."""

    node: str
    """The node they were planned on."""
    ranks: list[int]
    """The component's ranks on it."""
    since: str
    """When the loss was first seen (RFC 3339)."""
    why: str
    """What the API shows of their pod (deleted, Pending and why, its node NotReady)."""
    pod: str | None = None
    """The uid of the pod they ran in when they were seen lost, if it was still there (a pod that comes back Ready,
    its node NotReady for a while, kept its processes: nothing was replaced)."""


class ComponentReplicas(CamelModel):
    """A component of a job with Replace components (spec.components[].onLoss): how many of its ranks run."""

    name: str
    """Component name."""
    on_loss: str
    """RestartJob or Replace."""
    desired: int
    """Ranks the plan has."""
    live: int
    """Ranks whose pod runs and is Ready on its planned node."""
    replaced: int | None = None
    """Ranks started again while the job ran, for the current spec."""
    lost: list[LostRanks] | None = None
    """Ranks lost now, by node: the job runs on without them until they are replaced."""
    unverified: list[int] | None = None
    """Ranks replaced or added whose binding the driver has not reported yet (BindingVerified waits for them)."""
    starting: list[LostRanks] | None = None
    """Ranks a change of the component's replicas added on a node whose worker pod does not run yet, by node
    (docs/elastic.md): not lost, they never ran; once the pod is Ready they wait for the driver's binding report."""


class Resize(CamelModel):
    """A change of a component's replicas the elastic loop made (docs/elastic.md, "The loop")."""

    time: str
    """When it was made (RFC 3339)."""
    iteration: int
    """The iteration reported when it was made."""
    component: str
    """Component name."""
    previous: int
    """Replicas before."""
    replicas: int
    """Replicas after."""
    reason: str
    """Grow (the bottleneck), Shrink (an idle component), Undo (a change that did not keep its promise) or Yield
    (replicas above the minimum given up to a job of higher priority waiting for their NodeGroup)."""
    observed_iteration_seconds: float
    """The median iteration time reported before the change."""
    predicted_iteration_seconds: float
    """The iteration time the change promised."""
    kept: bool | None = None
    """Judged after the cooldown on the iterations reported since: True when it kept its promise, False when it
    was undone; unset until then."""
    observed_after_seconds: float | None = None
    """The median iteration time it was judged on."""


class RLJobStatus(CamelModel):
    """What the operator did with the job."""

    phase: JobPhase | None = None
    """Pending, Queued, Provisioning, Running, Suspended, Succeeded or Failed."""
    message: str | None = None
    """Why the job is Pending, Queued or Failed, why a change to a running job was not applied, or how its
    driver ended."""
    queue_position: int | None = None
    """Place in the queue of jobs waiting for free nodes (1: the next to start), while Queued."""
    waiting_for: str | None = None
    """What a Queued job waits for, e.g. `1 free node of 4090`."""
    conditions: list[Condition] = []
    """Validated, Placed, Admitted, RayClusterReady, NodeGroupChanged, StatusWritten; with an entrypoint also
    DriverSucceeded and BindingVerified."""
    placement: ResolvedPlacement | None = None
    """The resolved placement."""
    applied_placement: list[AppliedPlacementEntry] = []
    """The componentPlacement actually applied (the search result with autoPlacement)."""
    predicted_iteration_time: float | None = None
    """Predicted seconds per iteration of the applied placement (auto placement)."""
    gpus: int | None = None
    """GPUs the job uses."""
    nodes: int | None = None
    """Nodes the job uses."""
    gpu_claims: list[GpuClaim] = []
    """On nodes of NodeGroups with gpuAllocation dra: the exact GPUs each worker pod claims."""
    ray_cluster: str | None = None
    """Name of the RayCluster."""
    ray_job: str | None = None
    """Name of the RayJob that runs the entrypoint."""
    driver_log: str | None = None
    """The command that prints the driver's log."""
    driver_start_time: str | None = None
    """When the driver started (RFC 3339)."""
    driver_end_time: str | None = None
    """When the driver ended (RFC 3339)."""
    binding: list[ComponentBinding] = []
    """Per component: processes that verified their own placement from inside, as the driver reported."""
    observed_placement: list[ObservedProcesses] = []
    """A framework job whose GPU ids Ray assigns (framework verl): what each process got, per component and
    node, as observed (not enforced)."""
    attempts: int | None = None
    """Driver submissions of the current spec: 1 once the driver started, +1 each time KubeRay submits it again
    (a lost head pod, a retried driver)."""
    restarts: list[Restart] = []
    """The last few restarts, oldest first: driver resubmissions and provisioning retries, with their reason."""
    restart_count: int | None = None
    """Restarts of the driver for the current spec (attempts - 1): rlplace's restarts under run.restartPolicy
    and KubeRay's resubmissions; compared with run.maxRestarts."""
    excluded_nodes: list[ExcludedNode] = []
    """Nodes unusable for this job (they failed one of its attempts): never planned for it again until its
    spec changes."""
    provisioning_retries: int | None = None
    """How often the job gave its nodes back after a provisioning failure that may pass (backoff doubles)."""
    retry_after: str | None = None
    """A Queued job after a provisioning failure is not admitted before this time (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation this status describes."""
    progress: Progress | None = None
    """Step times the driver reports while it runs (written by the operator's progress endpoint, at most every
    5 s)."""
    recommendation: Recommendation | None = None
    """The placement recommended from status.progress, its predicted and observed iteration times and gain."""
    replacements: list[Replacement] = []
    """Re-placements from recommendations for the current spec, oldest first (the last one is what the job
    runs)."""
    resizes: list[Resize] = []
    """The elastic loop's last changes of replicas, oldest first (at most 10), each with what it promised and
    whether it kept it."""
    components: list[ComponentReplicas] = []
    """For a job with Replace components: each component's desired and live ranks, the ranks replaced while the
    job ran and those lost now (docs/replace.md)."""
    kueue: KueueAdmission | None = None
    """How Kueue admitted the job (a job that names a LocalQueue)."""
    preemption: Preemption | None = None
    """Kueue's eviction being carried out: the checkpoint asked for, the job's Ray pods stopping."""
    preemptions: int | None = None
    """How often Kueue moved the job for its current spec: preempted it, or replaced one of its nodes (not
    counted against run.maxRestarts)."""
