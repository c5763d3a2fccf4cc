"""The RLJob spec: its node groups, component placement, auto placement, the Ray cluster that runs it and how its
driver runs.
"""

from __future__ import annotations

import enum
import hashlib
import json
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from placement_core.autoplace.cost import CostModel
from placement_core.autoplace.observed import Apply
from placement_core.plan import OnLoss
from rlplace_operator.api.base import CamelModel, cel
from rlplace_operator.api.podspec import (
    LABEL_KEY_PATTERN,
    PLAN_MOUNT_PATH,
    SHM_MOUNT_PATH,
    PodSettings,
    Volume,
    mount_path_allowed,
)

#: Component key of `cluster.component_placement`: names separated by commas (`actor,rollout`).
COMPONENTS_PATTERN = r"^\s*[A-Za-z0-9_.-]+(\s*,\s*[A-Za-z0-9_.-]+)*\s*$"
#: One placement part: `all`, `N` or `N-M`, optionally `:N` or `:N-M` (docs/placement.md, the grammar).
_RANGE = r"[0-9]+(\s*-\s*[0-9]+)?"
_PART = rf"\s*([aA][lL][lL]|{_RANGE})\s*(:\s*{_RANGE}\s*)?"
PLACEMENT_PATTERN = rf"^{_PART}(,({_PART})?)*$"
LABELS_PATTERN = r"^\s*[A-Za-z0-9_.-]+(\s*,\s*[A-Za-z0-9_.-]+)*\s*$"
#: Longest driver command (spec.entrypoint): it is copied into the RayJob and its submitter's command line.
MAX_ENTRYPOINT_CHARS = 65536


class PlacementEntry(CamelModel):
    """One key of cluster.component_placement: the components that share a strategy, and where they go."""

    components: Annotated[
        str,
        Field(
            pattern=COMPONENTS_PATTERN,
            max_length=253,
            json_schema_extra=cel(
                f"self.matches(r'{COMPONENTS_PATTERN}')",
                "components must be component names separated by commas, for example actor,rollout",
            ),
        ),
    ]
    """Component names separated by commas, e.g. `actor,rollout`; they share one placement."""
    placement: Annotated[
        str,
        Field(
            pattern=PLACEMENT_PATTERN,
            max_length=1024,
            json_schema_extra=cel(
                f"self.matches(r'{PLACEMENT_PATTERN}')",
                "placement must be parts R[:P] separated by commas, where R is all, N or N-M and P is N or N-M "
                "(for example 0-7, all, 0-3:0-7)",
            ),
        ),
    ]
    """Resource ranks and optional process ranks: parts `R[:P]` separated by commas, where R is `all`, `N` or
    `N-M` and P is `N` or `N-M` (e.g. `0-7`, `all`, `0-3:0-7`, `0-1:0-3,3-5`)."""
    node_group: Annotated[
        str | None,
        Field(
            pattern=LABELS_PATTERN,
            max_length=253,
            json_schema_extra=cel(
                f"self.matches(r'{LABELS_PATTERN}')",
                "nodeGroup must be NodeGroup names separated by commas, for example a800,4090",
            ),
        ),
    ] = None
    """NodeGroups the ranks count over, comma-separated, in order (default: all of the job's node groups)."""


#: One component name (as componentPlacement's keys list them).
COMPONENT_NAME_PATTERN = r"^[A-Za-z0-9_.-]+$"


REPLICAS_NEED_REPLACE_MESSAGE = (
    "replicas, minReplicas and maxReplicas need onLoss Replace: only independent replicas can be added or removed "
    "while the job runs"
)
MIN_ABOVE_MAX_MESSAGE = "minReplicas must be at most maxReplicas"
REPLICAS_OUT_OF_RANGE_MESSAGE = "replicas must be within minReplicas..maxReplicas"
_REPLICA_FIELDS = ("replicas", "minReplicas", "maxReplicas")


class ComponentSettings(
    CamelModel,
    json_schema_extra=cel(
        " && ".join(f"!has(self.{f})" for f in _REPLICA_FIELDS) + " || (has(self.onLoss) && self.onLoss == 'Replace')",
        REPLICAS_NEED_REPLACE_MESSAGE,
        (
            "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            MIN_ABOVE_MAX_MESSAGE,
        ),
        (
            "!has(self.replicas) || ((!has(self.minReplicas) || self.replicas >= self.minReplicas) && "
            "(!has(self.maxReplicas) || self.replicas <= self.maxReplicas))",
            REPLICAS_OUT_OF_RANGE_MESSAGE,
        ),
    ),
):
    """How the job treats one of its components beyond where it runs (docs/replace.md, docs/elastic.md)."""

    name: Annotated[str, Field(pattern=COMPONENT_NAME_PATTERN, max_length=253)]
    """The component, as componentPlacement names it (`rollout`)."""
    on_loss: OnLoss = OnLoss.RESTART_JOB
    """What losing one of its processes (its pod deleted or evicted, its node lost, its container killed) does.
    RestartJob: the whole job restarts from its last checkpoint (a trainer, whose ranks hold one state). Replace:
    the job keeps running; the lost ranks are started again on the same node once it is back, or on a healthy node
    of the same NodeGroup, and the driver goes on with the live replicas meanwhile (replicas independent from one
    iteration to the next: rollout, env, reward). Replace needs ranks of their own (no GPU shared with a
    RestartJob component, no tensor or pipeline parallelism, not the trainer) and a driver that takes replacements
    (rlplace's launcher with replace_lost; docs/driver.md); framework jobs (rlinf, verl) cannot."""
    replicas: int | None = Field(None, ge=1, le=100_000)
    """How many replicas of the component run, in units of its placement (one process and its GPUs, or one GPU and
    the processes that share it): the first as componentPlacement places them, more continuing its last part over
    the next resources of its NodeGroups, fewer dropping the last (docs/elastic.md). Unset: as componentPlacement
    places. Needs onLoss Replace and a placement of the component's own."""
    min_replicas: int | None = Field(None, ge=1, le=100_000)
    """The fewest replicas the component may run (the elastic range's floor)."""
    max_replicas: int | None = Field(None, ge=1, le=100_000)
    """The most replicas the component may run; checked at admission against its NodeGroups' resources."""

    @model_validator(mode="after")
    def _replicas_in_range(self) -> ComponentSettings:
        fields = (self.replicas, self.min_replicas, self.max_replicas)
        if any(f is not None for f in fields) and self.on_loss is not OnLoss.REPLACE:
            raise ValueError(REPLICAS_NEED_REPLACE_MESSAGE)
        if self.min_replicas is not None and self.max_replicas is not None and self.min_replicas > self.max_replicas:
            raise ValueError(MIN_ABOVE_MAX_MESSAGE)
        if self.replicas is not None and not (
            (self.min_replicas or 1) <= self.replicas <= (self.max_replicas or self.replicas)
        ):
            raise ValueError(REPLICAS_OUT_OF_RANGE_MESSAGE)
        return self


class AppliedPlacementEntry(CamelModel):
    """One key of the component placement the operator applied (written by the operator, so no CEL rules:
    their cost would count against the CRD's validation budget for nothing)."""

    components: str
    """Component names separated by commas."""
    placement: str
    """Resource ranks and optional process ranks."""
    node_group: str | None = None
    """NodeGroups the ranks count over."""


class PlacementMode(enum.StrEnum):
    HYBRID = "hybrid"
    MODEL_PARALLEL = "modelParallel"


class ModelParallel(CamelModel):
    """Model-parallel sizes (docs/placement.md, "Modes"); every size defaults to 1."""

    actor_tensor_parallel_size: int = Field(1, ge=1)
    """actor.model.tensor_model_parallel_size."""
    actor_context_parallel_size: int = Field(1, ge=1)
    """actor.model.context_parallel_size (multiplies the actor's model-parallel size: tp*cp*pp)."""
    actor_pipeline_parallel_size: int = Field(1, ge=1)
    """actor.model.pipeline_model_parallel_size."""
    rollout_tensor_parallel_size: int = Field(1, ge=1)
    """rollout.tensor_parallel_size."""
    rollout_pipeline_parallel_size: int = Field(1, ge=1)
    """rollout.pipeline_parallel_size."""
    inference_tensor_parallel_size: int | None = Field(None, ge=1)
    """inference.model.tensor_model_parallel_size (default: the actor's)."""
    inference_pipeline_parallel_size: int | None = Field(None, ge=1)
    """inference.model.pipeline_model_parallel_size (default: the actor's)."""


class Algorithm(CamelModel):
    """Algorithm settings that placement and auto placement read."""

    recompute_logprobs: bool = True
    """algorithm.recompute_logprobs: a dedicated inference component recomputes log-probs."""
    group_size: int = Field(1, ge=1)
    """algorithm.group_size (responses per prompt)."""
    n_minibatches: int = Field(1, ge=1)
    """algorithm.n_minibatches."""
    rollout_batch_size: int = Field(1, ge=1)
    """data.rollout_batch_size."""
    max_running_requests: int = Field(64, ge=1)
    """rollout.max_running_requests."""


class SyncBandwidth(CamelModel):
    """GB/s per link of the actor -> rollout weight sync and of each component's collectives (defaults in
    docs/autoplace.md)."""

    same_node: float | None = Field(None, gt=0)
    """Inside a node (collocated, or both on one node)."""
    across_nodes: float | None = Field(None, gt=0)
    """Between nodes of one NodeGroup."""
    across_groups: float | None = Field(None, gt=0)
    """Between NodeGroups."""
    same_rack: float | None = Field(None, gt=0)
    """Between nodes of one rack (the narrowest network level of the NodeGroups; used instead of acrossNodes and
    acrossGroups where the nodes' levels are known)."""
    same_block: float | None = Field(None, gt=0)
    """Between racks of one block (a wider level)."""
    across_blocks: float | None = Field(None, gt=0)
    """Between blocks (the widest level crossed)."""


# Keys are GPU type names; no constraint on them, since a CRD's structural schema has no propertyNames.
_TypeCosts = Annotated[dict[str, Annotated[float, Field(gt=0)]], Field(min_length=1, max_length=64)]


class Profile(
    CamelModel,
    json_schema_extra=cel(
        "has(self.actorCost) || has(self.actorCostByType)",
        "actorCost or actorCostByType is required",
        ("has(self.rolloutCost) || has(self.rolloutCostByType)", "rolloutCost or rolloutCostByType is required"),
    ),
):
    """Per-iteration costs in seconds, profiled collocated on all GPUs (docs/autoplace.md); over NodeGroups of
    different GPUs also per GPU type, memory per process and the weight sync."""

    actor_cost: float | None = Field(None, gt=0)
    """Seconds per iteration of the actor (training)."""
    inference_cost: float | None = Field(None, gt=0)
    """Seconds per iteration of inference (needed when recomputeLogprobs is true)."""
    rollout_cost: float | None = Field(None, gt=0)
    """Seconds per iteration of rollout (generation)."""
    actor_cost_by_type: _TypeCosts | None = None
    """Seconds per iteration of the actor on each GPU type it was measured on, e.g. {a800: 95.7, "4090": 180.2}."""
    inference_cost_by_type: _TypeCosts | None = None
    """Seconds per iteration of inference per GPU type."""
    rollout_cost_by_type: _TypeCosts | None = None
    """Seconds per iteration of rollout per GPU type."""
    actor_memory_gb: float | None = Field(None, gt=0)
    """GB of GPU memory one actor process needs (never placed on smaller GPUs)."""
    inference_memory_gb: float | None = Field(None, gt=0)
    """GB of GPU memory one inference process needs."""
    rollout_memory_gb: float | None = Field(None, gt=0)
    """GB of GPU memory one rollout process needs."""
    actor_collective_gb: float | None = Field(None, gt=0)
    """GB each actor GPU sends per iteration in the actor's own collectives (a ring all-reduce of S GB of
    gradients: about 2 * S per optimizer step), priced over the slowest link among the actor's nodes; actorCost
    then excludes that time."""
    inference_collective_gb: float | None = Field(None, gt=0)
    """GB each inference GPU sends per iteration in its own collectives."""
    rollout_collective_gb: float | None = Field(None, gt=0)
    """GB each rollout GPU sends per iteration in its own collectives."""
    model_size_gb: float | None = Field(None, gt=0)
    """GB of weights synced from actor to rollout each iteration."""
    sync_bandwidth_gb_s: SyncBandwidth | None = None
    """Bandwidths of the weight sync, overriding the defaults."""
    collocated_offload: bool | None = None
    """Collocated components take turns on the GPUs (offloading), so only the largest must fit."""


class Resources(CamelModel):
    """CPU and memory of a pod."""

    cpu: str = Field("1", pattern=r"^[0-9]+(\.[0-9]+)?m?$")
    """CPU request and limit, e.g. 1 or 500m."""
    memory: str = Field("2Gi", pattern=r"^[0-9]+([KMGTE]i?)?$")
    """Memory request and limit, e.g. 2Gi."""


class RaySpec(CamelModel):
    """The KubeRay RayCluster the job runs in."""

    image: str = Field("rayproject/ray:2.60.0", max_length=1024)
    """Container image of every Ray pod (the head runs the driver, so with an entrypoint it needs rlplace)."""
    worker_image: str | None = Field(None, max_length=1024)
    """Container image of the worker pods (default: `image`). Any Ray image of the same Ray version works,
    one without rlplace too: the launcher ships placement_core to the workers in Ray's runtime_env."""
    ray_version: str = Field("2.60.0", max_length=64)
    """Ray version in the image (RayCluster.spec.rayVersion)."""
    head_resources: Resources = Resources()
    """CPU and memory of the head pod (it never requests or sees a GPU)."""
    worker_resources: Resources = Resources(cpu="4", memory="16Gi")
    """CPU and memory of each worker pod (GPUs are added from the plan). The CPU limit also paces the start of
    the node's processes (each a Python process Ray starts): on the local e2e cluster the reference driver's 12
    processes were up about 10 s after Running with 1 CPU, 27 to 32 s with 500m."""
    service_account_name: str | None = Field(None, max_length=253)
    """Service account of the Ray pods (head and workers) when spec.pods sets none. Deprecated: use
    spec.pods.serviceAccountName, which also covers the submitter."""


class AutoPlacement(CamelModel):
    """Auto placement (docs/autoplace.md): search the placement from a profile, and re-place a running job from
    the step times it reports."""

    enabled: bool = False
    """Search the placement with the shortest predicted iteration time from `profile` (or the rlplace.io/profile
    annotation) instead of using componentPlacement."""
    apply: Apply = Apply.never
    """What to do with status.recommendation (computed from status.progress while the job runs): Never (only
    show it), OnRestart (use it the next time the job is planned again), Auto (re-place the job at the next
    iteration report once the predicted gain is at least minGain)."""
    min_gain: Annotated[float, Field(ge=0, le=1)] = 0.10
    """Least predicted gain (fraction of the iteration time) for a recommendation to be applied."""
    cooldown: Annotated[int, Field(ge=0, le=604800)] = 600
    """Seconds after a re-placement before Auto re-places the job again."""
    cost_model: CostModel = CostModel.scaling
    """The cost model of the search and of the conversion of measured times (scaling or linear)."""
    profile_first: bool = False
    """Profile the job before placing it (seed 000's procedure, automated): it starts collocated, every component
    on all the GPUs it is given (whatever componentPlacement says; with `enabled` no profile is needed), its
    first reported iterations are the profile, and the placement searched from it is recommended; with apply
    Auto the job is then re-placed onto it whatever minGain says, unless it is collocated itself
    (docs/autoplace.md). Not with spec.profile or the rlplace.io/profile annotation (the run measures them)."""


class ElasticLoop(CamelModel):
    """The operator's own changes of elastic components' replicas while the job runs (docs/elastic.md, "The
    loop"): it grows the bottleneck component when the reported step times predict a shorter iteration, gives
    replicas back when a component idles, and undoes a change that did not keep its promise."""

    enabled: bool = False
    """Let the operator change `replicas` of the components that have a range (minReplicas..maxReplicas) itself;
    a user's own change of replicas is applied as it is either way."""
    min_gain: Annotated[float, Field(gt=0, lt=1)] = 0.2
    """Least predicted gain (fraction of the iteration time) for growing the bottleneck component."""
    idle_share: Annotated[float, Field(gt=0, lt=1)] = 0.25
    """A component busy less than this share of the iteration gives replicas back (down to minReplicas), keeping
    its busy time under the share."""
    cooldown: Annotated[int, Field(ge=0, le=86400)] = 60
    """Seconds after a change before the loop judges it and changes again; it also waits for three iterations
    reported on the new replicas."""


class SubmissionMode(enum.StrEnum):
    K8S_JOB = "K8sJobMode"
    SIDECAR = "SidecarMode"


class RestartPolicy(enum.StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"


class FrameworkName(enum.StrEnum):
    """Whose code starts the job's processes (docs/frameworks.md; what rlplace does for each: rlplace_operator.frameworks)."""

    RLPLACE = "rlplace"
    """The entrypoint is a driver written against rlplace's launcher (placement_core.launcher.launch_all)."""
    RLINF = "rlinf"
    """The entrypoint is the user's RLinf program, unchanged: RLinf's own scheduler places the processes."""
    VERL = "verl"
    """The entrypoint is the user's veRL program, unchanged: Ray assigns the GPU ids of veRL's resource pools;
    rlplace provisions the plan's nodes and GPUs and observes what each process got (not enforced)."""


class OnBindingMismatch(enum.StrEnum):
    FAIL = "Fail"
    REPORT = "Report"


#: The frameworks whose own program starts the processes: the job runs it as its entrypoint.
PROGRAM_FRAMEWORKS = (FrameworkName.RLINF, FrameworkName.VERL)
FRAMEWORK_NEEDS_ENTRYPOINT_MESSAGE = (
    f"framework {' or '.join(PROGRAM_FRAMEWORKS)} runs the framework's own program: it needs an entrypoint"
)


#: Default of spec.run.maxRestarts: a few lost nodes in a long run, not a crash loop.
DEFAULT_MAX_RESTARTS = 3
BACKOFF_WITH_RESTARTS_MESSAGE = (
    "run.backoffLimit > 0 needs run.restartPolicy Never: KubeRay's retries rebuild the cluster on the same nodes, "
    "rlplace's restarts re-place it on healthy ones; use one of the two"
)


class RunSpec(
    CamelModel,
    json_schema_extra=cel(
        "!has(self.backoffLimit) || self.backoffLimit == 0 || "
        "(has(self.restartPolicy) && self.restartPolicy == 'Never')",
        BACKOFF_WITH_RESTARTS_MESSAGE,
    ),
):
    """How the driver runs: the settings of the KubeRay RayJob that submits spec.entrypoint."""

    submission_mode: SubmissionMode = SubmissionMode.K8S_JOB
    """K8sJobMode: a Kubernetes Job named after the RLJob runs `ray job submit` and streams the driver's log
    (`kubectl logs job/<name>`); SidecarMode: a container in the head pod does (no extra pod)."""
    shutdown_after_job_finishes: bool = True
    """Delete the RayCluster when the driver ends, freeing its GPUs (the RLJob and its status stay)."""
    ttl_seconds_after_finished: int = Field(60, ge=0)
    """Seconds the RayCluster is kept after the driver ends (to read Ray's own logs) before it is deleted;
    only with shutdownAfterJobFinishes."""
    backoff_limit: int = Field(0, ge=0, le=100)
    """How many times KubeRay retries a failed driver, each time on a new RayCluster on the same nodes (only
    with restartPolicy Never: rlplace's own restarts re-place the job instead)."""
    active_deadline_seconds: int | None = Field(None, ge=1)
    """Seconds the driver may run; then it is stopped and the job Failed with reason DeadlineExceeded."""
    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    """OnFailure: when the driver fails because a process, pod or node was lost (a pod deleted, evicted or
    OOMKilled, a node NotReady or gone), the operator stops the attempt, gives its nodes back, leaves the bad
    node out for this job and starts a new attempt on the same placement on healthy free nodes (Queued until
    there are). Never: the job ends Failed, the cause named (docs/restarts.md)."""
    max_restarts: int = Field(DEFAULT_MAX_RESTARTS, ge=0, le=100)
    """Restarts allowed with restartPolicy OnFailure (attempts = restarts + 1); past them the job ends Failed
    with the last cause."""

    @model_validator(mode="after")
    def _one_restart_mechanism(self) -> RunSpec:
        if self.backoff_limit > 0 and self.restart_policy is not RestartPolicy.NEVER:
            raise ValueError(BACKOFF_WITH_RESTARTS_MESSAGE)
        return self


#: spec.checkpoint.preemptionGraceSeconds when not set.
DEFAULT_PREEMPTION_GRACE_SECONDS = 60


class Checkpoint(CamelModel):
    """A volume that outlives the job's attempts, mounted at the same path on the head and every worker; its
    path is given to the driver as RLPLACE_CHECKPOINT_DIR (placement_core.launcher.checkpoint)."""

    volume: Volume
    """The volume (a persistentVolumeClaim on a real cluster: every node of the job must be able to mount it;
    hostPath only where every node sees the same directory)."""
    mount_path: Annotated[
        str,
        Field(
            max_length=4096,
            pattern=r"^/.*",
            json_schema_extra=cel(
                f"self.startsWith('/') && self != '{PLAN_MOUNT_PATH}' && !self.startsWith('{PLAN_MOUNT_PATH}/') "
                f"&& self != '{SHM_MOUNT_PATH}'",
                f"mountPath must be an absolute path, not {PLAN_MOUNT_PATH} nor {SHM_MOUNT_PATH}",
            ),
        ),
        AfterValidator(mount_path_allowed),
    ] = "/rlplace/checkpoint"
    """Where it is mounted in the Ray containers."""
    preemption_grace_seconds: int = Field(DEFAULT_PREEMPTION_GRACE_SECONDS, ge=0, le=3600)
    """When Kueue preempts the job: how long its driver may take to save a checkpoint on request (docs/driver.md)
    before its Ray pods are deleted; it resumes from that checkpoint when admitted again."""


WORKER_NODE_GROUPS_MESSAGE = "pods.workerNodeGroups[].nodeGroup must be one of spec.nodeGroups"


PROFILE_FIRST_WITH_PROFILE_MESSAGE = (
    "autoPlacement.profileFirst measures the profile itself: remove spec.profile or profileFirst"
)


class TopologyMode(enum.StrEnum):
    REQUIRED = "Required"
    PREFERRED = "Preferred"


class Topology(
    CamelModel,
    json_schema_extra=cel("self.mode != 'Required' || has(self.level)", "topology.mode Required needs a level"),
):
    """Where a job's nodes of each NodeGroup may be in the network (docs/admission.md, "Racks and blocks")."""

    level: str | None = Field(None, max_length=317, pattern=LABEL_KEY_PATTERN)
    """The level whose one domain should hold each of the job's NodeGroups' nodes: a node label key among each
    NodeGroup's levels (by default network.topology.kubernetes.io/block or /rack; a job naming another level
    waits, saying so). Default: none; the nodes are still packed into the fewest domains."""
    mode: TopologyMode = TopologyMode.PREFERRED
    """Required: the job waits until one domain of the level has its nodes free (its condition says which level
    and how many it lacks). Preferred: one domain when one has them, else the fewest (as without the field). Under
    Kueue the Workload's PodSets ask its topology-aware scheduling for the same (required or preferred)."""
    exchange_groups: list[Annotated[str, Field(max_length=253)]] | None = Field(None, max_length=16)
    """The job's NodeGroups whose processes exchange weights every iteration (the trainer's and the rollout's):
    admission puts them under one domain of a level they share when one holds them all. Default: the job's GPU
    NodeGroups; [] packs each group on its own."""

    @model_validator(mode="after")
    def _required_names_a_level(self) -> Topology:
        if self.mode is TopologyMode.REQUIRED and self.level is None:
            raise ValueError("topology.mode Required needs a level")
        return self


class RLJobSpec(
    CamelModel,
    json_schema_extra=cel(
        "(has(self.autoPlacement) && has(self.autoPlacement.enabled) && self.autoPlacement.enabled) || "
        "(has(self.componentPlacement) && size(self.componentPlacement) > 0)",
        "componentPlacement needs at least one entry unless autoPlacement.enabled is true",
        (
            # KubeRay suspends only a RayJob that deletes its cluster; the default (true) applies when unset.
            "!(has(self.suspend) && self.suspend) || !has(self.entrypoint) || !has(self.run) || "
            "!has(self.run.shutdownAfterJobFinishes) || self.run.shutdownAfterJobFinishes",
            "a job with an entrypoint can be suspended only with run.shutdownAfterJobFinishes true",
        ),
        (
            "!has(self.pods) || !has(self.pods.workerNodeGroups) || "
            "self.pods.workerNodeGroups.all(g, g.nodeGroup in self.nodeGroups)",
            WORKER_NODE_GROUPS_MESSAGE,
        ),
        (
            "!has(self.autoPlacement) || !has(self.autoPlacement.profileFirst) || !self.autoPlacement.profileFirst"
            " || !has(self.profile)",
            PROFILE_FIRST_WITH_PROFILE_MESSAGE,
        ),
        (
            "!has(self.framework) || !(self.framework in ["
            + ", ".join(f"'{name}'" for name in PROGRAM_FRAMEWORKS)
            + "]) || has(self.entrypoint)",
            FRAMEWORK_NEEDS_ENTRYPOINT_MESSAGE,
        ),
    ),
):
    """One RL training job: its node groups, its component placement, and the Ray cluster that runs it."""

    node_groups: Annotated[
        list[Annotated[str, Field(pattern=r"^[a-z0-9]+([.-][a-z0-9]+)*$", max_length=253)]],
        Field(min_length=1, max_length=64),
    ]
    """NodeGroups that form the job's cluster, in node-rank order."""
    component_placement: Annotated[
        list[PlacementEntry],
        Field(
            max_length=64,
            json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["components"]},
        ),
    ] = []
    """cluster.component_placement as a list of entries (one per key). Empty with autoPlacement.enabled."""
    components: Annotated[
        list[ComponentSettings],
        Field(
            max_length=64, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
        ),
    ] = []
    """Per-component settings (what losing a process does), by component name; a component not listed keeps the
    defaults."""
    elastic: ElasticLoop = ElasticLoop()
    """The closed loop over the replicas of components with a range (docs/elastic.md)."""
    auto_placement: AutoPlacement = AutoPlacement()
    """Auto placement: `enabled` searches the placement from `profile`; `apply`, `minGain`, `cooldown` say what
    to do with the placement recommended from the job's measured step times."""
    placement_mode: PlacementMode = PlacementMode.HYBRID
    """hybrid (any components on any resources) or modelParallel (reasoning: actor, rollout, reward, ...)."""
    model_parallel: ModelParallel = ModelParallel()
    """Model-parallel sizes, for placementMode modelParallel and auto placement."""
    algorithm: Algorithm = Algorithm()
    """Algorithm settings for placement checks and auto placement."""
    profile: Profile | None = None
    """Profiled component costs for auto placement."""
    isolate_accelerators: bool = True
    """Each process sees only its own GPUs (CUDA_VISIBLE_DEVICES); false: all GPUs of its node."""
    ray: RaySpec = RaySpec()
    """The RayCluster."""
    entrypoint: str | None = Field(None, max_length=MAX_ENTRYPOINT_CHARS)
    """Driver command. With it the job runs as a KubeRay RayJob that submits this command (it runs on the Ray
    head, where the plan is mounted) and the job ends Succeeded or Failed with the driver; without it the job
    is a long-lived RayCluster for interactive use."""
    run: RunSpec = RunSpec()
    """How the driver runs (KubeRay RayJob settings); used only with an entrypoint."""
    framework: FrameworkName = FrameworkName.RLPLACE
    """Whose program the entrypoint runs: rlplace (a driver using rlplace's launcher), rlinf or verl (the user's
    RLinf or veRL program, unchanged). With rlinf every Ray pod gets RLINF_NODE_RANK (the head after the
    workers), the entrypoint gets `cluster.num_nodes=<workers + 1>` appended, and each process's binding is
    checked against the plan from the probe rlplace mounts in the pods and Ray's State API. With verl the Ray
    cluster has exactly the plan's nodes and GPUs, Ray assigns the GPU ids, and what each process got is
    observed and checked per pool (status.observedPlacement; docs/frameworks.md)."""
    on_binding_mismatch: OnBindingMismatch = OnBindingMismatch.FAIL
    """A framework job whose process runs elsewhere than planned: Fail stops it (phase Failed, the rank named in
    BindingVerified); Report keeps it running with BindingVerified False."""
    suspend: bool = False
    """Stop the job and free its GPUs, keeping the job: the RayCluster is removed (with an entrypoint the
    RayJob is suspended, which stops the driver). Set back to false to start it again (the driver starts over)."""
    checkpoint: Checkpoint | None = None
    """A volume the driver keeps its checkpoints on across restarts (RLPLACE_CHECKPOINT_DIR)."""
    pods: PodSettings = PodSettings()
    """What the job's pods bring: volumes and mounts, envFrom, service account, imagePullSecrets, tolerations,
    labels, annotations, priorityClassName, shared memory; for all pods, the head, the workers (all, or those of
    one NodeGroup) and the submitter."""
    priority: int = 0
    """Queue order among jobs waiting for free nodes: higher first, then older first (creationTimestamp). A
    waiting job is passed only by jobs of higher priority; running jobs are never stopped for it."""
    topology: Topology | None = None
    """The network level each NodeGroup's nodes of the job should share (one rack, one block), required or
    preferred. Unset: packed into the fewest racks and blocks where it can be, never waiting for it."""

    def restart_digest(self) -> str:
        """A digest of everything in the spec but what a running job changes in place (components' replicas and
        their range, the elastic loop's policy): a running job whose new spec has another digest than the one its
        RayJob was made for restarts on the new plan (docs/elastic.md)."""
        wire = self.model_dump(mode="json", by_alias=True, exclude={"elastic"})
        for component in wire.get("components") or []:
            for key in ("replicas", "minReplicas", "maxReplicas"):
                component.pop(key, None)
        return hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def required_topology_level(self) -> str | None:
        """The level whose one domain must hold each NodeGroup's nodes of the job (spec.topology Required)."""
        topology = self.topology
        return topology.level if topology is not None and topology.mode is TopologyMode.REQUIRED else None

    @model_validator(mode="after")
    def _worker_node_groups_are_the_jobs(self) -> RLJobSpec:
        if any(g.node_group not in self.node_groups for g in self.pods.worker_node_groups):
            raise ValueError(WORKER_NODE_GROUPS_MESSAGE)
        return self

    @model_validator(mode="after")
    def _framework_runs_an_entrypoint(self) -> RLJobSpec:
        if self.framework in PROGRAM_FRAMEWORKS and not self.entrypoint:
            raise ValueError(FRAMEWORK_NEEDS_ENTRYPOINT_MESSAGE)
        return self

    @model_validator(mode="after")
    def _profile_first_measures_the_profile(self) -> RLJobSpec:
        if self.auto_placement.profile_first and self.profile is not None:
            raise ValueError(PROFILE_FIRST_WITH_PROFILE_MESSAGE)
        return self
