"""An RLJob -> its plan: typed placement inputs from the spec, auto placement on the live cluster, the Plan,
the worker pods. No config mapping in between: the spec's entries and sizes become placement_core's types.

Pure: it takes the job, its NodeGroups and the node index, and returns what the handler writes. Errors are
placement_core's: `CapacityError` (more nodes could fix it) or `PlacementError` (the spec is wrong).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from placement_core.autoplace import autotune
from placement_core.autoplace.observed import profiling_placement
from placement_core.cluster import ACCELERATOR, Cluster
from placement_core.components import ComponentPlacement, HybridComponentPlacement, ModelParallelComponentPlacement
from placement_core.errors import PlacementError
from placement_core.grammar import PlacementEntry, parse_placement_entries
from placement_core.jobconfig import REASONING, BatchSettings, Job, ModelParallelSettings, ParallelSizes
from placement_core.plan import Plan, build_plan
from rlplace_operator.api.names import HOSTNAME_LABEL, PROFILE_ANNOTATION
from rlplace_operator.api.rljob import PlacementEntry as SpecEntry
from rlplace_operator.api.rljob import PlacementMode, Profile, RLJobSpec
from rlplace_operator.api.status import ComponentSummary, ResolvedPlacement
from rlplace_operator.cluster.dra import DevicePin
from rlplace_operator.cluster.selection import JobGroup, NodeInfo, job_cluster, unit_resource
from rlplace_operator.cluster.taints import Taint
from rlplace_operator.planning.elastic import at_most, elastic_components, running, with_replicas
from rlplace_operator.planning.replace import with_on_loss


@dataclass(frozen=True)
class WorkerNode:
    """One node of the plan: where a worker pod goes and what it requests."""

    rank: int
    """Node rank in the job's cluster (the plan's cluster_node_rank)."""
    name: str
    """Kubernetes node name."""
    gpus: int
    """GPUs on the node (Ray's num-gpus)."""
    requests: Mapping[str, int] = field(default_factory=dict)
    """Extended resources requested, all of the node's units (nvidia.com/gpu, robot resources)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """NodeGroup variables for workers on this node."""
    groups: tuple[str, ...] = ()
    """The job's NodeGroups the node belongs to (for spec.pods.workerNodeGroups)."""
    taints: tuple[Taint, ...] = ()
    """The node's taints (the head goes to a node it tolerates)."""
    processes: int = 0
    """The plan's processes on the node: the Ray worker processes its raylet starts at once (0: Ray's default)."""
    hostname: str = ""
    """The node's kubernetes.io/hostname label (empty: none; the pod is then pinned by node name)."""
    held_gpus: tuple[int, ...] = ()
    """The node's GPUs the plan's processes hold (a framework that lets Ray pick GPU ids gets only these)."""
    pin: DevicePin | None = None
    """On a node of a DRA NodeGroup: the exact GPUs the pod claims (it then requests no extended resource)."""

    @property
    def pod_gpus(self) -> tuple[int, ...] | None:
        """The plan's GPUs the pod is given exactly (DRA), None when it has all of its node's."""
        return self.held_gpus if self.pin is not None else None


@dataclass(frozen=True)
class JobPlan:
    """Everything the handler needs to write for one job."""

    plan: Plan
    applied: list[SpecEntry]
    """The component placement applied (the search result with auto placement), as the spec writes it."""
    predicted_iteration_time: float | None
    workers: list[WorkerNode]
    summary: ResolvedPlacement
    gpus: int


def profile_of(spec: RLJobSpec, annotations: Mapping[str, str]) -> dict | None:
    """Profiled costs from the rlplace.io/profile annotation (JSON) or spec.profile, in autoplace's keys."""
    raw = annotations.get(PROFILE_ANNOTATION)
    if raw is not None:
        # The same model as spec.profile, so the annotation refuses what the CRD refuses (zero or negative costs).
        try:
            return Profile.model_validate_json(raw).model_dump(exclude_none=True)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            at = f" {where}:" if where else ""
            raise PlacementError(
                f"annotation {PROFILE_ANNOTATION}:{at} {first['msg']} (got {cond_quote(raw)})"
            ) from None
    if spec.profile is not None:
        return spec.profile.model_dump(exclude_none=True)
    return None


def cond_quote(text: str, limit: int = 80) -> str:
    """`text` quoted for an error message, cut when long."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def wants_auto_placement(spec: RLJobSpec, annotations: Mapping[str, str]) -> bool:
    return spec.auto_placement.enabled or PROFILE_ANNOTATION in annotations


def model_parallel_settings(spec: RLJobSpec) -> ModelParallelSettings:
    """The spec's model-parallel sizes; inference defaults to the actor's."""
    mp = spec.model_parallel
    actor = ParallelSizes(
        mp.actor_tensor_parallel_size, mp.actor_context_parallel_size, mp.actor_pipeline_parallel_size
    )
    inference = ParallelSizes(
        mp.inference_tensor_parallel_size or actor.tp,
        actor.cp,
        mp.inference_pipeline_parallel_size or actor.pp,
    )
    return ModelParallelSettings(
        actor=actor,
        rollout=ParallelSizes(tp=mp.rollout_tensor_parallel_size, pp=mp.rollout_pipeline_parallel_size),
        inference=inference,
        recompute_logprobs=spec.algorithm.recompute_logprobs,
    )


def batch_settings(spec: RLJobSpec) -> BatchSettings:
    algorithm = spec.algorithm
    return BatchSettings(
        rollout_batch_size=algorithm.rollout_batch_size,
        group_size=algorithm.group_size,
        n_minibatches=algorithm.n_minibatches,
        max_running_requests=algorithm.max_running_requests,
    )


def placement_entries(entries: Sequence[SpecEntry]) -> list[PlacementEntry]:
    """The spec's entries as the placement grammar's (the same strings, no config mapping in between)."""
    return [PlacementEntry.of(e.components, e.placement, e.node_group) for e in entries]


def ranked_across(spec: RLJobSpec) -> set[str]:
    """NodeGroups whose ranks come before another group's in one placement entry (`nodeGroup: a800,4090`, or
    an entry without nodeGroup in a job of several groups): all their nodes count, so none can be left out."""
    leading: set[str] = set()
    for entry in spec.component_placement or [None]:
        names = entry.node_group.split(",") if entry is not None and entry.node_group else spec.node_groups
        leading.update(name.strip() for name in names[:-1])
    return leading


def profiling_spec(spec: RLJobSpec, annotations: Mapping[str, str], placement: Sequence[SpecEntry]) -> RLJobSpec:
    """The spec with the profiling run's `placement` (`profiling_placement`) as its model-parallel placement:
    what a job that profiles first is planned with on the nodes it was given (admission, a restart)."""
    if PROFILE_ANNOTATION in annotations:
        raise PlacementError(
            f"autoPlacement.profileFirst measures the profile itself: remove the {PROFILE_ANNOTATION} annotation "
            "or profileFirst"
        )
    auto = spec.auto_placement.model_copy(update={"enabled": False, "profile_first": False})
    # The profiling run is collocated (every component on every GPU): a loss there restarts it, whatever
    # spec.components says of the run it measures for.
    update = {"component_placement": list(placement), "auto_placement": auto, "components": []}
    return spec.model_copy(update={**update, "placement_mode": PlacementMode.MODEL_PARALLEL})


def _profiling_plan(
    spec: RLJobSpec, annotations: Mapping[str, str], groups: Sequence[JobGroup], nodes: Mapping[str, NodeInfo]
) -> JobPlan:
    """A job that profiles first: collocated on every GPU of the nodes its planning would give it (all of its
    cluster with `enabled`, as the search would use; else the nodes its componentPlacement uses)."""
    if not wants_auto_placement(spec, annotations):
        as_written = spec.model_copy(
            update={"auto_placement": spec.auto_placement.model_copy(update={"profile_first": False})}
        )
        used = {worker.name for worker in plan_job(as_written, annotations, groups, nodes).workers}
        nodes = {name: info for name, info in nodes.items() if name in used}
    cluster = job_cluster(groups, nodes)
    job = Job(cluster, (), REASONING, model_parallel_settings(spec), batch_settings(spec), {})
    placement = [SpecEntry(components=e.key, placement=e.placement) for e in profiling_placement(job)]
    return plan_job(profiling_spec(spec, annotations, placement), {}, groups, nodes)


def plan_job(
    spec: RLJobSpec,
    annotations: Mapping[str, str],
    groups: Sequence[JobGroup],
    nodes: Mapping[str, NodeInfo],
    whole_groups: bool = False,
) -> JobPlan:
    """The job's plan on its live cluster: the collocated profiling run of a job that profiles first, else auto
    placement first when asked for, then the placement classes. `whole_groups`: `nodes` are every ready node of
    the job's NodeGroups (the demand's plan), not the nodes admitted for it: the elastic range's maximum, which may
    take more nodes than the job holds now, is checked then."""
    if spec.auto_placement.profile_first:
        return _profiling_plan(spec, annotations, groups, nodes)
    cluster = job_cluster(groups, nodes)
    settings = model_parallel_settings(spec)
    elastic = elastic_components(spec)
    if wants_auto_placement(spec, annotations) and elastic:
        raise PlacementError(
            f"component '{elastic[0].name}': replicas and their range apply to a written "
            "componentPlacement; auto placement sets each component's GPUs itself (docs/elastic.md)"
        )
    entries = with_replicas(spec, placement_entries(spec.component_placement), running)
    applied: list[SpecEntry] = [_spec_entry(e) for e in entries] if elastic else list(spec.component_placement)
    predicted = None
    model_parallel = spec.placement_mode is PlacementMode.MODEL_PARALLEL
    if wants_auto_placement(spec, annotations):
        profile = profile_of(spec, annotations)
        if profile is None:
            raise PlacementError(
                "auto placement needs profiled costs: set spec.profile or the rlplace.io/profile annotation"
            )
        job = Job(cluster, tuple(entries), REASONING, settings, batch_settings(spec), profile)
        # The operator's auto placement is the reasoning search (collocated or disaggregated model-parallel);
        # over NodeGroups of different GPUs (types and memory in their status, per-type profile keys) it
        # also picks each component's group.
        result = autotune(job)
        entries = parse_placement_entries(result.component_placement)
        applied = [_spec_entry(e) for e in entries]
        predicted = result.total_cost
        model_parallel = True

    def placement_of(entries: Sequence[PlacementEntry]) -> ComponentPlacement:
        if model_parallel:
            return ModelParallelComponentPlacement.from_entries(entries, cluster, settings)
        return HybridComponentPlacement.from_entries(entries, cluster)

    placed = placement_of(entries)
    plan = with_on_loss(spec, build_plan(placed, isolate_accelerator=spec.isolate_accelerators))
    if whole_groups and any(c.max_replicas for c in elastic):
        # Growing later must never meet a placement error: the range's maximum is placed and checked now.
        largest = with_replicas(spec, placement_entries(spec.component_placement), at_most)
        try:
            with_on_loss(spec, build_plan(placement_of(largest), isolate_accelerator=spec.isolate_accelerators))
        except PlacementError as err:  # CapacityError too: the range is refused, not waited for
            raise PlacementError(f"maxReplicas cannot be placed: {err}") from None
    workers = worker_nodes(plan, cluster, groups, nodes)
    return JobPlan(
        plan=plan,
        applied=applied,
        predicted_iteration_time=predicted,
        workers=workers,
        summary=summarize(placed, plan),
        gpus=sum(worker.gpus for worker in workers),
    )


def _spec_entry(entry: PlacementEntry) -> SpecEntry:
    """A placement entry as the spec writes it (status.appliedPlacement)."""
    node_group = ",".join(entry.node_groups) if entry.node_groups else None
    return SpecEntry(components=entry.key, placement=entry.placement, node_group=node_group)


def summarize(placed: ComponentPlacement, plan: Plan) -> ResolvedPlacement:
    """Per component: processes, GPUs (distinct accelerators it holds), and nodes in rank order."""
    components = []
    for component in plan.components:
        nodes = list(dict.fromkeys(p.node_name for p in component.processes))
        gpus = sum(1 for unit in placed.get_units(component.name) if unit[2] == ACCELERATOR)
        components.append(ComponentSummary(name=component.name, processes=component.world_size, gpus=gpus, nodes=nodes))
    return ResolvedPlacement(mode=plan.mode, components=components)


def worker_nodes(
    plan: Plan, cluster: Cluster, groups: Sequence[JobGroup], nodes: Mapping[str, NodeInfo]
) -> list[WorkerNode]:
    """One worker per node any process uses, requesting every unit the job's groups count on it."""
    per_node: Counter[int] = Counter()
    held: dict[int, set[int]] = {}
    for _, process in plan.processes():
        per_node[process.node_rank] += 1
        held.setdefault(process.node_rank, set()).update(process.held_gpus)
    used = sorted(per_node)
    # Membership as sets: with 1,000 nodes a scan of every group's node list per node would be quadratic.
    members = [(group, {e.name for e in group.status.nodes}) for group in groups]
    workers = []
    for rank in used:
        node = cluster.nodes[rank]
        info = nodes[node.name]
        requests: dict[str, int] = {}
        env: dict[str, str] = {}
        in_groups: list[str] = []
        for group, names in members:
            if node.name in names:
                in_groups.append(group.name)
                resource = unit_resource(group.spec)
                count = info.count(resource) if resource else 0
                if count:
                    requests[resource] = count
                env.update({v.name: v.value for v in group.spec.env})
        workers.append(
            WorkerNode(
                rank,
                node.name,
                node.num_accelerators,
                requests,
                env,
                tuple(in_groups),
                info.taints,
                per_node[rank],
                info.labels.get(HOSTNAME_LABEL, ""),
                tuple(sorted(held[rank])),
            )
        )
    return workers
