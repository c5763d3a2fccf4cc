"""NodeGroup status and the job cluster from Kubernetes nodes (no cluster)."""

from __future__ import annotations

import dataclasses

import pytest

from placement_core import CapacityError
from placement_core.cluster import ACCELERATOR
from rlplace_operator.api.nodegroup import NodeGroupSpec
from rlplace_operator.cluster.dra import node_slice
from rlplace_operator.cluster.selection import JobGroup, NodeInfo, job_cluster, nodegroup_status, nodegroup_wire_status

from recorded import dra_node


def node(name: str, labels: dict[str, str], gpus: int = 0, ready: bool = True, **extra: str) -> NodeInfo:
    allocatable = {"cpu": "64", **({"nvidia.com/gpu": str(gpus)} if gpus else {}), **extra}
    return NodeInfo(name, labels, allocatable, ready)


A800 = NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {"gpu": "a800"}}})
ROBOT = NodeGroupSpec.model_validate(
    {
        "nodeSelector": {"matchLabels": {"robot": "franka"}},
        "hardware": {"type": "Franka", "resourceName": "rlplace.io/franka"},
    }
)
CPU = NodeGroupSpec.model_validate(
    {"nodeSelector": {"matchExpressions": [{"key": "cpu-only", "operator": "Exists"}]}, "ignoreHardware": True}
)


def test_rank_order_is_the_node_rank_label_then_the_name() -> None:
    nodes = [
        node("zeta", {"gpu": "a800"}, 8),
        node("beta", {"gpu": "a800", "rlplace.io/node-rank": "1"}, 8),
        node("alpha", {"gpu": "a800"}, 8),
        node("gamma", {"gpu": "a800", "rlplace.io/node-rank": "0"}, 8),
        node("other", {"gpu": "4090"}, 8),
    ]
    status = nodegroup_status(A800, nodes, 3)
    assert [n.name for n in status.nodes] == ["gamma", "beta", "alpha", "zeta"]
    assert [n.rank for n in status.nodes] == [0, 1, 2, 3]
    assert status.hardware_type == ACCELERATOR and status.total_units == 32 and status.observed_generation == 3


def test_units_readiness_and_robot_counts() -> None:
    status = nodegroup_status(A800, [node("a", {"gpu": "a800"}, 8), node("b", {"gpu": "a800"}, 8, ready=False)], 1)
    assert (status.total_nodes, status.ready_nodes, status.total_units) == (2, 1, 8)
    robots = nodegroup_status(ROBOT, [node("r", {"robot": "franka"}, 0, **{"rlplace.io/franka": "2"})], 1)
    assert robots.hardware_type == "Franka" and robots.nodes[0].units == 2
    cpus = nodegroup_status(CPU, [node("c", {"cpu-only": "true"}), node("g", {"gpu": "a800"}, 8)], 1)
    assert cpus.hardware_type is None and [n.name for n in cpus.nodes] == ["c"]


def test_job_cluster_concatenates_groups_and_keeps_first_rank_of_shared_nodes() -> None:
    nodes = {
        "a0": node("a0", {"gpu": "a800", "cpu-only": "x"}, 8),
        "a1": node("a1", {"gpu": "a800"}, 8),
        "c0": node("c0", {"cpu-only": "true"}),
        "r0": node("r0", {"robot": "franka"}, 0, **{"rlplace.io/franka": "2"}),
    }
    groups = [
        JobGroup("a800", A800, nodegroup_status(A800, list(nodes.values()), 1)),
        JobGroup("robot", ROBOT, nodegroup_status(ROBOT, list(nodes.values()), 1)),
        JobGroup("cpu", CPU, nodegroup_status(CPU, list(nodes.values()), 1)),
    ]
    cluster = job_cluster(groups, nodes)
    assert [n.name for n in cluster.nodes] == ["a0", "a1", "r0", "c0"]
    assert [n.num_accelerators for n in cluster.nodes] == [8, 8, 0, 0]
    assert cluster.get_node_group("cpu").node_ranks == (0, 3)
    assert cluster.get_node_group("robot").hardware_units == (2,)
    assert cluster.num_accelerators == 16


def test_a_job_with_no_ready_node_waits_for_capacity() -> None:
    nodes = {"a0": node("a0", {"gpu": "a800"}, 8, ready=False)}
    groups = [JobGroup("a800", A800, nodegroup_status(A800, list(nodes.values()), 1))]
    with pytest.raises(CapacityError):
        job_cluster(groups, nodes)


def test_a_dra_group_whose_deviceclass_is_missing_is_not_ready_and_says_why() -> None:

    node, slice_ = dra_node()
    found = node_slice(slice_)
    assert found is not None
    info = dataclasses.replace(NodeInfo.from_body(node), slices=(found[1],))
    spec = NodeGroupSpec.model_validate(
        {"nodeSelector": {"matchLabels": {"rlplace.io/real-gpu-allocation": "dra"}}, "gpuAllocation": "dra",
         "dra": {"driver": "gpu.example.com"}}
    )  # fmt: skip
    missing = nodegroup_wire_status(spec, [info], 1, set(), {})
    ready = next(c for c in missing["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "DeviceClassNotFound")
    assert missing["problem"].startswith("DeviceClass gpu.example.com does not exist: create it")
    assert missing["readyNodes"] == 1  # the node is fine: the group's DeviceClass is not
    there = nodegroup_wire_status(spec, [info], 1, {"gpu.example.com"}, missing)
    assert "problem" not in there and next(c for c in there["conditions"] if c["type"] == "Ready")["status"] == "True"
    named = spec.model_copy(update={"dra": spec.dra.model_copy(update={"device_class_name": "gpus"})})
    assert "set the NodeGroup's dra.deviceClassName" in nodegroup_wire_status(named, [info], 1, set(), {})["problem"]
