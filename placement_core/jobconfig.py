"""A job config (the YAML mapping) -> the typed inputs of placement and auto placement.

The only module that knows config paths (`cluster.component_placement`, `actor.model.*`, `data.*`, ...) and
their defaults, so `ModelParallelComponentPlacement`, the auto placement search and the CLI can never disagree
on what a config says. The operator does not come through here: it builds the same typed values
(`ModelParallelSettings`, `BatchSettings`, `Job`) straight from an RLJob.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

from placement_core.cluster import Cluster
from placement_core.configfile import Unresolved, not_a_number_hint, quote, shown
from placement_core.errors import PlacementError
from placement_core.grammar import PlacementEntry, parse_placement_entries

_MISSING = object()

#: `runner.task_type` values; any other task is placed with the hybrid class and searched as reasoning.
REASONING = "reasoning"
EMBODIED = "embodied"

REASONING_EVAL = "reasoning_eval"

PlacementKind = Literal["hybrid", "model-parallel", "model-parallel-eval", "multi-agent", "multi-agent-eval"]
PLACEMENT_KINDS: tuple[PlacementKind, ...] = (
    "hybrid",
    "model-parallel",
    "model-parallel-eval",
    "multi-agent",
    "multi-agent-eval",
)


def config_value(config: Mapping[str, object], path: str, default: object = None) -> object:
    """The value at a dotted path (`actor.model.tensor_model_parallel_size`), or `default` when absent/null."""
    node: object = config
    keys = path.split(".")
    for depth, key in enumerate(keys):
        if not isinstance(node, Mapping):
            # `actor: {model: big}`: a section the user wrote as a value is an error, not "use the defaults".
            section = ".".join(keys[:depth])
            raise PlacementError(f"{section} must be a mapping (a section with keys), got {quote(node)}")
        node = node.get(key, _MISSING)
        if node is _MISSING or node is None:
            return default
        if isinstance(node, Unresolved):
            raise node.error(".".join(keys[: depth + 1]))
    return node


def _positive_int(config: Mapping[str, object], path: str, default: int | None = 1) -> int | None:
    value = config_value(config, path, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlacementError(f"{path} must be an integer >= 1, got {shown(value)}{not_a_number_hint(value)}")
    return value


def _size(config: Mapping[str, object], path: str, default: int = 1) -> int:
    value = _positive_int(config, path, default)
    assert value is not None  # a default was given
    return value


def _flag(config: Mapping[str, object], path: str, default: bool) -> bool:
    value = config_value(config, path, default)
    if not isinstance(value, bool):
        raise PlacementError(f"{path} must be true or false, got {shown(value)}")
    return value


# -- the cluster and the placement ------------------------------------------------------------------------


def task_type(config: Mapping[str, object]) -> str:
    """`runner.task_type` as given (reasoning, embodied, ...), or '' when the config has none."""
    value = config_value(config, "runner.task_type", "")
    return value if isinstance(value, str) else str(value)


def default_placement_kind(config: Mapping[str, object]) -> PlacementKind:
    """The class the reference's entry script for the config's task uses: `runner.task_type: reasoning` is
    model-parallel, `reasoning_eval` model-parallel-eval, each multi-agent when the config has an
    `agentloop.workflow` (the multi-agent scripts' setting); every other task is hybrid."""
    task = task_type(config)
    if task not in (REASONING, REASONING_EVAL):
        return "hybrid"
    multi_agent = config_value(config, "agentloop.workflow") is not None
    if task == REASONING:
        return "multi-agent" if multi_agent else "model-parallel"
    return "multi-agent-eval" if multi_agent else "model-parallel-eval"


def cluster_section(config: Mapping[str, object], why: str = "") -> Mapping[str, object]:
    section = config.get("cluster") if isinstance(config, Mapping) else None
    if not isinstance(section, Mapping):
        raise PlacementError(f"the config has no 'cluster' section{why}")
    return section


def read_cluster(config: Mapping[str, object], why: str = "") -> Cluster:
    """The cluster the config's `cluster:` section describes."""
    return Cluster.from_config(cluster_section(config, why))


def placement_entries(config: Mapping[str, object]) -> list[PlacementEntry]:
    """The entries of `cluster.component_placement` (required)."""
    raw = cluster_section(config).get("component_placement")
    if raw is None:
        raise PlacementError("the config has no 'cluster.component_placement'")
    return parse_placement_entries(raw)


# -- settings -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParallelSizes:
    """Tensor, context and pipeline parallel sizes of one model."""

    tp: int = 1
    cp: int = 1
    pp: int = 1

    @property
    def model_parallel(self) -> int:
        """GPUs one model replica spans for rollout engines (tp*pp)."""
        return self.tp * self.pp

    @property
    def training_parallel(self) -> int:
        """GPUs one replica spans for Megatron training and inference (tp*cp*pp)."""
        return self.tp * self.cp * self.pp


#: Keys some configs write for a size that is read under another name: refused, naming the right key, since
#: the size would otherwise be dropped in silence (and a plan made for context parallel size 1).
_RENAMED_SIZES = {"context_model_parallel_size": "context_parallel_size"}


def _model_sizes(config: Mapping[str, object], prefix: str, fallback: ParallelSizes) -> ParallelSizes:
    for old, new in _RENAMED_SIZES.items():
        if config_value(config, f"{prefix}.{old}") is not None:
            raise PlacementError(f"{prefix}.{old} is not a setting; the context parallel size is {prefix}.{new}")
    return ParallelSizes(
        _size(config, f"{prefix}.tensor_model_parallel_size", fallback.tp),
        _size(config, f"{prefix}.context_parallel_size", fallback.cp),
        _size(config, f"{prefix}.pipeline_model_parallel_size", fallback.pp),
    )


@dataclass(frozen=True, slots=True)
class ModelParallelSettings:
    """What ModelParallelComponentPlacement and the auto placement search read; every size defaults to 1."""

    actor: ParallelSizes = ParallelSizes()
    rollout: ParallelSizes = ParallelSizes()
    inference: ParallelSizes = ParallelSizes()
    """Defaults to the actor's sizes."""
    critic: ParallelSizes = ParallelSizes()
    recompute_logprobs: bool = True
    auto_scheduler: bool = False
    use_pre_process_policy: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, object], components: Collection[str] = ()) -> ModelParallelSettings:
        """The settings of a config. The critic's sizes are read only when `components` places a critic:
        settings of a component that is not placed are never read (a config may carry a critic section, even
        one with interpolations, for a run that does not use it)."""
        actor = _model_sizes(config, "actor.model", ParallelSizes())
        rollout = ParallelSizes(
            tp=_size(config, "rollout.tensor_parallel_size"),
            pp=_size(config, "rollout.pipeline_parallel_size"),
        )
        return cls(
            actor=actor,
            rollout=rollout,
            inference=_model_sizes(config, "inference.model", actor),
            critic=_model_sizes(config, "critic.model", ParallelSizes()) if "critic" in components else ParallelSizes(),
            recompute_logprobs=_flag(config, "algorithm.recompute_logprobs", True),
            auto_scheduler=_flag(config, "cluster.auto_scheduler", False),
            use_pre_process_policy=_flag(config, "cluster.use_pre_process_policy", False),
        )


#: `rollout.max_running_requests` when the config does not say (the reference's default).
DEFAULT_MAX_RUNNING_REQUESTS = 64
#: Pipeline stages of an embodied rollout when `rollout.pipeline_stage_num` is not set (the reference tool's).
DEFAULT_PIPELINE_STAGES = 2


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """Batch and algorithm sizes that only auto placement reads."""

    rollout_batch_size: int | None = None
    """data.rollout_batch_size (required by the reasoning search)."""
    group_size: int = 1
    """algorithm.group_size: responses per prompt."""
    n_minibatches: int = 1
    """algorithm.n_minibatches."""
    max_running_requests: int = DEFAULT_MAX_RUNNING_REQUESTS
    """rollout.max_running_requests."""
    env_num: int | None = None
    """data.env_num (required by the embodied search)."""
    pipeline_stages: int = DEFAULT_PIPELINE_STAGES
    """rollout.pipeline_stage_num (embodied)."""

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> BatchSettings:
        return cls(
            rollout_batch_size=_positive_int(config, "data.rollout_batch_size", None),
            group_size=_size(config, "algorithm.group_size"),
            n_minibatches=_size(config, "algorithm.n_minibatches"),
            max_running_requests=_size(config, "rollout.max_running_requests", DEFAULT_MAX_RUNNING_REQUESTS),
            env_num=_positive_int(config, "data.env_num", None),
            pipeline_stages=_size(config, "rollout.pipeline_stage_num", DEFAULT_PIPELINE_STAGES),
        )


@dataclass(frozen=True)
class Job:
    """Everything auto placement reads about a job, typed: its cluster, its own placement (if any), its
    settings and its profiled costs. `read_job` makes one from a config; the operator from an RLJob."""

    cluster: Cluster
    placement: tuple[PlacementEntry, ...] = ()
    """The job's own component placement (empty when it has none, as for an operator job left to auto)."""
    task_type: str = REASONING
    model_parallel: ModelParallelSettings = ModelParallelSettings()
    batch: BatchSettings = BatchSettings()
    profile: Mapping[str, object] = field(default_factory=dict)
    """`profile_data`: `{actor,inference,rollout}_cost` (reasoning) or the embodied curves' points."""


def read_job(config: Mapping[str, object], profile: Mapping[str, object] | None = None) -> Job:
    """The Job of a config; `profile` (e.g. an RLJob's annotation) replaces `profile_data` when given."""
    cluster = read_cluster(config, " (auto placement needs cluster.num_nodes)")
    raw = cluster_section(config).get("component_placement")
    entries = tuple(parse_placement_entries(raw)) if raw else ()
    if profile is None:
        profile = config_value(config, "profile_data", {})
        if not isinstance(profile, Mapping):
            raise PlacementError(f"profile_data must be a mapping of costs, got {shown(profile)}")
        check_profile_keys(profile)
    names = {name for entry in entries for name in entry.names}
    return Job(
        cluster=cluster,
        placement=entries,
        task_type=EMBODIED if task_type(config) == EMBODIED else REASONING,
        model_parallel=ModelParallelSettings.from_config(config, names),
        batch=BatchSettings.from_config(config),
        profile=profile,
    )


#: What `profile_data` may hold (docs/autoplace.md): per component (`actor`, `rollout`, `env`, ...) its cost,
#: its cost per GPU type, its memory and its profiled curve, and the model's size and link bandwidths. One
#: pattern, so a new per-component key is one alternative here.
PROFILE_DATA_KEY = re.compile(
    r"[a-z][a-z0-9_]*_(?:cost|cost_by_type|memory_gb|collective_gb|profile_data)|model_size_gb|collocated_offload|network_levels"
    r"|[a-z0-9_]*bandwidth[a-z0-9_]*"
)
#: Examples of valid keys, for "did you mean" (a typo is compared with these).
PROFILE_DATA_EXAMPLES = (
    "actor_cost",
    "rollout_cost",
    "inference_cost",
    "env_profile_data",
    "rollout_profile_data",
    "actor_cost_by_type",
    "actor_memory_gb",
    "actor_collective_gb",
    "model_size_gb",
    "collocated_offload",
    "sync_bandwidth_gb_s",
    "network_levels",
)


def check_profile_keys(profile: Mapping[object, object]) -> None:
    """Refuse a `profile_data` key auto placement cannot read (`actor_cots`), naming the closest known one."""
    for key in profile:
        if not isinstance(key, str) or not PROFILE_DATA_KEY.fullmatch(key):
            close = difflib.get_close_matches(str(key), PROFILE_DATA_EXAMPLES, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise PlacementError(
                f"profile_data: unknown key {quote(str(key))}{hint} (keys are <component>_cost, "
                "<component>_cost_by_type, <component>_memory_gb, <component>_collective_gb, <component>_profile_data, "
                "model_size_gb, collocated_offload, network_levels and bandwidths)"
            )
