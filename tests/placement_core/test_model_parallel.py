"""ModelParallelComponentPlacement: reasoning components laid out by model-parallel sizes (docs/placement.md, "Modes")."""

import pytest

from placement_core import (
    Cluster,
    FlexiblePlacementStrategy,
    ModelParallelComponentPlacement,
    PackedPlacementStrategy,
    PlacementError,
    PlacementMode,
)
from placement_core.plan import build_plan, shared_with


def job(
    placement,
    *,
    num_nodes=1,
    gpus=8,
    actor_tp=None,
    actor_cp=None,
    actor_pp=None,
    rollout_tp=None,
    rollout_pp=None,
    inference_tp=None,
    recompute=None,
    auto=None,
    pre_process=None,
):
    cluster = {"num_nodes": num_nodes, "accelerators_per_node": gpus, "component_placement": placement}
    if auto is not None:
        cluster["auto_scheduler"] = auto
    if pre_process is not None:
        cluster["use_pre_process_policy"] = pre_process
    config = {
        "cluster": cluster,
        "actor": {
            "model": {
                "tensor_model_parallel_size": actor_tp,
                "context_parallel_size": actor_cp,
                "pipeline_model_parallel_size": actor_pp,
            }
        },
        "rollout": {"tensor_parallel_size": rollout_tp, "pipeline_parallel_size": rollout_pp},
    }
    if inference_tp is not None:
        config["inference"] = {"model": {"tensor_model_parallel_size": inference_tp}}
    if recompute is not None:
        config["algorithm"] = {"recompute_logprobs": recompute}
    return config


def place(placement, **kwargs):
    config = job(placement, **kwargs)
    return ModelParallelComponentPlacement(config, Cluster.from_config(config["cluster"]))


def error(placement, **kwargs):
    with pytest.raises(PlacementError) as info:
        place(placement, **kwargs)
    return str(info.value)


def gpus_of(placed, name):
    return [list(p.local_hardware_ranks) for p in placed.get_placement(name)]


# -- collocated -------------------------------------------------------------------------------------------------


def test_seed_collocated_two_nodes():
    """Seed 002: `actor,rollout: all` on 2 x 8 GPUs (with the reward that model-parallel placement needs)."""
    placed = place({"actor,rollout": "all", "reward": "all"}, num_nodes=2)
    assert placed.placement_mode is PlacementMode.COLLOCATED
    assert placed.is_collocated and not placed.is_disaggregated and not placed.is_auto
    assert not placed.has_dedicated_inference
    for name in ("actor", "rollout", "reward"):
        assert placed.get_world_size(name) == 16
        assert isinstance(placed.get_strategy(name), PackedPlacementStrategy)
        assert [p.cluster_node_rank for p in placed.get_placement(name)] == [0] * 8 + [1] * 8
    assert placed.actor_world_size == placed.rollout_world_size == 16
    assert placed.get_hardware_ranks("rollout") == list(range(16))


def test_seed_collocated_without_reward_is_rejected():
    assert error({"actor,rollout": "all"}, num_nodes=2) == (
        "model-parallel placement needs components actor, rollout and reward; missing: reward"
    )


def test_collocated_strided_rollout():
    """Actor TP 4, rollout TP 2 on 8 GPUs -> rollout [0,2],[1,3],[4,6],[5,7]."""
    placed = place({"actor,rollout,reward": "0-7"}, actor_tp=4, rollout_tp=2)
    assert gpus_of(placed, "rollout") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert [list(p.visible_accelerators) for p in placed.get_placement("rollout")] == [
        ["0", "2"],
        ["1", "3"],
        ["4", "6"],
        ["5", "7"],
    ]
    strategy = placed.get_strategy("rollout")
    assert (strategy.num_hardware_per_process, strategy.stride) == (2, 2)
    assert gpus_of(placed, "actor") == [[r] for r in range(8)]
    assert gpus_of(placed, "reward") == [[r] for r in range(8)]
    # We differ: get_world_size is the number of processes, rollout_world_size the GPUs.
    assert placed.get_world_size("rollout") == 4
    assert placed.rollout_world_size == 8
    assert placed.rollout_dp_size == 4
    assert placed.actor_world_size == 8
    assert placed.actor_dp_size == 2


def test_collocated_stride_over_nodes():
    placed = place({"actor,rollout": "all", "reward": "0"}, num_nodes=2, actor_tp=8, rollout_tp=2)
    rollout = placed.get_placement("rollout")
    assert [list(p.local_hardware_ranks) for p in rollout[:4]] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [(p.cluster_node_rank, list(p.local_hardware_ranks)) for p in rollout[4:5]] == [(1, [0, 4])]


def test_collocated_only_tp_enters_the_stride():
    placed = place({"actor,rollout": "0-7", "reward": "0"}, actor_tp=4, actor_pp=2, rollout_tp=2, rollout_pp=2)
    assert gpus_of(placed, "rollout") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert placed.actor_dp_size == 1  # 8 // (4*1*2)
    assert placed.rollout_dp_size == 2  # 8 // (2*2)


def test_collocated_rollout_tp_larger_than_actor_tp():
    placed = place({"actor,rollout": "0-7", "reward": "0"}, actor_tp=2, rollout_tp=4)
    assert gpus_of(placed, "rollout") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert placed.get_strategy("rollout").stride == 1


def test_collocated_stride_needs_rollout_tp_to_divide_actor_tp():
    assert error({"actor,rollout": "0-5", "reward": "0"}, actor_tp=6, rollout_tp=4) == (
        "collocated mode needs the rollout tensor parallel size (4) to divide the actor's (6)"
    )


def test_collocated_allows_no_inference():
    assert error({"actor,rollout": "0-3", "inference": "4-7", "reward": "0"}) == (
        "collocated mode (actor and rollout on the same GPUs) allows no inference component"
    )


def test_collocated_with_separate_keys():
    placed = place({"actor": "0-3", "rollout": "0-3", "reward": "4-7"})
    assert placed.is_collocated


def test_collocated_rollout_gpus_not_divisible_by_tp():
    """The message names rollout, not the whole shared key."""
    assert error({"actor,rollout": "0-5", "reward": "0"}, rollout_tp=4) == (
        "component 'rollout': packed placement: 6 ranks (0-5) are not divisible by "
        "num_hardware_per_process*stride = 4 (in 'actor,rollout: 0-5')"
    )


# -- disaggregated ----------------------------------------------------------------------------------------------


def test_disaggregated_reasoning():
    placed = place(
        {"actor": "0-3", "rollout": "4-7", "inference": "8-11", "reward": "12-15"},
        num_nodes=2,
        actor_tp=2,
        rollout_tp=2,
        inference_tp=2,
        recompute=True,
    )
    assert placed.placement_mode is PlacementMode.DISAGGREGATED
    assert placed.is_disaggregated and placed.has_dedicated_inference
    assert gpus_of(placed, "rollout") == [[4, 5], [6, 7]]
    assert gpus_of(placed, "actor") == [[0], [1], [2], [3]]
    assert gpus_of(placed, "inference") == [[0], [1], [2], [3]]
    assert [p.cluster_node_rank for p in placed.get_placement("inference")] == [1] * 4
    assert placed.get_world_size("rollout") == 2
    assert placed.get_world_size("actor") == placed.get_world_size("inference") == 4
    assert (placed.actor_world_size, placed.rollout_world_size, placed.inference_world_size) == (4, 4, 4)
    assert (placed.actor_dp_size, placed.rollout_dp_size, placed.inference_dp_size) == (2, 2, 2)


def test_disaggregated_rollout_uses_tp_times_pp():
    placed = place({"actor": "0-3", "rollout": "4-7", "reward": "0"}, rollout_tp=2, rollout_pp=2)
    assert gpus_of(placed, "rollout") == [[4, 5, 6, 7]]
    assert placed.rollout_dp_size == 1


def test_disaggregated_rollout_gpus_must_be_a_multiple_of_tp():
    """We differ: the reference silently builds one 6-GPU process for 6 GPUs at TP 4."""
    assert error({"actor": "0-1", "rollout": "2-7", "reward": "0"}, rollout_tp=4) == (
        "component 'rollout': 6 GPUs are not a multiple of tensor*pipeline parallel size 4 (in 'rollout: 2-7')"
    )


def test_reward_is_unconstrained():
    placed = place({"actor": "0-3", "rollout": "4-7", "reward": "0,2,5"})
    assert placed.is_disaggregated
    assert isinstance(placed.get_strategy("reward"), FlexiblePlacementStrategy)
    assert placed.get_hardware_ranks("reward") == [0, 2, 5]
    continuous = place({"actor": "0-3", "rollout": "4-7", "reward": "2-5"})
    assert isinstance(continuous.get_strategy("reward"), PackedPlacementStrategy)


def test_inference_tp_defaults_to_the_actors():
    assert error({"actor": "0-3", "rollout": "4-5", "inference": "6", "reward": "0"}, actor_tp=2) == (
        "component 'inference': tensor parallel size 2 is larger than its 1 GPUs (in 'inference: 6')"
    )


def test_inference_needs_recompute_logprobs():
    assert error({"actor": "0-3", "rollout": "4-5", "inference": "6-7", "reward": "0"}, recompute=False) == (
        "an inference component needs algorithm.recompute_logprobs: true (it recomputes log-probs)"
    )


def test_critic_and_critic_inference_disaggregated():
    placed = place({"actor": "0-1", "rollout": "2-3", "critic": "4-5", "critic_inference": "6", "reward": "7"})
    assert placed.is_disaggregated
    assert gpus_of(placed, "critic") == [[4], [5]]
    assert gpus_of(placed, "critic_inference") == [[6]]


def test_neither_mode_names_both():
    assert error({"actor": "0-3", "rollout": "2-5", "reward": "6"}) == (
        "actor and rollout must be on the same GPUs (collocated mode) or actor, rollout, inference, critic and "
        "critic_inference on disjoint GPUs (disaggregated mode); got actor: 0-3, rollout: 2-5"
    )


def test_overlapping_critic_is_neither_mode():
    message = error({"actor": "0-3", "rollout": "4-7", "critic": "3-4", "reward": "0"})
    assert message.endswith("got actor: 0-3, rollout: 4-7, critic: 3-4")


# -- checks in order --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["actor", "rollout", "reward"])
def test_required_components(missing):
    placement = {"actor": "0-3", "rollout": "4-7", "reward": "0"}
    del placement[missing]
    assert error(placement) == (
        f"model-parallel placement needs components actor, rollout and reward; missing: {missing}"
    )


@pytest.mark.parametrize("name", ["actor", "rollout", "inference", "critic", "critic_inference"])
def test_gpu_lists_must_be_continuous(name):
    placement = {"actor": "0-1", "rollout": "2-3", "reward": "0"}
    placement[name] = "4,6"
    assert error(placement) == f"component '{name}': its GPUs must be one continuous range, got '4,6'"


def test_model_parallel_components_need_gpus():
    config = job({"actor": {"node_group": "cpu", "placement": "0"}, "rollout": "0-3", "reward": "0"})
    config["cluster"]["node_groups"] = [{"label": "cpu", "node_ranks": 0, "ignore_hardware": True}]
    with pytest.raises(PlacementError, match=r"^component 'actor': model-parallel components must be placed on GPUs$"):
        ModelParallelComponentPlacement(config, Cluster.from_config(config["cluster"]))


def test_actor_tp_larger_than_its_gpus():
    assert error({"actor,rollout": "0-3", "reward": "0"}, actor_tp=8) == (
        "component 'actor': tensor parallel size 8 is larger than its 4 GPUs (in 'actor,rollout: 0-3')"
    )


def test_rollout_tp_larger_than_its_gpus():
    assert error({"actor": "0-3", "rollout": "4-5", "reward": "0"}, rollout_tp=4) == (
        "component 'rollout': tensor parallel size 4 is larger than its 2 GPUs (in 'rollout: 4-5')"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"actor_tp": "2"},
            "actor.model.tensor_model_parallel_size must be an integer >= 1, got '2' ('2' is text, not a number: write 2 without quotes; a value from ${oc.env:NAME} is always text, ${oc.decode:${oc.env:NAME}} makes it a number)",
        ),
        ({"rollout_tp": 0}, "rollout.tensor_parallel_size must be an integer >= 1, got 0"),
        ({"rollout_pp": True}, "rollout.pipeline_parallel_size must be an integer >= 1, got true"),
        ({"recompute": "yes"}, "algorithm.recompute_logprobs must be true or false, got 'yes'"),
        ({"auto": 1}, "cluster.auto_scheduler must be true or false, got 1"),
    ],
)
def test_bad_settings(kwargs, message):
    assert error({"actor,rollout,reward": "0-7"}, **kwargs) == message


# -- auto -------------------------------------------------------------------------------------------------------


AUTO = {"actor": "0-1", "rollout": "2-5", "inference": "6-7", "reward": "0-7"}


def test_auto_mode():
    placed = place(AUTO, auto=True, rollout_tp=2)
    assert placed.placement_mode is PlacementMode.AUTO and placed.is_auto
    assert gpus_of(placed, "actor") == [[r] for r in range(8)]
    assert placed.actor_world_size == 8
    assert gpus_of(placed, "rollout") == [[2, 3], [4, 5]]
    assert gpus_of(placed, "inference") == [[6], [7]]


def test_auto_mode_with_pre_process_policy():
    placed = place(AUTO, auto=True, pre_process=True, rollout_tp=2)
    assert gpus_of(placed, "rollout") == [[0, 1], [2, 3], [4, 5]]
    assert placed.rollout_world_size == 6


def test_auto_mode_without_inference():
    placed = place({"actor": "0-3", "rollout": "4-7", "reward": "0"}, auto=True)
    assert placed.is_auto


@pytest.mark.parametrize(
    "placement",
    [
        {"actor": "1-2", "rollout": "3-5", "inference": "6-7", "reward": "0"},  # not from GPU 0
        {"actor": "0-1", "rollout": "2-5", "inference": "6", "reward": "0"},  # not to the last GPU
        {"actor": "2-3", "rollout": "0-1", "inference": "4-7", "reward": "0"},  # wrong order
        {"actor,rollout": "0-7", "reward": "0"},  # not disjoint
    ],
)
def test_auto_mode_order(placement):
    assert error(placement, auto=True).startswith(
        "cluster.auto_scheduler needs actor, rollout and inference on disjoint GPU ranges in that order, from GPU 0 "
        "to the last GPU (7); got actor: "
    )


def test_auto_scheduler_with_a_critic_is_not_auto():
    placed = place({"actor": "0-1", "rollout": "2-3", "critic": "4-5", "reward": "6"}, auto=True)
    assert placed.is_disaggregated


# -- accessors --------------------------------------------------------------------------------------------------


def test_accessors_follow_the_final_strategies():
    placed = place({"actor,rollout": "0-7", "reward": "0-7"}, actor_tp=2, rollout_tp=2)
    assert placed.components == ["actor", "rollout", "reward"]
    assert placed.get_world_size("rollout") == len(placed.get_placement("rollout")) == 4
    assert placed.get_hardware_ranks("rollout") == list(range(8))
    with pytest.raises(PlacementError, match=r"unknown component 'inference' \(known: actor, rollout, reward\)"):
        placed.get_strategy("inference")
    assert placed.inference_world_size == 0


def test_units_follow_the_final_strategies_in_auto_mode():
    """The auto actor holds every GPU, so the plan says it shares them with rollout and inference."""
    placed = place(AUTO, auto=True, pre_process=True)
    assert len(placed.get_units("actor")) == 8
    assert len(placed.get_units("rollout")) == 6
    sharing = shared_with(build_plan(placed))
    actor = {other for (name, _), others in sharing.items() if name == "actor" for other in others}
    inference = {other for (name, _), others in sharing.items() if name == "inference" for other in others}
    assert actor == {"rollout", "inference", "reward"}
    assert inference == {"actor", "reward"}


def test_reward_on_cpu_nodes_keeps_its_node_placement():
    """Reward is unconstrained: a rule-based reward on CPU-only nodes is not packed onto GPUs."""
    config = job({"actor,rollout": "0-7", "reward": {"node_group": "cpu", "placement": "0:0-3"}})
    config["cluster"].update(num_nodes=2, accelerators_per_node=[8, 0], node_groups=[{"label": "cpu", "node_ranks": 1}])
    placed = ModelParallelComponentPlacement(config, Cluster.from_config(config["cluster"]))
    assert placed.is_collocated
    assert placed.get_strategy("reward").kind == "node"
    assert [(p.cluster_node_rank, p.local_accelerator_rank) for p in placed.get_placement("reward")] == [(1, -1)] * 4
