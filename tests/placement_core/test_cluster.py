"""cluster.py: the cluster section, node groups and rank spaces (docs/placement.md, "The cluster")."""

import pytest

from placement_core import Cluster, Node, NodeGroup, PlacementError
from placement_core.cluster import ACCELERATOR, NO_ACCEL, NV_GPU

# The three-node example of docs/placement.md ("The cluster").
THREE_NODES = {
    "num_nodes": 3,
    "accelerators_per_node": 8,
    "node_groups": [
        {"label": "a800", "node_ranks": "0-1"},
        {"label": 4090, "node_ranks": 2},
        {
            "label": "robot",
            "node_ranks": 2,
            "hardware": {
                "type": "Franka",
                "configs": [{"node_rank": 2, "robot_ip": "10.0.0.9"}, {"node_rank": 2, "robot_ip": "10.0.0.8"}],
            },
        },
        {"label": "cpu", "node_ranks": "0-2", "ignore_hardware": True},
    ],
}


def cluster_with(*groups, num_nodes=3, accelerators=8):
    return Cluster.from_config(
        {"num_nodes": num_nodes, "accelerators_per_node": accelerators, "node_groups": list(groups)}
    )


def test_spec_example_groups():
    cluster = Cluster.from_config(THREE_NODES)
    assert cluster.num_nodes == 3
    assert cluster.num_accelerators == 24
    assert [g.label for g in cluster.node_groups] == ["a800", "4090", "robot", "cpu", "cluster", "node"]
    types = {g.label: g.hardware_type for g in cluster.node_groups}
    assert types == {
        "a800": ACCELERATOR,
        "4090": ACCELERATOR,
        "robot": "Franka",
        "cpu": None,
        "cluster": ACCELERATOR,
        "node": None,
    }
    assert cluster.get_node_group("a800").node_ranks == (0, 1)
    assert cluster.get_node_group("robot").hardware_units == (2,)
    assert cluster.get_node_group("cpu").node_ranks == (0, 1, 2)


def test_label_is_turned_into_a_string():
    cluster = Cluster.from_config(THREE_NODES)
    assert cluster.get_node_group("4090").node_ranks == (2,)
    assert cluster.get_node_group(4090).label == "4090"


def test_rank_spaces_count_node_by_node():
    cluster = Cluster.from_config(THREE_NODES)
    a800 = cluster.rank_space(["a800"])
    assert len(a800) == 16
    assert a800.node == [0] * 8 + [1] * 8
    assert a800.local == list(range(8)) * 2
    robot = cluster.rank_space(["robot"])
    assert (robot.node, robot.local, robot.hardware_type) == ([2, 2], [0, 1], ["Franka", "Franka"])
    cpu = cluster.rank_space(["cpu"])
    assert cpu.is_node_space
    assert cpu.node == [0, 1, 2]


def test_composite_space_concatenates_in_the_order_listed():
    cluster = Cluster.from_config(
        {
            "num_nodes": 3,
            "accelerators_per_node": [8, 8, 4],
            "node_groups": [{"label": "a800", "node_ranks": "0-1"}, {"label": "4090", "node_ranks": 2}],
        }
    )
    space = cluster.rank_space(["a800", "4090"])
    assert len(space) == 20
    assert space.group == ["a800"] * 16 + ["4090"] * 4
    assert space.node[16:] == [2] * 4
    reverse = cluster.rank_space(["4090", "a800"])
    assert reverse.group == ["4090"] * 4 + ["a800"] * 16


def test_implicit_cluster_group_without_gpus_is_a_node_space():
    cluster = Cluster.from_config({"num_nodes": 2, "accelerators_per_node": 0})
    assert cluster.get_node_group("cluster").hardware_type is None
    assert cluster.rank_space(["cluster"]).is_node_space
    assert {n.accelerator_type for n in cluster.nodes} == {NO_ACCEL}


def test_accelerators_per_node_list_and_default():
    cluster = Cluster.from_config({"num_nodes": 3, "accelerators_per_node": [8, 0, 4]})
    assert [n.num_accelerators for n in cluster.nodes] == [8, 0, 4]
    assert [n.accelerator_type for n in cluster.nodes] == [NV_GPU, NO_ACCEL, NV_GPU]
    assert len(cluster.rank_space(["cluster"])) == 12
    assert Cluster.from_config({"num_nodes": 2}).num_accelerators == 16


def test_group_hardware_type_first_match_wins():
    cluster = cluster_with(
        {"label": "gpus", "node_ranks": "0-1"},
        {"label": "cpuonly", "node_ranks": 2},
        {"label": "ignored", "node_ranks": 0, "ignore_hardware": True},
        accelerators=[8, 8, 0],
    )
    assert cluster.get_node_group("gpus").hardware_type == ACCELERATOR
    assert cluster.get_node_group("cpuonly").hardware_type is None
    assert cluster.get_node_group("ignored").hardware_type is None


def test_node_ranks_all_int_and_list():
    cluster = cluster_with(
        {"label": "every", "node_ranks": "all"},
        {"label": "one", "node_ranks": 1},
        {"label": "listed", "node_ranks": [2, 0]},
    )
    assert cluster.get_node_group("every").node_ranks == (0, 1, 2)
    assert cluster.get_node_group("one").node_ranks == (1,)
    assert cluster.get_node_group("listed").node_ranks == (0, 2)


def test_labels_are_case_sensitive():
    cluster = cluster_with({"label": "Cluster", "node_ranks": 0}, {"label": "a800", "node_ranks": 1})
    assert cluster.get_node_group("Cluster").node_ranks == (0,)
    with pytest.raises(PlacementError, match=r"unknown node group 'A800' \(known: Cluster, a800, cluster, node\)"):
        cluster.get_node_group("A800")


def test_env_configs():
    cluster = cluster_with(
        {
            "label": "robot",
            "node_ranks": "0-2",
            "env_configs": [
                {
                    "node_ranks": "0-1",
                    "env_vars": [{"ROS_DOMAIN": 7}, {"EMPTY": None}],
                    "python_interpreter_path": "/py",
                },
                {"node_ranks": 2, "env_vars": [{"OTHER": "x"}]},
            ],
        }
    )
    group = cluster.get_node_group("robot")
    assert group.env_for(0) == {"ROS_DOMAIN": "7", "EMPTY": ""}
    assert group.env_for(2) == {"OTHER": "x"}
    assert group.python_interpreter_for(1) == "/py"
    assert group.python_interpreter_for(2) is None
    assert cluster.get_node_group("cluster").env_for(0) == {}


def test_env_configs_without_node_ranks_cover_the_group():
    cluster = cluster_with({"label": "g", "node_ranks": "1-2", "env_configs": [{"env_vars": [{"A": 1}]}]})
    group = cluster.get_node_group("g")
    assert (group.env_for(1), group.env_for(2), group.env_for(0)) == ({"A": "1"}, {"A": "1"}, {})


def test_cluster_object_api():
    nodes = [Node(0, 8), Node(1, 0, NO_ACCEL, name="cpu-box")]
    cluster = Cluster(nodes, [NodeGroup("gpus", (0,), ACCELERATOR)])
    assert cluster.nodes[1].display_name == "cpu-box"
    assert cluster.nodes[0].display_name == "node-0"
    assert cluster.visible_devices == [tuple(str(i) for i in range(8)), ()]


# -- errors (docs/placement.md) ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2", r"'2' \('2' is text, not a number: write 2 without quotes; a value from .*makes it a number\)"),
        (0, "0"),
        (-1, "-1"),
        (True, "true"),
        (None, "null"),
        (1.5, "1.5"),
    ],
)
def test_num_nodes_must_be_a_positive_int(value, shown):
    with pytest.raises(PlacementError, match=rf"cluster.num_nodes must be an integer > 0, got {shown}$"):
        Cluster.from_config({"num_nodes": value})


def test_cluster_must_be_a_mapping():
    with pytest.raises(PlacementError, match="'cluster' must be a mapping"):
        Cluster.from_config(["num_nodes", 1])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([8, 8], r"lists 2 counts for 3 nodes"),
        (-1, r"must hold integers from 0 to 1024, got -1"),
        ("8", r"must hold integers from 0 to 1024, got '8'"),
        ([8, True, 8], r"must hold integers from 0 to 1024, got true"),
    ],
)
def test_bad_accelerators_per_node(value, message):
    with pytest.raises(PlacementError, match=rf"cluster.accelerators_per_node {message}"):
        Cluster.from_config({"num_nodes": 3, "accelerators_per_node": value})


def test_node_groups_must_be_a_list():
    with pytest.raises(PlacementError, match=r"cluster\.node_groups must be a list"):
        Cluster.from_config({"num_nodes": 1, "node_groups": {"label": "a"}})


def test_node_group_must_be_a_mapping():
    with pytest.raises(PlacementError, match="a node group must be a mapping, got 'a800'"):
        cluster_with("a800")


def test_node_group_needs_a_label():
    with pytest.raises(PlacementError, match=r"node group \{'node_ranks': 0\} has no 'label'"):
        cluster_with({"node_ranks": 0})


@pytest.mark.parametrize("label", ["", " "])
def test_empty_label(label):
    with pytest.raises(PlacementError, match="empty label"):
        cluster_with({"label": label, "node_ranks": 0})


def test_duplicate_label():
    with pytest.raises(PlacementError, match="node group label 'a800' is used twice"):
        cluster_with({"label": "a800", "node_ranks": 0}, {"label": "a800", "node_ranks": 1})


def test_duplicate_label_after_stringification():
    with pytest.raises(PlacementError, match="node group label '4090' is used twice"):
        cluster_with({"label": 4090, "node_ranks": 0}, {"label": "4090", "node_ranks": 1})


@pytest.mark.parametrize("label", ["cluster", "node"])
def test_reserved_labels(label):
    with pytest.raises(
        PlacementError, match=rf"node group '{label}': the label is reserved \(reserved: cluster, node\)"
    ):
        cluster_with({"label": label, "node_ranks": 0})


def test_unknown_node_group_field():
    with pytest.raises(
        PlacementError, match=r"node group 'a800': unknown key 'node_rank'; did you mean 'node_ranks'\? \(known: label"
    ):
        cluster_with({"label": "a800", "node_rank": 0})


def test_missing_node_ranks():
    with pytest.raises(PlacementError, match="node group 'a800': 'node_ranks' is required"):
        cluster_with({"label": "a800"})


@pytest.mark.parametrize(
    ("ranks", "message"),
    [
        ("0-3", r"node rank 3 out of range in '0-3' \(cluster has nodes 0-2\)"),
        (5, r"node rank 5 out of range in '5' \(cluster has nodes 0-2\)"),
        ("2-1", r"reversed range '2-1'"),
        ("a", r"malformed node ranks 'a'"),
        (-1, r"malformed node ranks '-1'"),
        ("0,0", r"node rank listed twice in '0,0'"),
        ([], r"empty node ranks '\[\]'"),
        ([0, "all"], r"'all' inside the list"),
    ],
)
def test_bad_node_ranks(ranks, message):
    with pytest.raises(PlacementError, match=rf"node group 'a800': {message}"):
        cluster_with({"label": "a800", "node_ranks": ranks})


def test_unknown_hardware_type_lists_the_known_ones():
    with pytest.raises(
        PlacementError,
        match=r"node group 'robot': unknown hardware type 'Panda' \(known: Franka, DualFranka, GimArm, DOSW1, Turtle2\)",
    ):
        cluster_with({"label": "robot", "node_ranks": 2, "hardware": {"type": "Panda", "configs": []}})


def test_hardware_with_ignore_hardware():
    with pytest.raises(PlacementError, match="node group 'robot': 'hardware' and 'ignore_hardware' cannot both be set"):
        cluster_with(
            {"label": "robot", "node_ranks": 2, "ignore_hardware": True, "hardware": {"type": "Franka", "configs": []}}
        )


def test_hand_written_hardware_type_next_to_hardware():
    with pytest.raises(PlacementError, match=r"node group 'robot': 'hardware_type' is derived from 'hardware\.type'"):
        cluster_with(
            {
                "label": "robot",
                "node_ranks": 2,
                "hardware_type": "Franka",
                "hardware": {"type": "Franka", "configs": []},
            }
        )


def test_hardware_config_outside_the_group():
    with pytest.raises(
        PlacementError, match=r"node group 'robot': hardware config .* is on node_rank 1, which is not in"
    ):
        cluster_with({"label": "robot", "node_ranks": 2, "hardware": {"type": "Franka", "configs": [{"node_rank": 1}]}})


@pytest.mark.parametrize("node_rank", [[2], "2", None, True, 2.0])
def test_hardware_config_node_rank_must_be_an_int(node_rank):
    with pytest.raises(PlacementError, match=r"node group 'robot': hardware config .* is on node_rank"):
        cluster_with(
            {
                "label": "robot",
                "node_ranks": "1-2",
                "hardware": {"type": "Franka", "configs": [{"node_rank": node_rank}]},
            }
        )


@pytest.mark.parametrize(
    ("hardware", "message"),
    [
        ("Franka", r"'hardware' must be a mapping with 'type' and 'configs'"),
        ({"type": "Franka", "configs": {"node_rank": 2}}, r"hardware.configs must be a list of mappings"),
        ({"type": "Franka", "configs": [2]}, r"hardware.configs must be a list of mappings"),
    ],
)
def test_malformed_hardware(hardware, message):
    with pytest.raises(PlacementError, match=rf"node group 'robot': {message}"):
        cluster_with({"label": "robot", "node_ranks": 2, "hardware": hardware})


def test_ignore_hardware_must_be_a_bool():
    with pytest.raises(PlacementError, match="node group 'cpu': ignore_hardware must be true or false, got 'yes'"):
        cluster_with({"label": "cpu", "node_ranks": 0, "ignore_hardware": "yes"})


@pytest.mark.parametrize(
    ("env_configs", "message"),
    [
        ({"node_ranks": 0}, r"env_configs must be a list"),
        (["A=1"], r"env_configs\[0\] must be a mapping"),
        ([{"node_ranks": 0, "env": []}], r"env_configs\[0\]: unknown field 'env'"),
        ([{"node_ranks": 2, "env_vars": []}], r"env_configs\[0\]: node rank 2 is not in the group \(nodes 0,1\)"),
        (
            [{"node_ranks": "0-1", "env_vars": [{"A": 1}]}, {"node_ranks": 1, "env_vars": [{"B": 1}]}],
            r"env_configs\[1\]: node rank 1 is already configured by env_configs\[0\]",
        ),
        (
            [{"node_ranks": 0, "env_vars": [{"A": 1}]}, {"node_ranks": 1, "env_vars": [{"A": 2}]}],
            r"env_configs\[1\]: variable 'A' is set twice in the group",
        ),
        ([{"node_ranks": 0, "env_vars": {"A": 1}}], r"env_configs\[0\]: env_vars must be a list of one-key mappings"),
        (
            [{"node_ranks": 0, "env_vars": [{"A": 1, "B": 2}]}],
            r"env_configs\[0\]: env_vars entry \{A: 1, B: 2\} must be a one-key mapping",
        ),
        ([{"node_ranks": 0, "env_vars": ["A=1"]}], r"env_configs\[0\]: env_vars entry 'A=1' must be a one-key mapping"),
        ([{"node_ranks": "x", "env_vars": []}], r"env_configs\[0\]: malformed node ranks 'x'"),
    ],
)
def test_bad_env_configs(env_configs, message):
    with pytest.raises(PlacementError, match=rf"node group 'g': {message}"):
        cluster_with({"label": "g", "node_ranks": "0-1", "env_configs": env_configs})


def test_cluster_object_checks():
    with pytest.raises(PlacementError, match="at least one node"):
        Cluster([])
    with pytest.raises(PlacementError, match=r"node ranks must be 0..N-1"):
        Cluster([Node(1, 8)])
    with pytest.raises(PlacementError, match=r"node group 'g': node rank 3 out of range \(cluster has nodes 0-0\)"):
        Cluster([Node(0, 8)], [NodeGroup("g", (3,), ACCELERATOR)])


def test_composite_space_errors():
    cluster = cluster_with({"label": "a", "node_ranks": "0-1"}, {"label": "b", "node_ranks": "1-2"})
    with pytest.raises(PlacementError, match=r"node groups 'a,b' overlap on node 1"):
        cluster.rank_space(["a", "b"])
    with pytest.raises(PlacementError, match=r"node group listed twice in 'a,a'"):
        cluster.rank_space(["a", "a"])
    with pytest.raises(PlacementError, match=r"unknown node group 'zz' \(known: a, b, cluster, node\)"):
        cluster.rank_space(["a", "zz"])


def test_hardware_type_alone_is_an_unknown_field():
    with pytest.raises(
        PlacementError, match=r"node group 'robot': unknown key 'hardware_type'; did you mean 'hardware'"
    ):
        cluster_with({"label": "robot", "node_ranks": 2, "hardware_type": "Franka"})


def test_ignore_hardware_false_beside_hardware_is_allowed():
    """Only a set ignore_hardware conflicts with hardware; `false` says nothing."""
    cluster = cluster_with(
        {"label": "robot", "node_ranks": 2, "ignore_hardware": False, "hardware": {"type": "GimArm", "configs": []}}
    )
    assert cluster.get_node_group("robot").hardware_type == "GimArm"


def test_absurd_sizes_are_refused_before_building_anything() -> None:
    with pytest.raises(PlacementError, match="at most 100000 nodes"):
        Cluster.from_config({"num_nodes": 1_000_000_000})
    with pytest.raises(PlacementError, match="from 0 to 1024, got 4096"):
        Cluster.from_config({"num_nodes": 1, "accelerators_per_node": 4096})
