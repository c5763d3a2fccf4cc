"""What auto placement reads from a typed `Job` (docs/autoplace.md, "Inputs"): the chain, the profile, the batch.

Everything is checked here, once, so the cost models and the search work on plain frozen records and never see
a malformed profile. Bad input is a `PlacementError` with a one-line message naming the config path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from placement_core.cluster import Cluster
from placement_core.components import ComponentPlacement, ModelParallelComponentPlacement
from placement_core.configfile import not_a_number_hint
from placement_core.errors import PlacementError
from placement_core.grammar import parse_placement_entries
from placement_core.jobconfig import Job, ModelParallelSettings

#: Kinds of chain stage: a rollout engine (SGLang/vLLM-like) or a Megatron model (actor, inference).
ROLLOUT = "rollout"
MEGATRON = "megatron"


@dataclass(frozen=True, slots=True)
class Stage:
    """One component of a reasoning chain as the cost models see it.

    `profiled_gpus` is W of docs/autoplace.md: the GPU count the profile was measured on; `cost` is seconds per
    iteration there.
    """

    name: str
    kind: str
    model_parallel: int
    profiled_gpus: int
    cost: float


@dataclass(frozen=True, slots=True)
class ReasoningTask:
    """A reasoning job reduced to what the search needs; `stages` are in chain (dataflow) order.

    Two facts about the cluster keep every answer a placement `ModelParallelComponentPlacement` accepts:
    `rollout_gpu_limit`, the most GPUs a rollout starting at GPU 0 can take before one of its engines would
    straddle two nodes, and `collocated_allowed`, whether `actor,rollout,reward: all` is a valid placement.
    """

    num_gpus: int
    num_nodes: int
    rollout_batch_size: int
    group_size: int
    n_minibatches: int
    max_running_requests: int
    stages: tuple[Stage, ...]
    rollout_gpu_limit: int
    collocated_allowed: bool

    @property
    def chain(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self.stages)


def check_gpus(job: Job) -> None:
    if job.cluster.num_accelerators < 1:
        raise PlacementError("auto placement needs GPUs, but the cluster has none (cluster.accelerators_per_node)")


def require_profile_keys(profile: Mapping[str, object], keys: tuple[str, ...]) -> None:
    """Name every missing (or null) profile key at once, in chain order."""
    missing = [key for key in keys if profile.get(key) is None]
    if missing:
        it = "it" if len(missing) == 1 else "them"
        raise PlacementError(
            f"profile data is not provided: missing {', '.join(missing)} (add {it} under profile_data)"
        )


#: The largest profiled time accepted (about 31 years): sums and ratios of larger ones overflow to inf/nan.
MAX_PROFILED_SECONDS = 1e9


def seconds(profile: Mapping[str, object], key: str) -> float:
    """A profiled time: a number from 0 to MAX_PROFILED_SECONDS (a bool or a string is a typo, not a time)."""
    value = profile.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_PROFILED_SECONDS  # also refuses nan and inf
    ):
        raise PlacementError(
            f"profile_data.{key} must be a finite number of seconds >= 0 (at most {MAX_PROFILED_SECONDS:g}), got {value!r}"
            f"{not_a_number_hint(value)}"
        )
    return float(value)


def read_reasoning(job: Job) -> ReasoningTask:
    """The reasoning chain `rollout -> inference -> actor` (no inference without recompute_logprobs)."""
    chain = reasoning_chain(job)
    require_profile_keys(job.profile, tuple(f"{name}_cost" for name in chain))
    return reasoning_task(job, {name: seconds(job.profile, f"{name}_cost") for name in chain})


def reasoning_chain(job: Job) -> tuple[str, ...]:
    return ("rollout", "inference", "actor") if job.model_parallel.recompute_logprobs else ("rollout", "actor")


def reasoning_task(job: Job, costs: Mapping[str, float]) -> ReasoningTask:
    """The task with `costs[name]` as each chain component's seconds per iteration on the profiled GPUs."""
    check_gpus(job)
    settings, batch, cluster = job.model_parallel, job.batch, job.cluster
    rbs = batch.rollout_batch_size
    if rbs is None:
        raise PlacementError("data.rollout_batch_size is required for auto placement")
    group_size, n_minibatches = batch.group_size, batch.n_minibatches
    if (rbs * group_size) % n_minibatches:
        raise PlacementError(
            f"algorithm.n_minibatches ({n_minibatches}) must divide data.rollout_batch_size * algorithm.group_size "
            f"({rbs} * {group_size} = {rbs * group_size})"
        )
    profiled = profiled_gpu_count(job)
    # Megatron stages (actor, inference) span tp*cp*pp GPUs per replica; rollout engines tp*pp.
    sizes = {
        "rollout": settings.rollout.model_parallel,
        "inference": settings.inference.training_parallel,
        "actor": settings.actor.training_parallel,
    }
    stages = tuple(
        Stage(
            name=name,
            kind=ROLLOUT if name == "rollout" else MEGATRON,
            model_parallel=sizes[name],
            profiled_gpus=profiled,
            cost=costs[name],
        )
        for name in reasoning_chain(job)
    )
    return ReasoningTask(
        num_gpus=cluster.num_accelerators,
        num_nodes=cluster.num_nodes,
        rollout_batch_size=rbs,
        group_size=group_size,
        n_minibatches=n_minibatches,
        max_running_requests=batch.max_running_requests,
        stages=stages,
        rollout_gpu_limit=engines_fit_limit(cluster, settings.rollout.model_parallel),
        collocated_allowed=collocated_fits(gpus_per_node(cluster), settings),
    )


#: The one collocated placement of a reasoning chain (inference, when present, runs on the actor's GPUs).
COLLOCATED_BLOCK = {"actor,rollout,reward": "all"}


def engines_fit_limit(cluster: Cluster, model_parallel: int) -> int:
    """The most GPUs, counted from global GPU 0, that hold whole rollout engines each within one node."""
    return engines_fit(gpus_per_node(cluster), model_parallel)


def engines_fit(node_gpus: Sequence[int], model_parallel: int) -> int:
    """The most GPUs from the first of `node_gpus` (per node, in rank order) that hold whole engines of
    `model_parallel` GPUs, none straddling two nodes: engines are packed from GPU 0, so the first node whose
    count is not a multiple of the engine size ends the run."""
    limit = 0
    for count in node_gpus:
        limit += count - count % model_parallel
        if count % model_parallel:
            break
    return limit


def gpus_per_node(cluster: Cluster, node_ranks: Sequence[int] | None = None) -> list[int]:
    """GPUs of each node that has some, in rank order (of `node_ranks` when given, else every node)."""
    ranks = range(cluster.num_nodes) if node_ranks is None else node_ranks
    return [cluster.nodes[r].num_accelerators for r in ranks if cluster.nodes[r].num_accelerators]


def collocated_fits(node_gpus: Sequence[int], settings: ModelParallelSettings) -> bool:
    """Whether `actor,rollout,reward: all` over GPUs laid out as `node_gpus` (per node, in rank order) is a
    placement `ModelParallelComponentPlacement` accepts, decided from the sizes alone.

    Building the placement to find out costs a Placement record per GPU (most of an autotune call at 2,048
    GPUs); the class's rules for this one block reduce to arithmetic: both tensor-parallel sizes fit in the G
    GPUs; the rollout's is a divisor of the actor's when smaller (its engines are strided over blocks of the
    actor's size, B = max of the two); G is a whole number of such blocks; and when an engine spans more than
    one GPU, no block straddles two nodes, i.e. every node boundary falls on a multiple of B. A property test
    holds this equal to `accepts_placement(job, COLLOCATED_BLOCK)` on random clusters and sizes.
    """
    total = sum(node_gpus)
    actor_tp, rollout_tp = settings.actor.tp, settings.rollout.tp
    if total < 1 or actor_tp > total or rollout_tp > total:
        return False
    stride = 1
    if actor_tp > rollout_tp:
        if actor_tp % rollout_tp:
            return False
        stride = actor_tp // rollout_tp
    block = rollout_tp * stride
    if total % block:
        return False
    if rollout_tp == 1:
        return True
    boundary = 0
    for count in node_gpus:
        boundary += count
        if boundary % block:
            return False
    return True


def accepts_placement(job: Job, block: Mapping[str, str]) -> bool:
    """Whether `block` as `cluster.component_placement` is a valid model-parallel placement for this job, found
    by building it (the reference `collocated_fits` is tested against, and the "before" of the benchmark).

    `cluster.auto_scheduler` is left out: the search proposes collocated and disaggregated placements, and
    AUTO mode (which would reorder the chain) is not one of them.
    """
    settings = replace(job.model_parallel, auto_scheduler=False)
    try:
        ModelParallelComponentPlacement.from_entries(parse_placement_entries(block), job.cluster, settings)
    except PlacementError:
        return False
    return True


def profiled_gpu_count(job: Job) -> int:
    """W: the GPUs each component had while the profile was measured.

    The profile is measured collocated, so a job whose own placement is collocated (actor and rollout on the
    same GPUs) was profiled on those GPUs. Any other placement cannot be where a collocated profile came from
    (it is typically a placement the user pasted in to compare with `rlplace cost`), so the profile counts as
    measured on all G GPUs. That keeps `rlplace cost` of a suggested block equal to the time `rlplace
    autotune` predicted for it. A job without a placement (an operator job left to auto placement) counts as
    profiled on all GPUs.
    """
    if not job.placement:
        return job.cluster.num_accelerators
    placement = ComponentPlacement.from_entries(job.placement, job.cluster)
    names = placement.components
    if "actor" in names and "rollout" in names:
        actor = placement.get_units("actor")
        if actor == placement.get_units("rollout"):
            return len(actor)
    return job.cluster.num_accelerators
