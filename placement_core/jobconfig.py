"""Reading the job settings that placement and auto placement share (model-parallel sizes, algorithm flags).

One place for the config paths and their defaults, so `ModelParallelComponentPlacement` and the auto placement
search can never disagree on what a config says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from placement_core.errors import PlacementError

_MISSING = object()


def config_value(config: Mapping[str, object], path: str, default: object = None) -> object:
    """The value at a dotted path (`actor.model.tensor_model_parallel_size`), or `default` when absent/null."""
    node: object = config
    for key in path.split("."):
        if not isinstance(node, Mapping):
            return default
        node = node.get(key, _MISSING)
        if node is _MISSING or node is None:
            return default
    return node


def positive_int(config: Mapping[str, object], path: str, default: int = 1) -> int:
    value = config_value(config, path, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlacementError(f"{path} must be an integer >= 1, got {value!r}")
    return value


def flag(config: Mapping[str, object], path: str, default: bool) -> bool:
    value = config_value(config, path, default)
    if not isinstance(value, bool):
        raise PlacementError(f"{path} must be true or false, got {value!r}")
    return value


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
        """GPUs one replica spans for Megatron training (tp*cp*pp)."""
        return self.tp * self.cp * self.pp


def _model_sizes(config: Mapping[str, object], prefix: str, fallback: ParallelSizes) -> ParallelSizes:
    return ParallelSizes(
        positive_int(config, f"{prefix}.tensor_model_parallel_size", fallback.tp),
        positive_int(config, f"{prefix}.context_model_parallel_size", fallback.cp),
        positive_int(config, f"{prefix}.pipeline_model_parallel_size", fallback.pp),
    )


@dataclass(frozen=True, slots=True)
class ModelParallelSettings:
    """What ModelParallelComponentPlacement and the auto placement search read from a config."""

    actor: ParallelSizes
    rollout: ParallelSizes
    inference: ParallelSizes
    critic: ParallelSizes
    recompute_logprobs: bool
    auto_scheduler: bool
    use_pre_process_policy: bool

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ModelParallelSettings:
        actor = _model_sizes(config, "actor.model", ParallelSizes())
        rollout = ParallelSizes(
            tp=positive_int(config, "rollout.tensor_parallel_size"),
            pp=positive_int(config, "rollout.pipeline_parallel_size"),
        )
        return cls(
            actor=actor,
            rollout=rollout,
            inference=_model_sizes(config, "inference.model", actor),
            critic=_model_sizes(config, "critic.model", ParallelSizes()),
            recompute_logprobs=flag(config, "algorithm.recompute_logprobs", True),
            auto_scheduler=flag(config, "cluster.auto_scheduler", False),
            use_pre_process_policy=flag(config, "cluster.use_pre_process_policy", False),
        )
