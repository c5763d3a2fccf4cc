"""components.py: ComponentPlacement and HybridComponentPlacement over the grammar (docs/placement.md)."""

import re

import pytest

from placement_core import (
    Cluster,
    ComponentPlacement,
    FlexiblePlacementStrategy,
    HybridComponentPlacement,
    NodePlacementStrategy,
    PlacementError,
    PlacementMode,
)

# The cluster of docs/placement.md: a800 = nodes 0-1 (16 GPUs), 4090 = node 2 (4 GPUs here), two Franka robots on node 2,
# and a CPU group over every node.
HETEROGENEOUS = {
    "num_nodes": 3,
    "accelerators_per_node": [8, 8, 4],
    "node_groups": [
        {"label": "a800", "node_ranks": "0-1"},
        {"label": 4090, "node_ranks": 2},
        {
            "label": "robot",
            "node_ranks": 2,
            "hardware": {"type": "Franka", "configs": [{"node_rank": 2, "robot_ip": "10.0.0.9"}, {"node_rank": 2}]},
        },
        {"label": "cpu", "node_ranks": "0-2", "ignore_hardware": True},
    ],
}


def place(component_placement, cls=ComponentPlacement, **cluster):
    section = {"num_nodes": 1, "accelerators_per_node": 8, **cluster, "component_placement": component_placement}
    return cls({"cluster": section}, Cluster.from_config(section))


def hetero(component_placement, cls=ComponentPlacement):
    return place(component_placement, cls, **HETEROGENEOUS)


def layout(placement, name):
    """(node, local hardware ranks) per process."""
    return [(p.cluster_node_rank, list(p.local_hardware_ranks)) for p in placement.get_placement(name)]


def error(placement, **cluster):
    with pytest.raises(PlacementError) as info:
        place(placement, **cluster)
    return str(info.value)


# -- the documented examples and the reference framework's -------------------------------------------------------------------------


def test_worked_example():
    placed = place({"a": "0-1:0-3,3-5,7-10:7-14"}, num_nodes=2)
    assert placed.get_world_size("a") == 15
    assert placed.get_hardware_ranks("a") == [0, 1, 3, 4, 5, 7, 8, 9, 10]
    assert placed.get_strategy("a").hardware_ranks_list == [
        [0], [0], [1], [1], [3], [4], [5], [7], [7], [8], [8], [9], [9], [10], [10],
    ]  # fmt: skip
    assert layout(placed, "a")[7:] == [(0, [7]), (0, [7]), (1, [0]), (1, [0]), (1, [1]), (1, [1]), (1, [2]), (1, [2])]


def test_more_resources_than_processes():
    placed = place({"a": "0-3:0-1"})
    assert layout(placed, "a") == [(0, [0, 1]), (0, [2, 3])]
    assert placed.get_world_size("a") == 2
    assert placed.get_hardware_ranks("a") == [0, 1, 2, 3]


def test_more_processes_than_resources():
    placed = place({"a": "0-1:0-3"})
    assert layout(placed, "a") == [(0, [0]), (0, [0]), (0, [1]), (0, [1])]
    assert [(p.local_rank, p.local_world_size) for p in placed.get_placement("a")] == [(0, 4), (1, 4), (2, 4), (3, 4)]


def test_implicit_process_ranks_continue_after_the_largest():
    placed = place({"a": "0-1:0-3,4,6-7"})
    assert placed.get_world_size("a") == 7
    assert layout(placed, "a")[4:] == [(0, [4]), (0, [6]), (0, [7])]


def test_seed_actor_inference_share_gpus_0_to_7():
    """Seed 001: `actor,inference: 0-7` on one node: both components' processes 0-7 on GPUs 0-7."""
    placed = place({"actor,inference": "0-7"})
    assert placed.components == ["actor", "inference"]
    assert placed.get_strategy("actor") is placed.get_strategy("inference")
    for name in ("actor", "inference"):
        assert layout(placed, name) == [(0, [r]) for r in range(8)]
        assert [list(p.visible_accelerators) for p in placed.get_placement(name)] == [[str(r)] for r in range(8)]
    assert placed.placement_mode is PlacementMode.COLLOCATED


def test_seed_heterogeneous_example_as_written_is_rejected():
    """Seed 001's second config declares no node groups (and only 2 nodes): it names an unknown group."""
    message = error(
        {
            "actor": {"node_group": "a800", "placement": "0-8"},
            "rollout": {"node_group": 4090, "placement": "0-8"},
            "env": {"node_group": "robot", "placement": "0-3:0-7"},
            "agent": {"node_group": "node", "placement": "0-1:0-200,2-3:201-511"},
        },
        num_nodes=2,
    )
    assert message == "component 'actor': unknown node group 'a800' (known: cluster, node) (in 'actor: 0-8')"


def test_seed_agent_placement_does_not_divide():
    """The reference framework's `0-1:0-200` puts 201 processes on 2 nodes: the counts must divide (docs/placement.md, the grammar)."""
    message = error({"agent": {"node_group": "node", "placement": "0-1:0-200,2-3:201-511"}}, num_nodes=4)
    assert message == (
        "component 'agent': 2 resources and 201 processes in '0-1:0-200': one count must divide the other "
        "(in 'agent: 0-1:0-200,2-3:201-511')"
    )


def test_seed_heterogeneous_example_on_the_spec_cluster():
    """The reference framework's heterogeneous config made consistent with the three nodes of docs/placement.md."""
    placed = hetero(
        {
            "actor": {"node_group": "a800", "placement": "0-8"},
            "rollout": {"node_group": 4090, "placement": "0-3"},
            "env": {"node_group": "robot", "placement": "0-1:0-3"},
            "agent": {"node_group": "node", "placement": "0-1:0-199,2:200-299"},
        }
    )
    assert layout(placed, "actor") == [(0, [r]) for r in range(8)] + [(1, [0])]
    assert layout(placed, "rollout") == [(2, [r]) for r in range(4)]
    assert [p.node_group_label for p in placed.get_placement("rollout")] == ["4090"] * 4
    env = placed.get_placement("env")
    assert [(p.cluster_node_rank, list(p.local_hardware_ranks)) for p in env] == [
        (2, [0]),
        (2, [0]),
        (2, [1]),
        (2, [1]),
    ]
    assert all(p.visible_accelerators == ("0", "1", "2", "3") for p in env)  # robots see every GPU
    assert isinstance(placed.get_strategy("agent"), NodePlacementStrategy)
    agent = placed.get_placement("agent")
    assert len(agent) == 300
    assert [sum(p.cluster_node_rank == n for p in agent) for n in range(3)] == [100, 100, 100]
    assert {p.local_world_size for p in agent} == {100}
    assert placed.placement_mode is PlacementMode.DISAGGREGATED


def test_composite_groups_count_in_the_order_listed():
    placed = hetero({"actor": {"node_group": "a800,4090", "placement": "all"}})
    assert placed.get_world_size("actor") == 20
    processes = placed.get_placement("actor")
    assert [p.node_group_label for p in processes] == ["a800"] * 16 + ["4090"] * 4
    assert [p.cluster_node_rank for p in processes[15:17]] == [1, 2]
    assert processes[16].local_hardware_ranks == (0,)


def test_composite_groups_as_a_yaml_list():
    """We differ: the reference rejects the list form."""
    as_list = hetero({"actor": {"node_group": ["a800", 4090], "placement": "14-17"}})
    as_text = hetero({"actor": {"node_group": "a800,4090", "placement": "14-17"}})
    assert as_list.get_placement("actor") == as_text.get_placement("actor")
    assert as_list.get_node_groups("actor") == ("a800", "4090")


def test_composite_groups_in_reverse_node_order():
    """We differ: "4090,a800" is accepted; placement_node_rank follows first appearance."""
    placed = hetero({"actor": {"node_group": "4090,a800", "placement": "2-5"}})
    processes = placed.get_placement("actor")
    assert [(p.cluster_node_rank, p.placement_node_rank, p.node_group_label) for p in processes] == [
        (2, 0, "4090"),
        (2, 0, "4090"),
        (0, 1, "a800"),
        (0, 1, "a800"),
    ]


def test_robot_and_gpu_groups_can_be_composed():
    placed = hetero({"env": {"node_group": "4090,robot", "placement": "0-5"}})
    types = [p.local_hardware_ranks for p in placed.get_placement("env")]
    assert types == [(0,), (1,), (2,), (3,), (0,), (1,)]
    assert [p.node_group_label for p in placed.get_placement("env")] == ["4090"] * 4 + ["robot"] * 2


def test_node_strategy_when_a_group_has_no_hardware():
    placed = hetero({"agent": {"node_group": "cpu", "placement": "0-2:0-5"}})
    assert isinstance(placed.get_strategy("agent"), NodePlacementStrategy)
    assert [p.cluster_node_rank for p in placed.get_placement("agent")] == [0, 0, 1, 1, 2, 2]
    assert [p.node_group_label for p in placed.get_placement("agent")] == ["cpu"] * 6


def test_node_strategy_when_one_of_several_groups_has_no_hardware():
    """A GPU group listed with a CPU-only group: the ranks are the groups' nodes."""
    placed = place(
        {"agent": {"node_group": "gpus,cpus", "placement": "0-2"}},
        num_nodes=3,
        accelerators_per_node=[8, 8, 0],
        node_groups=[{"label": "gpus", "node_ranks": "0-1"}, {"label": "cpus", "node_ranks": 2}],
    )
    assert placed.get_strategy("agent").kind == "node"
    processes = placed.get_placement("agent")
    assert [(p.cluster_node_rank, p.node_group_label, p.local_accelerator_rank) for p in processes] == [
        (0, "gpus", 0),
        (1, "gpus", 0),
        (2, "cpus", -1),
    ]


def test_default_group_without_gpus_gives_node_placement():
    placed = place({"agent": "all:0-3"}, num_nodes=2, accelerators_per_node=0)
    assert isinstance(placed.get_strategy("agent"), NodePlacementStrategy)
    processes = placed.get_placement("agent")
    assert [(p.cluster_node_rank, p.local_accelerator_rank) for p in processes] == [(0, -1), (0, -1), (1, -1), (1, -1)]


def test_flexible_strategy_on_gpus():
    placed = place({"actor": "0-3"})
    assert isinstance(placed.get_strategy("actor"), FlexiblePlacementStrategy)
    assert placed.get_strategy("actor").kind == "flexible"


def test_non_string_scalar_values_are_turned_into_strings():
    placed = place({"actor": 3, 5: "4-5"})
    assert layout(placed, "actor") == [(0, [3])]
    assert placed.components == ["actor", "5"]


def test_names_are_stripped_and_share_one_strategy():
    placed = place({" actor , rollout ": "all"})
    assert placed.components == ["actor", "rollout"]
    assert placed.get_strategy("actor") is placed.get_strategy("rollout")


def test_overlapping_components_are_fine():
    placed = place({"actor": "0-5", "rollout": "2-7"})
    assert placed.placement_mode is PlacementMode.HYBRID


def test_modes_of_a_plain_component_placement():
    assert place({"a": "0-3", "b": "4-7"}).placement_mode is PlacementMode.DISAGGREGATED
    assert place({"a": "0-3", "b": "0-3:0-7"}).placement_mode is PlacementMode.COLLOCATED
    assert place({"a": "0-3", "b": "4-7"}, HybridComponentPlacement).placement_mode is PlacementMode.HYBRID


def test_node_group_default_is_cluster():
    placed = place({"a": {"placement": "0-1"}})
    assert placed.get_node_groups("a") == ("cluster",)


def test_isolate_false_through_the_component_placement():
    processes = place({"a": "0-1"}).get_placement("a", isolate_accelerator=False)
    assert all(p.visible_accelerators == tuple(str(i) for i in range(8)) for p in processes)
    assert [list(p.local_hardware_ranks) for p in processes] == [[0], [1]]


# -- errors (docs/placement.md, "Common errors"): one line, names the component, quotes the text -------------------------------------------


def test_no_cluster_section():
    with pytest.raises(PlacementError, match="the config has no 'cluster' section"):
        ComponentPlacement({}, Cluster.from_config({"num_nodes": 1}))


def test_no_component_placement():
    with pytest.raises(PlacementError, match=re.escape("the config has no 'cluster.component_placement'")):
        ComponentPlacement({"cluster": {"num_nodes": 1}}, Cluster.from_config({"num_nodes": 1}))


@pytest.mark.parametrize("value", [{}, [], "0-7"])
def test_component_placement_must_be_a_mapping(value):
    assert "cluster.component_placement must be a non-empty mapping" in error(value)


def test_mapping_value_without_placement():
    assert error({"actor": {"node_group": "cluster"}}) == (
        "component 'actor': a mapping value needs 'placement' (e.g. placement: 0-7)"
    )


def test_mapping_value_with_unknown_field():
    assert error({"actor": {"placment": "0-1"}}) == (
        "component 'actor': unknown field 'placment' (allowed: node_group, placement)"
    )


def test_placement_must_be_text():
    assert error({"actor": ["0-1"]}) == "component 'actor': placement must be a string like '0-7' or 'all', got [0-1]"
    assert error({"actor": None}).startswith("component 'actor': placement must be a string")


def test_unknown_node_group_lists_the_known_ones():
    with pytest.raises(PlacementError) as info:
        hetero({"actor": {"node_group": "a80", "placement": "0-7"}})
    assert str(info.value) == (
        "component 'actor': unknown node group 'a80' (known: a800, 4090, robot, cpu, cluster, node) (in 'actor: 0-7')"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0-1:0-3:4", "part '0-1:0-3:4' has more than one ':' (write RESOURCES:PROCESSES)"),
        ("a-b", "malformed resource ranks 'a-b' (expected N or N-M)"),
        ("0-1-2", "malformed resource ranks '0-1-2' (expected N or N-M)"),
        ("-1", "malformed resource ranks '-1' (expected N or N-M)"),
        ("1.5", "malformed resource ranks '1.5' (expected N or N-M)"),
        ("0-1:x", "malformed process ranks 'x' (expected N or N-M)"),
        ("3-1", "reversed range '3-1' in resource ranks (write 1-3)"),
        ("0-8", "resource rank 8 is out of range in '0-8' (node group 'cluster' has ranks 0-7 (8 units))"),
        ("0-1,1-2", "resource rank 1 is used twice in '1-2'"),
        ("2-3,0-1", "part '0-1' comes after higher resource ranks; list parts in ascending order"),
        ("0-3:all", "'all' is not allowed as process ranks in '0-3:all'"),
        ("0-1:0-1,2-3:1-2", "process rank 1 is used twice in '2-3:1-2'"),
        ("0-1:0-1,2-3:3-4", "process ranks must be continuous: '2-3:3-4' starts at 3, expected 2"),
        ("0-3:4-7", "process ranks must start at 0, '0-3:4-7' starts at 4"),
        ("0-2:0-1", "3 resources and 2 processes in '0-2:0-1': one count must divide the other"),
        ("", "empty placement ''"),
        (" , ", "empty placement ' , '"),
    ],
)
def test_placement_errors_name_the_component_and_quote_the_text(text, message):
    assert error({"actor": text}) == f"component 'actor': {message} (in 'actor: {text}')"


def test_errors_name_every_component_of_a_key():
    assert error({"actor,rollout": "3-1"}) == (
        "component 'actor,rollout': reversed range '3-1' in resource ranks (write 1-3) (in 'actor,rollout: 3-1')"
    )


def test_name_in_two_keys():
    assert error({"actor,rollout": "0-3", "rollout": "4-7"}) == (
        "component 'rollout' appears in two keys: 'actor,rollout' and 'rollout'"
    )


def test_name_twice_in_one_key():
    assert error({"actor,actor": "0-3"}) == "component 'actor' appears twice in key 'actor,actor'"


def test_process_over_two_nodes():
    assert error({"actor": "6-9:0"}, num_nodes=2) == (
        "component 'actor': process 0 spans nodes 0 and 1 (ranks 6,7,8,9); a process must stay on one node "
        "(in 'actor: 6-9:0')"
    )


def test_process_mixing_hardware_types():
    with pytest.raises(PlacementError) as info:
        hetero({"env": {"node_group": "4090,robot", "placement": "0-1,3-4:2"}})
    assert str(info.value) == (
        "component 'env': process 2 mixes hardware types Accelerator and Franka (ranks 3,4) (in 'env: 0-1,3-4:2')"
    )


def test_node_process_over_two_nodes():
    with pytest.raises(PlacementError) as info:
        hetero({"agent": {"node_group": "cpu", "placement": "0-1:0"}})
    assert str(info.value) == (
        "component 'agent': process would span 2 nodes in '0-1:0' (node group 'cpu' has ranks 0-2 (3 nodes)); "
        "a node placement gives each process one node (in 'agent: 0-1:0')"
    )


def test_node_groups_overlapping_in_a_node_placement():
    with pytest.raises(PlacementError) as info:
        hetero({"agent": {"node_group": "cpu,node", "placement": "0"}})
    assert str(info.value) == (
        "component 'agent': node groups 'cpu,node' overlap on node 0 (a node placement); list groups that share "
        "no nodes (in 'agent: 0')"
    )


def test_gpu_groups_overlapping():
    with pytest.raises(PlacementError, match=r"component 'actor': node groups 'a800,cluster' overlap on node 0"):
        hetero({"actor": {"node_group": "a800,cluster", "placement": "0"}})


def test_node_group_listed_twice():
    with pytest.raises(PlacementError, match=r"component 'actor': node group listed twice in 'a800,a800'"):
        hetero({"actor": {"node_group": "a800,a800", "placement": "0"}})


def test_all_on_an_empty_space():
    section = {
        "num_nodes": 1,
        "node_groups": [{"label": "robot", "node_ranks": 0, "hardware": {"type": "GimArm", "configs": []}}],
        "component_placement": {"env": {"node_group": "robot", "placement": "all"}},
    }
    with pytest.raises(PlacementError) as info:
        ComponentPlacement({"cluster": section}, Cluster.from_config(section))
    assert str(info.value) == (
        "component 'env': 'all' selects nothing: node group 'robot' has no ranks (0 units) (in 'env: all')"
    )


def test_too_many_processes():
    assert "more than 1000000 processes" in error({"a": "0:0-99999999"})


@pytest.mark.parametrize("method", ["get_world_size", "get_hardware_ranks", "get_strategy", "get_placement"])
def test_unknown_component_in_an_accessor(method):
    placed = place({"actor,rollout": "all"})
    with pytest.raises(PlacementError, match=r"^unknown component 'critic' \(known: actor, rollout\)$"):
        getattr(placed, method)("critic")


def test_errors_are_value_errors():
    assert issubclass(PlacementError, ValueError)
