"""strategies.py and placement.py: Flexible, Packed and Node strategies, the Placement record, placement_env
(docs/placement.md, "Strategies")."""

import pytest

from placement_core import (
    Cluster,
    FlexiblePlacementStrategy,
    NodePlacementStrategy,
    PackedPlacementStrategy,
    Placement,
    PlacementError,
)
from placement_core.placement import placement_env

PLACEMENT_FIELDS = [
    "rank",
    "cluster_node_rank",
    "placement_node_rank",
    "local_accelerator_rank",
    "accelerator_type",
    "local_rank",
    "local_world_size",
    "visible_accelerators",
    "isolate_accelerator",
    "local_hardware_ranks",
    "node_group_label",
]


def gpus(num_nodes=1, per_node=8, groups=()):
    return Cluster.from_config({"num_nodes": num_nodes, "accelerators_per_node": per_node, "node_groups": list(groups)})


def local_ranks(placements):
    return [list(p.local_hardware_ranks) for p in placements]


# The three nodes of docs/placement.md: a800 on 0-1, 4090 and two Franka robots on 2, a CPU group over all.
HETEROGENEOUS = [
    {"label": "a800", "node_ranks": "0-1"},
    {"label": "4090", "node_ranks": 2},
    {"label": "robot", "node_ranks": 2, "hardware": {"type": "Franka", "configs": [{"node_rank": 2}] * 2}},
    {"label": "cpu", "node_ranks": "0-2", "ignore_hardware": True},
]


def test_placement_record_fields_in_spec_order():
    assert list(Placement._fields) == PLACEMENT_FIELDS


# -- Flexible ---------------------------------------------------------------------------------------------------


def test_flexible_docs_example():
    cluster = gpus()
    placements = FlexiblePlacementStrategy([[0, 1], [2], [3]]).get_placement(cluster)
    assert local_ranks(placements) == [[0, 1], [2], [3]]
    assert [list(p.visible_accelerators) for p in placements] == [["0", "1"], ["2"], ["3"]]
    assert [p.local_accelerator_rank for p in placements] == [0, 2, 3]
    assert [p.rank for p in placements] == [0, 1, 2]
    assert all(p.local_world_size == 3 for p in placements)
    assert [p.local_rank for p in placements] == [0, 1, 2]
    assert {p.node_group_label for p in placements} == {"cluster"}
    assert {p.accelerator_type for p in placements} == {"NV_GPU"}


def test_flexible_sorts_within_and_across_processes_stably():
    strategy = FlexiblePlacementStrategy([[3, 2], [1], [0], [1]])
    assert strategy.hardware_ranks_list == [[0], [1], [1], [2, 3]]
    placements = strategy.get_placement(gpus())
    assert local_ranks(placements) == [[0], [1], [1], [2, 3]]


def test_flexible_global_ranks_across_nodes():
    placements = FlexiblePlacementStrategy([[6, 7], [8, 9], [15]]).get_placement(gpus(2))
    assert [(p.cluster_node_rank, p.placement_node_rank, list(p.local_hardware_ranks)) for p in placements] == [
        (0, 0, [6, 7]),
        (1, 1, [0, 1]),
        (1, 1, [7]),
    ]
    assert [(p.local_rank, p.local_world_size) for p in placements] == [(0, 1), (0, 2), (1, 2)]


def test_flexible_shared_gpu_counts_in_local_world_size():
    placements = FlexiblePlacementStrategy([[0], [0], [1]]).get_placement(gpus())
    assert [(p.local_rank, p.local_world_size) for p in placements] == [(0, 3), (1, 3), (2, 3)]
    assert [list(p.visible_accelerators) for p in placements] == [["0"], ["0"], ["1"]]


def test_flexible_not_isolated_sees_all_gpus():
    placements = FlexiblePlacementStrategy([[2, 3]]).get_placement(gpus(per_node=4), isolate_accelerator=False)
    (p,) = placements
    assert list(p.visible_accelerators) == ["0", "1", "2", "3"]
    assert p.local_accelerator_rank == 0
    assert list(p.local_hardware_ranks) == [2, 3]
    assert p.isolate_accelerator is False


def test_flexible_node_group_ranks_are_local_to_the_group():
    cluster = gpus(3, groups=HETEROGENEOUS)
    (p,) = FlexiblePlacementStrategy([[0]], node_group_label="4090").get_placement(cluster)
    assert (p.cluster_node_rank, p.placement_node_rank, list(p.local_hardware_ranks), p.node_group_label) == (
        2,
        0,
        [0],
        "4090",
    )


def test_flexible_composite_groups_in_reverse_node_order():
    """We differ: "4090,a800" (4090 on the higher node) is accepted, nodes numbered by first appearance."""
    cluster = gpus(3, groups=HETEROGENEOUS)
    placements = FlexiblePlacementStrategy([[0], [8], [16]], node_group_label="4090,a800").get_placement(cluster)
    assert [(p.cluster_node_rank, p.placement_node_rank, p.node_group_label) for p in placements] == [
        (2, 0, "4090"),
        (0, 1, "a800"),
        (1, 2, "a800"),
    ]
    as_list = FlexiblePlacementStrategy([[0], [8], [16]], node_group_label=["4090", "a800"]).get_placement(cluster)
    assert as_list == placements


def test_flexible_robot_hardware_sees_every_gpu():
    cluster = gpus(3, groups=HETEROGENEOUS)
    placements = FlexiblePlacementStrategy([[0], [1]], node_group_label="robot").get_placement(cluster)
    assert [list(p.local_hardware_ranks) for p in placements] == [[0], [1]]
    assert all(p.visible_accelerators == tuple(str(i) for i in range(8)) for p in placements)
    assert all(p.local_accelerator_rank == 0 for p in placements)
    assert {p.node_group_label for p in placements} == {"robot"}


def test_flexible_robot_on_gpu_less_node():
    cluster = Cluster.from_config(
        {
            "num_nodes": 2,
            "accelerators_per_node": [8, 0],
            "node_groups": [
                {"label": "robot", "node_ranks": 1, "hardware": {"type": "Turtle2", "configs": [{"node_rank": 1}]}}
            ],
        }
    )
    for isolate in (True, False):
        (p,) = FlexiblePlacementStrategy([[0]], "robot").get_placement(cluster, isolate)
        assert (p.visible_accelerators, p.local_accelerator_rank, p.accelerator_type) == ((), -1, "NO_ACCEL")


def test_flexible_process_over_two_nodes_is_rejected():
    with pytest.raises(PlacementError, match=r"process 0 spans nodes 0 and 1 \(ranks 7,8\)"):
        FlexiblePlacementStrategy([[7, 8]]).get_placement(gpus(2))


def test_flexible_process_mixing_hardware_types_is_rejected():
    cluster = gpus(3, groups=HETEROGENEOUS)
    # 4090 = GPU ranks 0-7 on node 2; robot = ranks 8-9, also on node 2.
    with pytest.raises(PlacementError, match=r"process 0 mixes hardware types Accelerator and Franka \(ranks 7,8\)"):
        FlexiblePlacementStrategy([[7, 8]], "4090,robot").get_placement(cluster)


def test_flexible_rank_out_of_range():
    with pytest.raises(PlacementError, match=r"process 1: rank 8 is out of range \(node group 'cluster' has ranks 0-7"):
        FlexiblePlacementStrategy([[0], [8]]).get_placement(gpus())


@pytest.mark.parametrize(
    ("ranks", "message"),
    [
        ([[0, 0]], r"process 0 lists a hardware rank twice \(0,0\)"),
        ([[]], r"process 0 has no hardware ranks"),
        ([[-1]], r"process 0: hardware ranks must be integers >= 0"),
        ([[True]], r"process 0: hardware ranks must be integers >= 0"),
        ([], r"a flexible placement needs at least one process"),
    ],
)
def test_flexible_bad_input(ranks, message):
    with pytest.raises(PlacementError, match=message):
        FlexiblePlacementStrategy(ranks)


def test_flexible_no_hardware_space():
    cluster = gpus(3, groups=HETEROGENEOUS)
    with pytest.raises(PlacementError, match=r"node group 'cpu' has no hardware to place on"):
        FlexiblePlacementStrategy([[0]], "cpu").get_placement(cluster)


def test_placements_are_immutable():
    """Strategies cache their records and hand the same ones to every caller, so nobody may change them."""
    cluster = gpus()
    strategy = FlexiblePlacementStrategy([[0]])
    first = strategy.get_placement(cluster)
    with pytest.raises(AttributeError):
        first[0].rank = 99  # type: ignore[misc]
    assert isinstance(first[0].visible_accelerators, tuple)
    assert isinstance(first[0].local_hardware_ranks, tuple)
    first.clear()  # the list is the caller's own
    assert strategy.get_placement(cluster)[0].visible_accelerators == ("0",)


# -- Packed -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("end", "n", "stride", "expected"),
    [
        (3, 1, 1, [[0], [1], [2], [3]]),
        (3, 2, 1, [[0, 1], [2, 3]]),
        (3, 2, 2, [[0, 2], [1, 3]]),
        (7, 2, 2, [[0, 2], [1, 3], [4, 6], [5, 7]]),
        (5, 2, 3, [[0, 3], [1, 4], [2, 5]]),
        (7, 4, 2, [[0, 2, 4, 6], [1, 3, 5, 7]]),
    ],
)
def test_packed_spec_examples(end, n, stride, expected):
    placements = PackedPlacementStrategy(0, end, n, stride).get_placement(gpus())
    assert local_ranks(placements) == expected
    assert [list(p.visible_accelerators) for p in placements] == [[str(r) for r in ranks] for ranks in expected]


@pytest.mark.parametrize("stride", [1, 2, 4])
def test_packed_stride_has_no_effect_with_one_gpu_per_process(stride):
    placements = PackedPlacementStrategy(0, 7, 1, stride).get_placement(gpus())
    assert local_ranks(placements) == [[r] for r in range(8)]


def test_packed_takes_the_smallest_unused_rank():
    """The reference algorithm, literally, agrees with the block formula."""
    for start, end, n, stride in [(0, 15, 2, 4), (4, 15, 3, 2), (2, 13, 2, 3), (0, 7, 8, 1)]:
        unused = list(range(start, end + 1))
        expected = []
        while unused:
            s = unused[0]
            ranks = [s + i * stride for i in range(n)]
            for r in ranks:
                unused.remove(r)
            expected.append(ranks)
        assert PackedPlacementStrategy(start, end, n, stride)._rank_lists(gpus(2).rank_space(["cluster"])) == expected


def test_packed_over_nodes_and_a_start_offset():
    placements = PackedPlacementStrategy(4, 11, 2).get_placement(gpus(2))
    assert [(p.cluster_node_rank, p.placement_node_rank, list(p.local_hardware_ranks)) for p in placements] == [
        (0, 0, [4, 5]),
        (0, 0, [6, 7]),
        (1, 1, [0, 1]),
        (1, 1, [2, 3]),
    ]


def test_packed_on_a_node_group():
    cluster = gpus(3, groups=HETEROGENEOUS)
    placements = PackedPlacementStrategy(0, 7, 4, node_group="4090").get_placement(cluster)
    assert [(p.cluster_node_rank, list(p.local_hardware_ranks), p.node_group_label) for p in placements] == [
        (2, [0, 1, 2, 3], "4090"),
        (2, [4, 5, 6, 7], "4090"),
    ]


def test_packed_reference_off_by_one_is_rejected():
    """We differ: starting at local GPU 3 of a 4-GPU node with n=2 would give local ranks [3,4]."""
    with pytest.raises(PlacementError, match=r"process 0 spans nodes 0 and 1 \(ranks 3,4\)"):
        PackedPlacementStrategy(3, 6, 2).get_placement(gpus(2, per_node=4))


def test_packed_not_divisible():
    with pytest.raises(
        PlacementError, match=r"6 ranks \(0-5\) are not divisible by num_hardware_per_process\*stride = 4"
    ):
        PackedPlacementStrategy(0, 5, 2, 2)


@pytest.mark.parametrize(("start", "end"), [(-1, 3), (4, 3)])
def test_packed_bad_bounds(start, end):
    with pytest.raises(PlacementError, match=rf"needs 0 <= start <= end, got start {start}, end {end}"):
        PackedPlacementStrategy(start, end)


@pytest.mark.parametrize(("n", "stride"), [(0, 1), (1, 0)])
def test_packed_bad_sizes(n, stride):
    with pytest.raises(PlacementError, match="num_hardware_per_process >= 1 and stride >= 1"):
        PackedPlacementStrategy(0, 3, n, stride)


@pytest.mark.parametrize("value", [1.5, "3", True, None])
def test_packed_ranks_must_be_ints(value):
    with pytest.raises(PlacementError, match="must be integers"):
        PackedPlacementStrategy(0, value)
    with pytest.raises(PlacementError, match="must be integers"):
        PackedPlacementStrategy(0, 3, value)


def test_packed_end_out_of_range():
    with pytest.raises(PlacementError, match=r"end rank 8 is out of range \(node group 'cluster' has ranks 0-7"):
        PackedPlacementStrategy(0, 8).get_placement(gpus())


# -- Node -------------------------------------------------------------------------------------------------------


def test_node_docs_example():
    placements = NodePlacementStrategy([0] * 4).get_placement(gpus())
    assert [p.rank for p in placements] == [0, 1, 2, 3]
    assert [(p.local_rank, p.local_world_size) for p in placements] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert all(p.visible_accelerators == tuple(str(i) for i in range(8)) for p in placements)
    assert all(p.local_hardware_ranks == () for p in placements)
    assert all(p.node_group_label == "cluster" for p in placements)


def test_node_local_accelerator_rank_is_an_int():
    """We differ: the reference returns the string "0"."""
    cluster = Cluster.from_config({"num_nodes": 2, "accelerators_per_node": [8, 0]})
    placements = NodePlacementStrategy([1, 0]).get_placement(cluster)
    assert [p.cluster_node_rank for p in placements] == [0, 1]
    assert [p.local_accelerator_rank for p in placements] == [0, -1]
    assert all(type(p.local_accelerator_rank) is int for p in placements)
    assert [list(p.visible_accelerators) for p in placements] == [[str(i) for i in range(8)], []]
    assert [p.accelerator_type for p in placements] == ["NV_GPU", "NO_ACCEL"]


def test_node_sees_all_gpus_even_when_isolated():
    for isolate in (True, False):
        (p,) = NodePlacementStrategy([0]).get_placement(gpus(per_node=2), isolate)
        assert list(p.visible_accelerators) == ["0", "1"]
        assert p.isolate_accelerator is isolate


def test_node_ranks_index_the_groups_nodes():
    cluster = gpus(3, groups=HETEROGENEOUS)
    placements = NodePlacementStrategy([0, 1], node_group_label="4090,a800").get_placement(cluster)
    assert [(p.cluster_node_rank, p.placement_node_rank, p.node_group_label) for p in placements] == [
        (2, 0, "4090"),
        (0, 1, "a800"),
    ]


def test_node_groups_that_overlap_are_rejected():
    cluster = gpus(3, groups=HETEROGENEOUS)
    with pytest.raises(PlacementError, match=r"node groups 'a800,cpu' overlap on node 0 \(a node placement\)"):
        NodePlacementStrategy([0], node_group_label="a800,cpu").get_placement(cluster)


def test_node_bad_input():
    with pytest.raises(PlacementError, match="at least one node rank"):
        NodePlacementStrategy([])
    with pytest.raises(PlacementError, match=r"node ranks must be integers >= 0, got \[-1\]"):
        NodePlacementStrategy([-1])
    with pytest.raises(PlacementError, match=r"node rank 3 is out of range \(node group 'cluster' has ranks 0-2"):
        NodePlacementStrategy([3]).get_placement(gpus(3))


# -- placement_env ----------------------------------------------------------------------------------------------


def test_placement_env():
    placements = FlexiblePlacementStrategy([[0], [8, 9]]).get_placement(gpus(2))
    env = placement_env(placements[1], world_size=2, master_addr="node-0")
    assert env == {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "NODE_RANK": "1",
        "CLUSTER_NODE_RANK": "1",
        "LOCAL_ACCELERATOR_RANK": "0",
        "NODE_LOCAL_RANK": "0",
        "NODE_LOCAL_WORLD_SIZE": "1",
        "VISIBLE_DEVICES": "0,1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
        "ISOLATE_ACCELERATOR": "1",
        "LOCAL_HARDWARE_RANKS": "0,1",
        "NODE_GROUP_LABEL": "cluster",
        "MASTER_ADDR": "node-0",
    }


def test_placement_env_not_isolated_and_node_strategy():
    (p,) = NodePlacementStrategy([0]).get_placement(gpus(per_node=2), isolate_accelerator=False)
    env = placement_env(p, 1, "head")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["ISOLATE_ACCELERATOR"] == "0"
    assert env["LOCAL_HARDWARE_RANKS"] == ""
    assert env["LOCAL_ACCELERATOR_RANK"] == "0"
    assert all(isinstance(v, str) for v in env.values())


def test_placement_to_dict_has_every_field():
    (p,) = FlexiblePlacementStrategy([[1]]).get_placement(gpus())
    assert list(p.to_dict()) == PLACEMENT_FIELDS
