"""examples/*.yaml: every job config plans without error, and the placement examples show what they say."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from placement_core.cli import app
from placement_core.components import component_placement
from placement_core.plan import build_plan, shared_with

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Kubernetes resources and autotune inputs live beside the job configs; they are not `rlplace plan` input.
NOT_PLAN_INPUT = ("rljob-", "nodegroup-", "nodegroups-", "autotune-", "kueue-")
CONFIGS = sorted(p for p in EXAMPLES.glob("*.yaml") if not p.name.startswith(NOT_PLAN_INPUT))


def load(name):
    return yaml.safe_load((EXAMPLES / name).read_text())


def plan(name):
    return build_plan(component_placement(load(name))).to_dict()


def gpus(data, name):
    return [(p["cluster_node_rank"], p["local_hardware_ranks"]) for p in data["components"][name]["processes"]]


def test_the_placement_examples_are_there():
    names = {p.name for p in CONFIGS}
    assert {
        "collocated-single-node.yaml",
        "heterogeneous-a800-4090-robot.yaml",
        "disaggregated-reasoning.yaml",
        "embodied-robots.yaml",
    } <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_plans(path):
    assert path.read_text().startswith("#"), "an example starts with a comment header saying what it shows"
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("mode: ")
    build_plan(component_placement(yaml.safe_load(path.read_text())))


def test_collocated_single_node():
    data = plan("collocated-single-node.yaml")
    assert data["mode"] == "collocated"
    assert gpus(data, "rollout") == [(0, [0, 2]), (0, [1, 3]), (0, [4, 6]), (0, [5, 7])]
    assert [c["world_size"] for c in data["components"].values()] == [8, 4, 8]


def test_heterogeneous():
    data = plan("heterogeneous-a800-4090-robot.yaml")
    assert data["mode"] == "hybrid"
    rollout = data["components"]["rollout"]["processes"]
    assert [(p["cluster_node_rank"], p["placement_node_rank"], p["node_group_label"]) for p in rollout[::8]] == [
        (2, 0, "4090"),
        (0, 1, "a800"),
    ]
    assert gpus(data, "env") == [(2, [0]), (2, [0]), (2, [1]), (2, [1])]
    assert {tuple(p["visible_accelerators"]) for p in data["components"]["env"]["processes"]} == {
        tuple(str(i) for i in range(8))
    }
    assert data["components"]["agent"]["strategy"] == "node"
    assert data["components"]["agent"]["world_size"] == 24


def test_disaggregated():
    data = plan("disaggregated-reasoning.yaml")
    assert data["mode"] == "disaggregated"
    assert gpus(data, "rollout") == [(0, [6, 7]), (1, [0, 1]), (1, [2, 3])]
    placed = component_placement(load("disaggregated-reasoning.yaml"))
    assert not any(shared_with(build_plan(placed)).values())
    assert (placed.actor_dp_size, placed.rollout_dp_size, placed.inference_dp_size) == (3, 3, 1)


def test_embodied_robots():
    placed = component_placement(load("embodied-robots.yaml"))
    data = build_plan(placed).to_dict()
    env = data["components"]["env"]["processes"]
    assert [(p["cluster_node_rank"], p["local_accelerator_rank"], p["visible_accelerators"]) for p in env] == [
        (2, -1, [])
    ] * 4
    agents = data["components"]["agent"]["processes"]
    assert [p["env"].get("OMP_NUM_THREADS") for p in agents] == ["4"] * 8 + [None] * 4
    assert [p["env"].get("ROS_DOMAIN_ID") for p in agents] == [None] * 8 + ["17"] * 4
    assert placed.cluster.get_node_group("cpu").python_interpreter_for(2) == "/opt/ros/venv/bin/python"
