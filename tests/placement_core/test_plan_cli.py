"""plan.py and cli/plan.py: the plan as data, process environments, and `rlplace plan`."""

import json
import shlex
import textwrap

import pytest
import yaml
from typer.testing import CliRunner

from placement_core import Placement, PlacementError
from placement_core.cli import app
from placement_core.components import component_placement
from placement_core.jobconfig import default_placement_kind
from placement_core.plan import build_plan, shared_with

PLACEMENT_FIELDS = list(Placement._fields)

COLLOCATED = """\
cluster:
  num_nodes: 1
  component_placement:
    actor,rollout: 0-7
    reward: 0-7
"""

REASONING = """\
runner:
  task_type: reasoning
cluster:
  num_nodes: 1
  component_placement:
    actor,rollout: all
    reward: all
actor:
  model:
    tensor_model_parallel_size: 4
rollout:
  tensor_parallel_size: 2
"""

EMBODIED = """\
cluster:
  num_nodes: 2
  accelerators_per_node: [8, 0]
  node_groups:
    - label: robots
      node_ranks: 1
      hardware:
        type: Franka
        configs: [{node_rank: 1, robot_ip: 10.0.0.9}]
      env_configs:
        - node_ranks: 1
          env_vars: [{ROS_DOMAIN_ID: 7}, {NOTE: "two words"}]
    - label: cpu
      node_ranks: 0-1
      ignore_hardware: true
      env_configs:
        - {node_ranks: 0, env_vars: [{OMP_NUM_THREADS: 4}]}
        - {node_ranks: 1, env_vars: [{MKL_NUM_THREADS: 2}, {CUDA_VISIBLE_DEVICES: "9"}]}
  component_placement:
    env: {node_group: robots, placement: "0:0-1"}
    rollout: 0-7
    agent: {node_group: cpu, placement: "0-1:0-3"}
"""


@pytest.fixture
def write(tmp_path):
    def write(text, name="job.yaml"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    return write


def invoke(*args):
    return CliRunner().invoke(app, ["plan", *args])


def plan_of(text, **kwargs):
    return component_placement(yaml.safe_load(text), **kwargs)


# -- plan.py ----------------------------------------------------------------------------------------------------


def test_default_placement_kind():
    assert default_placement_kind({"runner": {"task_type": "reasoning"}}) == "model-parallel"
    assert default_placement_kind({"runner": {"task_type": "embodied"}}) == "hybrid"
    assert default_placement_kind({}) == "hybrid"


def test_component_placement_picks_the_class_from_the_task_type():
    assert plan_of(REASONING).placement_mode.value == "collocated"
    assert plan_of(REASONING, kind="hybrid").placement_mode.value == "hybrid"
    assert plan_of(COLLOCATED).placement_mode.value == "hybrid"
    assert plan_of(COLLOCATED, kind="model-parallel").placement_mode.value == "collocated"


def test_component_placement_needs_a_cluster_section():
    with pytest.raises(PlacementError, match="the config has no 'cluster' section"):
        component_placement({"actor": {}})


def test_build_plan_shape():
    data = build_plan(plan_of(REASONING)).to_dict()
    assert data["mode"] == "collocated"
    assert list(data["components"]) == ["actor", "rollout", "reward"]
    rollout = data["components"]["rollout"]
    assert rollout["world_size"] == 4
    assert rollout["hardware_ranks"] == list(range(8))
    assert rollout["strategy"] == "packed"
    assert [p["local_hardware_ranks"] for p in rollout["processes"]] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    for process in rollout["processes"]:
        assert set(PLACEMENT_FIELDS) <= set(process)
    json.dumps(data)  # JSON-ready


def test_shared_with_is_per_process():
    sharing = shared_with(build_plan(plan_of(REASONING)))
    assert sharing[("rollout", 0)] == ("actor", "reward")
    assert set(sharing) == {
        (name, rank) for name, size in (("actor", 8), ("rollout", 4), ("reward", 8)) for rank in range(size)
    }


def test_shared_with_only_lists_components_on_the_same_resources():
    assert not any(shared_with(build_plan(plan_of(EMBODIED))).values())


def test_shared_with_names_only_components_on_the_same_gpu_of_the_same_node():
    """rollout on a4090 node shares nothing with the actor, which has no process there."""
    config = {
        "cluster": {
            "num_nodes": 2,
            "accelerators_per_node": [8, 4],
            "node_groups": [{"label": "a800", "node_ranks": 0}, {"label": "4090", "node_ranks": 1}],
            "component_placement": {
                "actor": {"node_group": "a800", "placement": "0-7"},
                "rollout": {"node_group": "a800,4090", "placement": "6-11"},
            },
        }
    }
    sharing = shared_with(build_plan(component_placement(config)))
    assert [sharing[("rollout", rank)] for rank in range(6)] == [("actor",)] * 2 + [()] * 4
    assert [sharing[("actor", rank)] for rank in range(8)] == [()] * 6 + [("rollout",)] * 2


def test_process_env_applies_the_node_groups_env_configs():
    planned = build_plan(plan_of(EMBODIED))
    assert planned.component("env").processes[0].env["ROS_DOMAIN_ID"] == "7"
    agent = planned.component("agent").processes
    on_node_0, on_node_1 = agent[0].env, agent[2].env
    assert (on_node_0["OMP_NUM_THREADS"], on_node_1["MKL_NUM_THREADS"]) == ("4", "2")
    assert "MKL_NUM_THREADS" not in on_node_0 and "OMP_NUM_THREADS" not in on_node_1
    # The placement's own variables win over a group's.
    assert on_node_1["CUDA_VISIBLE_DEVICES"] == ""
    assert "OMP_NUM_THREADS" not in planned.component("rollout").processes[0].env


def test_build_plan_with_env():
    data = build_plan(plan_of(EMBODIED)).to_dict()
    agent = data["components"]["agent"]["processes"]
    assert [p["env"].get("OMP_NUM_THREADS") for p in agent] == ["4", "4", None, None]
    assert [p["env"].get("MKL_NUM_THREADS") for p in agent] == [None, None, "2", "2"]
    assert {p["env"]["MASTER_ADDR"] for p in agent} == {"node-0"}
    assert {p["env"]["WORLD_SIZE"] for p in agent} == {"4"}


def test_build_plan_not_isolated():
    data = build_plan(plan_of(COLLOCATED), isolate_accelerator=False).to_dict()
    for process in data["components"]["actor"]["processes"]:
        assert process["visible_accelerators"] == [str(i) for i in range(8)]
        assert process["local_accelerator_rank"] == 0
        assert process["isolate_accelerator"] is False


# -- rlplace plan -----------------------------------------------------------------------------------------------


def test_table(write):
    result = invoke(write(REASONING))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("mode: collocated\n")
    assert "rollout: 4 processes, packed strategy, node group cluster" in result.stdout
    assert "0,2" in result.stdout and "5,7" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml(write, fmt):
    result = invoke(write(REASONING), "--format", fmt)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert set(data) == {"mode", "components"}
    assert data["mode"] == "collocated"
    for component in data["components"].values():
        assert {"world_size", "hardware_ranks", "strategy", "node_groups", "processes"} <= set(component)
        assert len(component["processes"]) == component["world_size"]
        for process in component["processes"]:
            assert set(PLACEMENT_FIELDS) <= set(process)
    # The stored plan, plus each component's shares_with (the other components on any of its GPUs).
    planned = build_plan(plan_of(REASONING))
    shares = {name: component.pop("shares_with") for name, component in data["components"].items()}
    assert data == planned.to_dict()
    assert shares == {"actor": ["rollout", "reward"], "rollout": ["actor", "reward"], "reward": ["actor", "rollout"]}
    assert list(data["components"]["actor"]) == ["world_size", "strategy", "node_groups", "hardware_ranks", "processes"]


def test_json_of_a_large_cluster_is_not_wrapped(write):
    config = {"cluster": {"num_nodes": 64, "component_placement": {"actor": "all"}}}
    result = invoke(write(yaml.safe_dump(config)), "-o", "json")
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["components"]["actor"]["processes"]) == 512


def test_placement_option_overrides_the_task_type(write):
    path = write(REASONING)
    hybrid = json.loads(invoke(path, "-o", "json", "--placement", "hybrid").stdout)
    assert hybrid["mode"] == "hybrid"
    assert hybrid["components"]["rollout"]["world_size"] == 8
    mp = json.loads(invoke(write(COLLOCATED, "c.yaml"), "-o", "json", "--placement", "model-parallel").stdout)
    assert mp["mode"] == "collocated"


def test_unknown_placement_kind_is_a_usage_error(write):
    result = invoke(write(COLLOCATED), "--placement", "magic")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_no_isolate(write):
    data = json.loads(invoke(write(COLLOCATED), "-o", "json", "--no-isolate").stdout)
    actor = data["components"]["actor"]["processes"]
    assert all(p["visible_accelerators"] == [str(i) for i in range(8)] for p in actor)
    assert all(p["isolate_accelerator"] is False for p in actor)


def test_env_prints_export_lines(write):
    result = invoke(write(REASONING), "--env", "rollout", "1")
    assert result.exit_code == 0, result.output
    env = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in result.stdout.splitlines())
    assert env["RANK"] == "1"
    assert env["WORLD_SIZE"] == "4"
    assert env["CUDA_VISIBLE_DEVICES"] == env["VISIBLE_DEVICES"] == "1,3"
    assert env["LOCAL_ACCELERATOR_RANK"] == "1"
    assert env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1"
    assert env["MASTER_ADDR"] == "node-0"
    assert set(env) >= {
        "NODE_RANK",
        "CLUSTER_NODE_RANK",
        "NODE_LOCAL_RANK",
        "NODE_LOCAL_WORLD_SIZE",
        "ISOLATE_ACCELERATOR",
        "LOCAL_HARDWARE_RANKS",
        "NODE_GROUP_LABEL",
    }


def test_env_with_node_group_variables_is_shell_quoted(write):
    result = invoke(write(EMBODIED), "--env", "env", "0")
    assert result.exit_code == 0, result.output
    assert "export ROS_DOMAIN_ID=7" in result.stdout
    assert "export NOTE='two words'" in result.stdout
    assert "export CUDA_VISIBLE_DEVICES=''" in result.stdout  # a robot on a GPU-less node
    assert "export LOCAL_ACCELERATOR_RANK=-1" in result.stdout


def test_env_not_isolated(write):
    result = invoke(write(COLLOCATED), "--env", "actor", "2", "--no-isolate")
    assert "export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in result.stdout
    assert "export ISOLATE_ACCELERATOR=0" in result.stdout
    assert "export LOCAL_HARDWARE_RANKS=2" in result.stdout


def test_env_rank_out_of_range(write):
    result = invoke(write(COLLOCATED), "--env", "actor", "8")
    assert result.exit_code == 2
    assert result.stderr == "error: component 'actor' has ranks 0-7, not 8\n"
    assert result.stdout == ""


def test_env_unknown_component(write):
    result = invoke(write(COLLOCATED), "--env", "critic", "0")
    assert result.exit_code == 2
    assert result.stderr == "error: unknown component 'critic' (known: actor, rollout, reward)\n"


def _assert_one_line_error(result, message):
    assert result.exit_code == 2
    assert result.stderr == f"error: {message}\n"
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_missing_file(tmp_path):
    path = tmp_path / "missing.yaml"
    _assert_one_line_error(invoke(str(path)), f"config file '{path}' does not exist")


def test_directory(tmp_path):
    _assert_one_line_error(invoke(str(tmp_path)), f"config file '{tmp_path}' is a directory")


def test_bad_yaml(write):
    path = write("cluster: [unclosed\n")
    result = invoke(path)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: config file '{path}' is not valid YAML at line ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "kind"), [("- a\n- b\n", "a list"), ("just text\n", "text"), ("# only a comment\n", "null (nothing)")]
)
def test_non_mapping_yaml(write, text, kind):
    path = write(text)
    _assert_one_line_error(invoke(path), f"config file '{path}' must hold a YAML mapping, got {kind}")


def test_placement_error(write):
    path = write("cluster:\n  num_nodes: 1\n  component_placement:\n    actor: 3-1\n")
    _assert_one_line_error(
        invoke(path), "component 'actor': reversed range '3-1' in resource ranks (write 1-3) (in 'actor: 3-1')"
    )


def test_cluster_error(write):
    path = write("cluster:\n  num_nodes: '2'\n  component_placement:\n    actor: all\n")
    _assert_one_line_error(
        invoke(path),
        "cluster.num_nodes must be an integer > 0, got '2' ('2' is text, not a number: write 2 without quotes; a value "
        "from ${oc.env:NAME} is always text, ${oc.decode:${oc.env:NAME}} makes it a number)",
    )


def test_model_parallel_error(write):
    path = write(COLLOCATED.replace("    reward: 0-7\n", ""))
    _assert_one_line_error(
        invoke(path, "--placement", "model-parallel"),
        "model-parallel placement needs components actor, rollout and reward; missing: reward",
    )


def test_no_cluster_section(write):
    _assert_one_line_error(invoke(write("actor: {}\n")), "the config has no 'cluster' section")
