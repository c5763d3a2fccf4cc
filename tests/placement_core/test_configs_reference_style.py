"""Configs written the way the reference framework's shipped configs are: `${oc.env:...}` of variables that
are not set, the reference's own resolvers (`subtract`, `not`), Hydra `defaults:` lists and search paths,
YAML 1.1 numbers, and the reference's placement classes (docs/config.md, docs/placement.md)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from placement_core import PlacementError
from placement_core.cluster import Cluster
from placement_core.components import (
    ModelParallelEvalComponentPlacement,
    MultiAgentComponentPlacement,
    MultiAgentEvalComponentPlacement,
    component_placement,
)
from placement_core.configfile import read_config_bytes
from placement_core.jobconfig import default_placement_kind, read_job
from placement_core.plan import Plan, build_plan


def read(text: str, path: Path | None = None, compose: bool = True) -> dict:
    return read_config_bytes(textwrap.dedent(text).encode(), "config file 'job.yaml'", path, compose)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def world_sizes(config: dict, kind: str | None = None) -> dict[str, int]:
    placed = component_placement(config, kind=kind)
    return {name: placed.get_world_size(name) for name in placed.components}


REASONING = """\
runner:
  task_type: reasoning
cluster:
  num_nodes: 1
  component_placement:
    actor,rollout: all
    reward: all
"""

# -- lazy resolution --------------------------------------------------------------------------------------


def test_unset_variables_and_unknown_resolvers_in_keys_rlplace_does_not_read_change_nothing(monkeypatch):
    monkeypatch.delenv("EMBODIED_PATH", raising=False)
    config = read(
        REASONING
        + textwrap.dedent(
            """\
    hydra:
      searchpath:
        - file://${oc.env:EMBODIED_PATH}/config/
    data:
      train_data_paths: ${oc.env:EMBODIED_PATH}/data
      seed: ${no_such_resolver:1}
    rollout:
      model:
        precision: ${actor.model.precision}
    """
        )
    )
    assert world_sizes(config) == {"actor": 8, "rollout": 8, "reward": 8}


def test_a_key_rlplace_reads_names_the_key_and_the_variable(monkeypatch):
    monkeypatch.delenv("RLPLACE_TEST_TP", raising=False)
    config = read(REASONING + "actor:\n  model:\n    tensor_model_parallel_size: ${oc.env:RLPLACE_TEST_TP}\n")
    with pytest.raises(PlacementError) as err:
        component_placement(config)
    message = str(err.value)
    assert message.startswith("actor.model.tensor_model_parallel_size is '${oc.env:RLPLACE_TEST_TP}', which cannot")
    assert "RLPLACE_TEST_TP" in message.split("cannot be resolved")[1]


def test_a_placement_that_cannot_be_resolved_is_refused_with_the_reason(monkeypatch):
    monkeypatch.delenv("RLPLACE_TEST_GPUS", raising=False)
    config = read("cluster:\n  num_nodes: 1\n  component_placement:\n    actor: ${oc.env:RLPLACE_TEST_GPUS}\n")
    with pytest.raises(PlacementError, match=r"placement must be a string.*cannot be resolved.*RLPLACE_TEST_GPUS"):
        component_placement(config)


def test_bad_interpolation_syntax_fails_only_where_read():
    assert world_sizes(read(REASONING + "data:\n  path: ${oops\n"))["rollout"] == 8
    with pytest.raises(PlacementError, match=r"cluster.num_nodes is '.{oops', which cannot be resolved"):
        component_placement(read(REASONING.replace("num_nodes: 1", "num_nodes: ${oops")))


def test_the_reference_resolvers_have_the_reference_meaning():
    config = read(
        REASONING
        + textwrap.dedent(
            """\
    actor:
      model:
        tensor_model_parallel_size: ${subtract:6,2}
    rollout:
      tensor_parallel_size: ${int_div:${actor.model.tensor_model_parallel_size},2}
    algorithm:
      recompute_logprobs: ${not:false}
      scale: ${multiply:2,3}
    """
        )
    )
    assert config["actor"]["model"]["tensor_model_parallel_size"] == 4
    assert config["rollout"]["tensor_parallel_size"] == 2
    assert config["algorithm"] == {"recompute_logprobs": True, "scale": 6}
    assert world_sizes(config) == {"actor": 8, "rollout": 4, "reward": 8}


def test_the_resolvers_are_registered_only_while_rlplace_reads():
    read(REASONING + "x: ${subtract:2,1}\n")
    assert not OmegaConf.has_resolver("subtract")
    assert not OmegaConf.has_resolver("not")


def test_a_resolver_the_program_registered_itself_is_kept(monkeypatch):
    OmegaConf.register_new_resolver("subtract", lambda x, y: 100)
    try:
        assert read(REASONING + "x: ${subtract:2,1}\n")["x"] == 100
        assert OmegaConf.has_resolver("subtract")
    finally:
        OmegaConf.clear_resolver("subtract")


def test_env_number_is_text_and_the_hint_says_how_to_decode_it(monkeypatch):
    monkeypatch.setenv("RLPLACE_TEST_NODES", "2")
    with pytest.raises(PlacementError, match=r"\$\{oc.decode:\$\{oc.env:NAME\}\} makes it a number"):
        component_placement(read(REASONING.replace("num_nodes: 1", "num_nodes: ${oc.env:RLPLACE_TEST_NODES}")))
    decoded = read(REASONING.replace("num_nodes: 1", "num_nodes: ${oc.decode:${oc.env:RLPLACE_TEST_NODES}}"))
    assert world_sizes(decoded)["actor"] == 16


# -- Hydra defaults: lists ---------------------------------------------------------------------------------

BASE = """\
    runner:
      task_type: reasoning
    cluster:
      num_nodes: 1
      component_placement:
        actor,rollout: all
        reward: all
    actor:
      model:
        precision: bf16
        tensor_model_parallel_size: 4
    rollout:
      tensor_parallel_size: 2
    """


def test_defaults_are_composed_from_the_files_directory(tmp_path):
    write(tmp_path, "base.yaml", BASE)
    job = write(
        tmp_path,
        "job.yaml",
        """\
        defaults:
          - base
          - _self_
        rollout:
          tensor_parallel_size: 4
          precision: ${actor.model.precision}
        """,
    )
    config = read(job.read_text(), job)
    assert config["rollout"] == {"tensor_parallel_size": 4, "precision": "bf16"}
    assert world_sizes(config) == {"actor": 8, "rollout": 2, "reward": 8}


def test_no_compose_reads_the_file_alone(tmp_path):
    write(tmp_path, "base.yaml", BASE)
    job = write(
        tmp_path, "job.yaml", "defaults:\n  - base\ncluster:\n  num_nodes: 1\n  component_placement:\n    a: 0\n"
    )
    config = read(job.read_text(), job, compose=False)
    assert "actor" not in config
    assert world_sizes(config) == {"a": 1}


def test_the_search_path_of_the_file_is_used_and_unset_variables_are_named(tmp_path, monkeypatch):
    write(tmp_path / "shared" / "config", "model/big.yaml", "tensor_model_parallel_size: 8\n")
    text = (
        "defaults:\n  - model/big@actor.model\n  - _self_\n"
        "hydra:\n  searchpath:\n    - file://${oc.env:RLPLACE_TEST_ROOT}/config/\n" + REASONING
    )
    job = write(tmp_path / "job", "job.yaml", text)
    monkeypatch.delenv("RLPLACE_TEST_ROOT", raising=False)
    with pytest.raises(PlacementError) as err:
        read(job.read_text(), job)
    message = str(err.value)
    assert "a defaults file cannot be found" in message and "model/big" in message
    assert "file://${oc.env:RLPLACE_TEST_ROOT}/config/" in message  # the search path left out, and why
    monkeypatch.setenv("RLPLACE_TEST_ROOT", str(tmp_path / "shared"))
    config = read(job.read_text(), job)
    assert config["actor"]["model"]["tensor_model_parallel_size"] == 8


def test_a_missing_defaults_file_is_named(tmp_path):
    job = write(tmp_path, "job.yaml", "defaults:\n  - nowhere\n" + textwrap.dedent(REASONING))
    with pytest.raises(PlacementError, match=rf"cannot be found: .*nowhere.* \(searched {tmp_path}\)"):
        read(job.read_text(), job)


def test_a_defaults_list_on_stdin_asks_for_the_file():
    with pytest.raises(PlacementError, match="give the file's path rather than stdin, or --no-compose"):
        read("defaults:\n  - base\n" + textwrap.dedent(REASONING))


# -- YAML 1.1 numbers --------------------------------------------------------------------------------------


def test_base_60_is_the_text_written_not_a_number():
    config = read("cluster:\n  num_nodes: 8\n  component_placement:\n    actor: 1:0\n    reward: 2:0\n")
    assert config["cluster"]["component_placement"] == {"actor": "1:0", "reward": "2:0"}
    placed = component_placement(config)  # not GPU 60 (node 7, GPU 4) nor GPU 120
    assert [(p.cluster_node_rank, p.local_hardware_ranks) for p in placed.get_placement("actor")] == [(0, [1])]
    assert [(p.cluster_node_rank, p.local_hardware_ranks) for p in placed.get_placement("reward")] == [(0, [2])]
    with pytest.raises(PlacementError, match="process ranks must start at 0, '2:1' starts at 1"):
        component_placement(read("cluster:\n  num_nodes: 8\n  component_placement:\n    reward: 2:1\n"))


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("cluster:\n  num_nodes: 010\n", "10"),
        ("cluster:\n  num_nodes: 1\n  component_placement:\n    actor: 010\n", "10"),
    ],
)
def test_a_leading_zero_is_refused_with_how_to_write_it(text, number):
    with pytest.raises(PlacementError, match=rf"'010' has a leading zero, .* octal number 8; write {number} .*\"010\""):
        read(text)


def test_quoted_leading_zero_is_text():
    assert read('a: "010"\n') == {"a": "010"}


# -- the reference's classes -------------------------------------------------------------------------------


def test_evaluation_configs_pick_model_parallel_eval_and_pack_the_rollout():
    config = read(
        """\
        runner:
          task_type: reasoning_eval
        cluster:
          num_nodes: 1
          component_placement:
            rollout,reward: all
        rollout:
          tensor_parallel_size: 2
        """
    )
    assert default_placement_kind(config) == "model-parallel-eval"
    placed = component_placement(config)
    assert isinstance(placed, ModelParallelEvalComponentPlacement)
    assert placed.placement_mode.value == "collocated"
    assert [p.local_hardware_ranks for p in placed.get_placement("rollout")] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [p.local_hardware_ranks for p in placed.get_placement("reward")] == [[r] for r in range(8)]
    assert placed.rollout_dp_size == 4


def test_evaluation_needs_a_continuous_rollout():
    config = read(
        "runner: {task_type: reasoning_eval}\ncluster:\n  num_nodes: 1\n  component_placement:\n    "
        "rollout: 0-1,4-5\n    reward: all\n"
    )
    with pytest.raises(PlacementError, match="one continuous range"):
        component_placement(config)


MULTI_AGENT = """\
    runner:
      task_type: reasoning
    agentloop:
      workflow: mas
    cluster:
      num_nodes: 1
      component_placement:
        actor,reward: all
        rollout: 0-3
        rollout_judge: 4-7
    rollout:
      tensor_parallel_size: 2
    """


def test_multi_agent_training_packs_extra_components_like_the_rollout():
    config = read(MULTI_AGENT)
    assert default_placement_kind(config) == "multi-agent"
    placed = component_placement(config)
    assert isinstance(placed, MultiAgentComponentPlacement)
    assert placed.placement_mode.value == "collocated"
    assert [p.local_hardware_ranks for p in placed.get_placement("rollout")] == [[0, 1], [2, 3]]
    assert [p.local_hardware_ranks for p in placed.get_placement("rollout_judge")] == [[4, 5], [6, 7]]
    assert placed.get_world_size("actor") == 8


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        ("actor: all\n    reward: 0-3\n    rollout: 0-3", "actor and reward on the same GPUs"),
        ("actor,reward: 0-3\n    rollout: 0-3\n    rollout_judge: 2-5", "inside the actor's GPUs"),
        ("actor,reward: all\n    rollout: 0-3\n    planner: 4-5\n    judge: 5-7", "must not overlap"),
    ],
)
def test_multi_agent_rules(placement, message):
    text = MULTI_AGENT.replace(
        "actor,reward: all\n        rollout: 0-3\n        rollout_judge: 4-7", placement.replace("\n    ", "\n        ")
    )
    with pytest.raises(PlacementError, match=message):
        component_placement(read(text))


def test_multi_agent_evaluation_adds_the_extra_component_rule():
    config = read(
        MULTI_AGENT.replace("task_type: reasoning", "task_type: reasoning_eval").replace("actor,reward", "reward")
    )
    assert default_placement_kind(config) == "multi-agent-eval"
    placed = component_placement(config)
    assert isinstance(placed, MultiAgentEvalComponentPlacement)
    assert [p.local_hardware_ranks for p in placed.get_placement("rollout_judge")] == [[4, 5], [6, 7]]


# -- the documented interface ------------------------------------------------------------------------------


def test_rank_fields_compare_equal_to_the_documented_lists():
    placed = component_placement(read(REASONING + "rollout:\n  tensor_parallel_size: 2\n"))
    first = placed.get_placement("rollout")[1]
    assert first.local_hardware_ranks == [2, 3]
    assert [2, 3] == first.local_hardware_ranks  # noqa: SIM300 - the list on the left is the point
    assert first.visible_accelerators == ["2", "3"]
    assert first.local_hardware_ranks != [2] and first.local_hardware_ranks == (2, 3)
    again = Plan.from_json(build_plan(placed).to_json()).component("rollout").processes[1].placement
    assert again == first and again.visible_accelerators == ["2", "3"]
    hash(first)  # records stay immutable and hashable


def test_world_size_is_the_processes_placed_not_the_yaml_count():
    """docs/placement.md, "World size": rollout `all` on 8 GPUs with tensor parallel size 2 is 4 processes."""
    placed = component_placement(read(REASONING + "rollout:\n  tensor_parallel_size: 2\n"))
    assert placed.get_world_size("rollout") == 4
    assert placed.rollout_world_size == 8  # the GPUs, as the reference's rollout_world_size


def test_the_old_context_parallel_key_is_refused_with_the_new_name():
    config = read(REASONING + "actor:\n  model:\n    context_model_parallel_size: 3\n")
    with pytest.raises(PlacementError, match=r"the context parallel size is actor.model.context_parallel_size"):
        component_placement(config)


def test_typos_in_sections_rlplace_owns_are_errors_with_did_you_mean():
    for key in ("gpus_per_node", "accelerator_per_node"):
        with pytest.raises(PlacementError, match=f"cluster: unknown key '{key}'; did you mean 'accelerators_per_node'"):
            Cluster.from_config({"num_nodes": 1, key: 4})
    with pytest.raises(PlacementError, match="profile_data: unknown key 'actor_cots'; did you mean 'actor_cost'"):
        read_job(read(REASONING + "profile_data:\n  actor_cots: 1\n"))


def test_keys_the_reference_and_auto_placement_use_are_accepted():
    Cluster.from_config(
        {
            "num_nodes": 1,
            "recreate_nccl_groups": False,
            "use_wait_before_last_iter_policy": False,
            "net_emulation": {},
            "tracer": {},
            "node_groups": [{"label": "g", "node_ranks": 0, "accelerator_memory_gb": 80, "accelerator_type": "H100"}],
        }
    )
    profile = (
        "profile_data:\n  actor_cost: 1\n  actor_cost_by_type: {H100: 1}\n  actor_memory_gb: 3\n  model_size_gb: 2\n"
    )
    read_job(read(REASONING + profile + "  nvlink_bandwidth_gbps: 400\n"))


def test_costs_beyond_the_bound_are_refused_at_input():
    from placement_core.autoplace import predict

    config = read(
        REASONING + "profile_data:\n  actor_cost: 1.0e+308\n  rollout_cost: 1\n  inference_cost: 1\n"
        "data:\n  rollout_batch_size: 8\n"
    )
    with pytest.raises(
        PlacementError,
        match=r"profile_data.actor_cost must be a finite number of seconds >= 0 \(at most 1e\+09\), got 1e\+308$",
    ):
        predict(read_job(config), "scaling")


def test_a_number_yaml_reads_as_text_gets_the_way_to_write_it():
    with pytest.raises(PlacementError, match=r"'1e308' is text, not a number: write 1\.0e\+308 without quotes"):
        Cluster.from_config({"num_nodes": read("n: 1e308\n")["n"]})


def test_dates_are_shown_as_yaml_not_python():
    with pytest.raises(PlacementError) as err:
        Cluster.from_config({"num_nodes": read("d: 2024-01-01\n")["d"]})
    assert "2024-01-01 (a date to YAML; quote it for text)" in str(err.value)
    assert "datetime" not in str(err.value)
