"""placement_core.autoplace: inputs, both cost models, the spec's worked examples, the output, round trips."""

import json
import math

import pytest
from test_autoplace_configs import (
    autotune,
    example_one,
    example_three,
    example_two,
    predict,
    predict_cost,
    read_reasoning,
    reasoning_config,
    with_placement,
)

from placement_core import Cluster, ModelParallelComponentPlacement, PlacementError, PlacementMode
from placement_core.autoplace.cost import CostModel, StageCost, rollout_capacity, valid_dp_sizes
from placement_core.autoplace.report import render_text

# -- the spec's worked examples ----------------------------------------------------------------------------------


def test_example_one_collocated():
    result = autotune(example_one())
    assert result.mode == "collocated"
    assert result.total_cost == pytest.approx(186.4)
    assert result.collocated_cost == pytest.approx(186.4)
    assert result.component_placement == {"actor,rollout,reward": "all"}


def test_example_two_pipelined_2_2_4():
    result = autotune(example_two())
    assert result.mode == "disaggregated"
    assert result.total_cost == pytest.approx(69.256, abs=5e-4)
    assert result.collocated_cost == pytest.approx(108)
    assert result.component_placement == {"rollout,reward": "0-1", "inference": "2-3", "actor": "4-7"}
    assert {name: c.gpus for name, c in result.components.items()} == {
        "rollout": (0, 1),
        "inference": (2, 3),
        "actor": (4, 7),
    }


def test_example_three_not_worse_than_reference():
    result = autotune(example_three())
    assert result.total_cost <= 289.0957 + 1e-4
    assert result.collocated_cost == pytest.approx(335.0)
    assert result.component_placement == {"rollout,reward": "0-79", "inference": "80-95", "actor": "96-127"}
    text = render_text(result)
    assert text.endswith("# predicted iteration time: 289.10 s; collocated: 335.00 s; 1.16x faster")


def test_printed_block_has_the_seed_shape():
    assert render_text(autotune(example_one())) == (
        "Best placement for this task is:\n\n"
        "cluster:\n"
        "  num_nodes: 1\n"
        "  component_placement:\n"
        "    actor,rollout,reward: all\n"
        "# predicted iteration time: 186.40 s; collocated: 186.40 s; 1.00x faster"
    )
    assert render_text(autotune(example_three())).splitlines()[2:8] == [
        "cluster:",
        "  num_nodes: 16",
        "  component_placement:",
        "    rollout,reward: 0-79",
        "    inference: 80-95",
        "    actor: 96-127",
    ]


def test_json_shape():
    data = json.loads(json.dumps(autotune(example_two()).to_json()))
    assert set(data) == {"mode", "total_cost", "collocated_cost", "component_placement", "components"}
    assert data["components"]["actor"]["gpus"] == [4, 7]
    assert data["components"]["actor"]["per_batch"] == pytest.approx(1.25 * 2 / 1.2)
    assert list(data["components"]) == ["rollout", "inference", "actor"]


# -- inputs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["rollout_cost", "inference_cost", "actor_cost"])
def test_missing_profile_key_is_named(missing):
    config = example_one()
    del config["profile_data"][missing]
    with pytest.raises(PlacementError) as err:
        autotune(config)
    assert str(err.value) == f"profile data is not provided: missing {missing} (add it under profile_data)"


def test_null_profile_key_counts_as_missing_and_all_are_named():
    config = example_one()
    config["profile_data"] = {"actor_cost": None}
    with pytest.raises(PlacementError, match=r"missing rollout_cost, inference_cost, actor_cost \(add them"):
        autotune(config)
    del config["profile_data"]
    with pytest.raises(PlacementError, match="missing rollout_cost"):
        autotune(config)


def test_without_recompute_logprobs_the_chain_has_no_inference():
    config = example_two()
    config["algorithm"]["recompute_logprobs"] = False
    del config["profile_data"]["inference_cost"]
    task = read_reasoning(config)
    assert task.chain == ("rollout", "actor")
    result = autotune(config)
    assert "inference" not in result.components
    assert "inference" not in ",".join(result.component_placement)


def test_with_recompute_logprobs_the_chain_is_rollout_inference_actor():
    assert read_reasoning(example_one()).chain == ("rollout", "inference", "actor")


def test_inference_sizes_default_to_the_actors():
    task = read_reasoning(example_one())
    assert [s.model_parallel for s in task.stages] == [1, 2, 2]
    config = example_one()
    config["inference"] = {"model": {"tensor_model_parallel_size": 4}}
    assert read_reasoning(config).stages[1].model_parallel == 4


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("profile_data", "actor_cost"), "fast", "profile_data.actor_cost must be a finite number"),
        (("profile_data", "actor_cost"), -1, "profile_data.actor_cost must be a finite number"),
        (("profile_data", "actor_cost"), True, "profile_data.actor_cost must be a finite number"),
        (("data", "rollout_batch_size"), None, "data.rollout_batch_size is required"),
        (("data", "rollout_batch_size"), 0, "data.rollout_batch_size must be an integer >= 1"),
        (("algorithm", "n_minibatches"), 3, "algorithm.n_minibatches .3. must divide"),
        (("rollout", "max_running_requests"), "many", "rollout.max_running_requests must be an integer"),
    ],
)
def test_bad_inputs_are_one_line_errors(path, value, message):
    config = example_one()
    config[path[0]][path[1]] = value
    with pytest.raises(PlacementError, match=message) as err:
        autotune(config)
    assert "\n" not in str(err.value)


def test_missing_cluster_and_unknown_cost_model():
    config = example_one()
    del config["cluster"]
    with pytest.raises(PlacementError, match="no 'cluster' section"):
        autotune(config)
    with pytest.raises(PlacementError, match=r"unknown cost model 'quadratic' \(known: scaling, linear\)"):
        autotune(example_one(), "quadratic")


def test_profile_argument_replaces_profile_data():
    config = example_two()
    profile = dict(config.pop("profile_data"))
    assert autotune(config, profile=profile).total_cost == pytest.approx(69.256, abs=5e-4)


def test_profiled_gpus_follow_a_collocated_input_placement():
    # Profiled collocated on 4 of 8 GPUs: W = 4 for every component, so no component may get more than 4.
    config = example_two()
    config["cluster"]["component_placement"] = {"actor,rollout,reward": "0-3"}
    task = read_reasoning(config)
    assert {s.profiled_gpus for s in task.stages} == {4}
    result = autotune(config)
    assert result.collocated_cost is None
    assert all(c.gpus[1] - c.gpus[0] + 1 <= 4 for c in result.components.values())
    assert render_text(result).endswith("collocated: not possible")


def test_profiled_gpus_are_all_gpus_without_an_input_placement():
    for block in (None, {}):
        config = example_two()
        config["cluster"]["component_placement"] = block
        assert {s.profiled_gpus for s in read_reasoning(config).stages} == {8}
        assert autotune(config).total_cost == pytest.approx(69.256, abs=5e-4)


def test_profiled_gpus_are_all_gpus_for_a_disaggregated_input_placement():
    config = with_placement(example_two(), {"rollout,reward": "0-1", "inference": "2-3", "actor": "4-7"})
    assert {s.profiled_gpus for s in read_reasoning(config).stages} == {8}


# -- cost models -----------------------------------------------------------------------------------------------


def _costs(config, model=CostModel.scaling):
    task = read_reasoning(config)
    return task, {s.name: StageCost.build(task, s, model) for s in task.stages}


def test_valid_dp_sizes_divide_the_training_batch():
    task = read_reasoning(example_three())  # rbs*gs/nmb = 2048, gs = 16: dp | 128
    assert sorted(valid_dp_sizes(task, 2)) == [1, 2, 4, 8, 16, 32, 64]


def test_scaling_actor_cost():
    _, costs = _costs(example_two())
    c = 40 / 32
    assert costs["actor"](8) == c
    assert costs["actor"](4) == pytest.approx(c * 2 / 1.2)
    assert costs["actor"](1) == pytest.approx(c * 8 / 1.8)
    # Non-monotone: just under W is cheaper than W itself (1/(1+0.1) of the linear cost).
    _, costs16 = _costs(reasoning_config(nodes=2, group_size=2, n_minibatches=2, rollout_batch_size=3))
    assert costs16["actor"](15) is not None
    assert costs16["actor"](15) < costs16["actor"](16)


def test_scaling_actor_needs_valid_dp():
    _, costs = _costs(example_one())  # actor tp 2, dp | 8 (rbs 128 / nmb 4 = 32 groups, dp | 32)
    assert costs["actor"](6) is None  # dp 3 does not divide 32
    assert "data-parallel size 3" in costs["actor"].why_not(6)
    assert costs["actor"](3) is None  # not a multiple of tp
    assert costs["actor"](4) is not None


def test_no_valid_dp_means_any_multiple_of_mp():
    # rbs*gs/nmb = 3 is never a multiple of dp*gs = 2*dp: no dp is valid, so every g is allowed.
    config = reasoning_config(group_size=2, n_minibatches=2, rollout_batch_size=3)
    task, costs = _costs(config)
    assert valid_dp_sizes(task, 1) == frozenset()
    assert all(costs["actor"](g) is not None for g in range(1, 9))


def test_scaling_rollout_capacity_rule():
    assert rollout_capacity(64) == 64
    assert rollout_capacity(128) == 116
    _, costs = _costs(example_three())  # rbs*gs = 8192 requests, cap 116: 71 engines fit them all
    c = 224 / 512
    assert costs["rollout"](71) == c
    assert costs["rollout"](70) == pytest.approx(c * 128 / 70)
    assert costs["rollout"](128) == c


def test_linear_model():
    _, costs = _costs(example_two(), CostModel.linear)
    assert costs["actor"](4) == pytest.approx(40 / 32 * 2)
    assert costs["rollout"](2) == pytest.approx(60 / 32 * 4)


def test_linear_model_search():
    result = autotune(example_two(), "linear")
    # Under the linear model pipelining adds warmup and never beats time division on this example.
    assert result.mode == "collocated"
    assert result.total_cost == pytest.approx(108)


# -- no placement, ties ----------------------------------------------------------------------------------------


def test_no_valid_placement_is_a_clean_error():
    # Profiled on 1 of 2 GPUs: nothing may use 2 GPUs (collocated) and 3 stages cannot share 2 GPUs.
    config = reasoning_config(nodes=1, per_node=2, placement={"actor,rollout,reward": "0"})
    with pytest.raises(PlacementError, match=r"no valid placement for rollout -> inference -> actor on 2 GPUs"):
        autotune(config)


def test_one_gpu_is_collocated():
    result = autotune(reasoning_config(per_node=1))
    assert result.mode == "collocated"


def test_ties_prefer_collocated():
    # All costs zero: every placement takes 0 s; collocated has the fewest GPU sets.
    config = example_two()
    config["profile_data"] = {"actor_cost": 0, "inference_cost": 0, "rollout_cost": 0}
    assert autotune(config).mode == "collocated"


def test_same_input_same_output():
    first = autotune(example_three()).to_json()
    assert all(autotune(example_three()).to_json() == first for _ in range(3))


# -- round trips: the block is a valid placement and `rlplace cost` of it is the predicted time -----------------

ROUND_TRIP = [
    example_one(),
    example_two(),
    example_three(),
    reasoning_config(nodes=4, actor_tp=4, rollout_tp=2, rollout_batch_size=256, max_running_requests=32),
    reasoning_config(
        nodes=2,
        recompute_logprobs=False,
        costs={"actor_cost": 80, "rollout_cost": 120},
        group_size=8,
        n_minibatches=2,
    ),
]


@pytest.mark.parametrize("model", ["scaling", "linear"])
@pytest.mark.parametrize("config", ROUND_TRIP)
def test_round_trip(config, model):
    result = autotune(config, model)
    pasted = with_placement(config, result.component_placement)
    placement = ModelParallelComponentPlacement(pasted, Cluster.from_config(pasted["cluster"]))
    expected = PlacementMode.COLLOCATED if result.mode == "collocated" else PlacementMode.DISAGGREGATED
    assert placement.placement_mode is expected
    for name, choice in result.components.items():
        if name == "inference" and result.mode == "collocated":
            continue
        ranks = placement.get_hardware_ranks(name)
        assert (ranks[0], ranks[-1]) == choice.gpus
    assert predict_cost(pasted, model) == pytest.approx(result.total_cost, rel=1e-12)
    assert predict_cost(pasted, model) <= predict_cost(with_placement(config, {"actor,rollout,reward": "all"}), model)


def test_cost_of_a_hand_written_placement():
    config = with_placement(example_two(), {"rollout,reward": "0-3", "inference": "4-5", "actor": "6-7"})
    schedule = predict(config)
    c_r, c_i, c_a = 60 / 32, 8 / 32, 40 / 32
    per_batch = [c_r, c_i * 4 / 1.4, c_a * 4 / 1.4]  # rollout fits in 4 engines; s = 4 for the others
    assert schedule.per_batch == pytest.approx(per_batch)
    assert schedule.total == pytest.approx(sum(per_batch) + max(per_batch) * 31)
    assert schedule.total >= autotune(example_two()).total_cost


def test_cost_without_inference_component_runs_it_on_the_actor():
    config = with_placement(example_two(), {"rollout,reward": "0-3", "actor": "4-7"})
    schedule = predict(config)
    r, i, a = schedule.per_batch
    assert schedule.ranges[1] == schedule.ranges[2] == (4, 7)
    assert schedule.total == pytest.approx(r + (i + a) + max(r, i + a) * 31)


def test_cost_of_an_invalid_size_names_the_reason():
    config = with_placement(example_one(), {"rollout,reward": "0-1", "inference": "2-3", "actor": "4-7"})
    config["data"]["rollout_batch_size"] = 96  # 96/4 = 24 groups: actor dp 2 is valid, inference dp 1 too
    assert math.isfinite(predict_cost(config))
    config = with_placement(example_one(), {"rollout,reward": "0-1", "actor": "2-7"})
    config["algorithm"]["recompute_logprobs"] = False
    with pytest.raises(PlacementError, match=r"component 'actor' on 6 GPUs has no cost .* data-parallel size 3"):
        predict_cost(config)
