"""Config builders shared by the auto placement tests (plain dicts, as `yaml.safe_load` gives them), and the
auto placement entry points called on such a config the way the CLI calls them (config -> `read_job` -> the
typed API); no tests."""

from __future__ import annotations

from collections.abc import Mapping

from placement_core import autoplace
from placement_core.autoplace.embodied import EmbodiedTask
from placement_core.autoplace.embodied import read_embodied as read_embodied_job
from placement_core.autoplace.inputs import ReasoningTask
from placement_core.autoplace.inputs import read_reasoning as read_reasoning_job
from placement_core.autoplace.report import AutotuneResult
from placement_core.autoplace.search import Schedule
from placement_core.jobconfig import read_job


def autotune(config: Mapping, cost_model: str = "scaling", *, profile: Mapping | None = None) -> AutotuneResult:
    return autoplace.autotune(read_job(config, profile), cost_model)


def predict(config: Mapping, cost_model: str = "scaling") -> Schedule:
    return autoplace.predict(read_job(config), cost_model)


def predict_cost(config: Mapping, cost_model: str = "scaling") -> float:
    return autoplace.predict_cost(read_job(config), cost_model)


def read_reasoning(config: Mapping) -> ReasoningTask:
    return read_reasoning_job(read_job(config))


def read_embodied(config: Mapping) -> EmbodiedTask:
    return read_embodied_job(read_job(config))


def reasoning_config(
    *,
    nodes: int = 1,
    per_node: int | list[int] = 8,
    actor_tp: int = 1,
    rollout_tp: int = 1,
    inference_tp: int | None = None,
    group_size: int = 16,
    n_minibatches: int = 4,
    rollout_batch_size: int = 128,
    max_running_requests: int | None = 64,
    recompute_logprobs: bool | None = None,
    costs: dict[str, float] | None = None,
    placement: dict[str, str] | None = None,
) -> dict:
    config: dict = {
        "runner": {"task_type": "reasoning"},
        "cluster": {"num_nodes": nodes, "accelerators_per_node": per_node},
        "actor": {"model": {"tensor_model_parallel_size": actor_tp, "pipeline_model_parallel_size": 1}},
        "rollout": {"tensor_parallel_size": rollout_tp, "pipeline_parallel_size": 1},
        "algorithm": {"group_size": group_size, "n_minibatches": n_minibatches},
        "data": {"rollout_batch_size": rollout_batch_size},
        "profile_data": dict(costs or {"actor_cost": 95.7, "inference_cost": 30.8, "rollout_cost": 59.9}),
    }
    if max_running_requests is not None:
        config["rollout"]["max_running_requests"] = max_running_requests
    if inference_tp is not None:
        config["inference"] = {"model": {"tensor_model_parallel_size": inference_tp}}
    if recompute_logprobs is not None:
        config["algorithm"]["recompute_logprobs"] = recompute_logprobs
    if placement is not None:
        config["cluster"]["component_placement"] = placement
    return config


def example_one() -> dict:
    """Spec worked example 1: 8 GPUs, collocated is best at 186.4 s."""
    return reasoning_config(actor_tp=2, group_size=16, n_minibatches=4, rollout_batch_size=128)


def example_two() -> dict:
    """Spec worked example 2: 8 GPUs, pipelined 2/2/4 at 69.256 s (collocated 108 s)."""
    return reasoning_config(
        group_size=4,
        n_minibatches=1,
        rollout_batch_size=32,
        max_running_requests=128,
        costs={"actor_cost": 40, "inference_cost": 8, "rollout_cost": 60},
    )


def example_three() -> dict:
    """Spec worked example 3: 128 GPUs; the reference finds 289.0957 s."""
    return reasoning_config(
        nodes=16,
        actor_tp=2,
        group_size=16,
        n_minibatches=4,
        rollout_batch_size=512,
        max_running_requests=128,
        costs={"actor_cost": 101, "inference_cost": 10, "rollout_cost": 224},
    )


def with_placement(config: dict, block: dict[str, str]) -> dict:
    return {**config, "cluster": {**config["cluster"], "component_placement": dict(block)}}


def embodied_config(
    *,
    gpus: int = 8,
    env_num: int = 192,
    stages: int | None = 2,
    env_profile: dict | None = None,
    rollout_profile: dict | None = None,
    actor_cost: float = 40.0,
    placement: dict[str, str] | None = None,
) -> dict:
    config: dict = {
        "runner": {"task_type": "embodied"},
        "cluster": {"num_nodes": 1, "accelerators_per_node": gpus},
        "rollout": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1},
        "data": {"env_num": env_num},
        "profile_data": {
            "actor_cost": actor_cost,
            "env_profile_data": env_profile or {4: 0.5, 8: 1.2, 16: 3.5, 32: 16.0},
            "rollout_profile_data": rollout_profile or {4: 0.3, 16: 0.4, 64: 0.9},
        },
    }
    if stages is not None:
        config["rollout"]["pipeline_stage_num"] = stages
    if placement is not None:
        config["cluster"]["component_placement"] = placement
    return config
