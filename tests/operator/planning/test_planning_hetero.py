"""A job over NodeGroups of different GPUs placed by auto placement's node-group model (issue 24; no cluster)."""

from __future__ import annotations

import json

import pytest

from placement_core import PlacementError
from rlplace_operator.api.nodegroup import NodeGroupSpec
from rlplace_operator.api.rljob import Profile, RLJobSpec
from rlplace_operator.cluster.selection import (
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    JobGroup,
    NodeInfo,
    accelerator_of,
    job_cluster,
    nodegroup_status,
)
from rlplace_operator.planning.plan import plan_job, profile_of

A800 = NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {"pool": "a800"}}})
RTX = NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {"pool": "4090"}}})


def gpu_node(name: str, pool: str, product: str | None = None, mib: str | None = None) -> NodeInfo:
    labels = {"pool": pool}
    if product is not None:
        labels[GPU_PRODUCT_LABEL] = product
    if mib is not None:
        labels[GPU_MEMORY_LABEL] = mib
    return NodeInfo(name, labels, {"nvidia.com/gpu": "8"}, True)


# GPU feature discovery's labels, as the nodes of a mixed cluster carry them
NODES = {
    **{f"a{i}": gpu_node(f"a{i}", "a800", "NVIDIA-A800-SXM4-80GB", "81920") for i in range(2)},
    **{f"g{i}": gpu_node(f"g{i}", "4090", "NVIDIA-GeForce-RTX-4090", "24564") for i in range(2)},
}


def groups(a800: NodeGroupSpec = A800, rtx: NodeGroupSpec = RTX) -> list[JobGroup]:
    nodes = list(NODES.values())
    return [
        JobGroup("a800", a800, nodegroup_status(a800, nodes, 1)),
        JobGroup("4090", rtx, nodegroup_status(rtx, nodes, 1)),
    ]


def job(**spec: object) -> RLJobSpec:
    return RLJobSpec.model_validate(
        {
            "nodeGroups": ["a800", "4090"],
            "autoPlacement": {"enabled": True},
            "modelParallel": {"actorTensorParallelSize": 2},
            "algorithm": {"groupSize": 8, "nMinibatches": 4, "rolloutBatchSize": 64},
            **spec,
        }
    )


PROFILE = {
    "actorCostByType": {"NVIDIA-A800-SXM4-80GB": 100, "NVIDIA-GeForce-RTX-4090": 60},
    "inferenceCostByType": {"NVIDIA-A800-SXM4-80GB": 20, "NVIDIA-GeForce-RTX-4090": 40},
    "rolloutCostByType": {"NVIDIA-A800-SXM4-80GB": 60, "NVIDIA-GeForce-RTX-4090": 120},
    "actorMemoryGb": 56,
    "rolloutMemoryGb": 18,
    "modelSizeGb": 14,
}


def test_status_reports_gpu_type_and_memory_from_feature_discovery_labels() -> None:
    a800, rtx = groups()
    assert (a800.status.accelerator_type, a800.status.accelerator_memory_gb) == ("NVIDIA-A800-SXM4-80GB", 80.0)
    assert (rtx.status.accelerator_type, rtx.status.accelerator_memory_gb) == ("NVIDIA-GeForce-RTX-4090", 23.98828125)


def test_spec_wins_over_labels_and_mixed_labels_are_not_guessed() -> None:
    spec = NodeGroupSpec.model_validate(
        {"nodeSelector": {"matchLabels": {"pool": "a800"}}, "acceleratorType": "a800", "acceleratorMemoryGb": 80}
    )
    assert accelerator_of(spec, list(NODES.values())) == ("a800", 80.0)
    # two products in one group: no type from the labels; the smallest memory, so the limit holds on every node
    assert accelerator_of(A800.model_copy(), list(NODES.values())) == (None, 24564 / 1024)
    assert accelerator_of(A800, [gpu_node("x", "a800")]) == (None, None)


def test_profile_annotation_over_two_node_groups_places_with_the_gpu_model() -> None:
    annotation = json.dumps(PROFILE)
    planned = plan_job(job(), {"rlplace.io/profile": annotation}, groups(), NODES)
    applied = {entry.components: entry for entry in planned.applied}
    # the 56 GB actor never on the 24 GB 4090s, although they are priced faster for it
    assert applied["actor"].node_group == "a800"
    assert {entry.node_group for entry in planned.applied} == {"a800", "4090"}
    assert planned.predicted_iteration_time is not None
    actor_nodes = next(c.nodes for c in planned.summary.components if c.name == "actor")
    assert set(actor_nodes) <= {"a0", "a1"}


def test_spec_profile_takes_the_same_keys() -> None:
    spec = job(profile=PROFILE | {"syncBandwidthGbS": {"acrossGroups": 10}, "collocatedOffload": True})
    profile = profile_of(spec, {})
    assert profile["sync_bandwidth_gb_s"] == {"across_groups": 10.0}
    assert profile["actor_cost_by_type"]["NVIDIA-A800-SXM4-80GB"] == 100.0
    planned = plan_job(spec, {}, groups(), NODES)
    assert {e.components: e.node_group for e in planned.applied}["actor"] == "a800"


def test_spec_profile_prices_the_actors_collectives() -> None:
    """actorCollectiveGb reaches auto placement as actor_collective_gb: the prediction includes the actor's
    all-reduce over the slowest link among its nodes, and a zero is refused by the model the CRD comes from."""
    without = plan_job(job(profile=PROFILE), {}, groups(), NODES)
    spec = job(profile=PROFILE | {"actorCollectiveGb": 40})
    assert profile_of(spec, {})["actor_collective_gb"] == 40.0
    priced = plan_job(spec, {}, groups(), NODES)
    assert priced.predicted_iteration_time is not None and without.predicted_iteration_time is not None
    assert priced.predicted_iteration_time > without.predicted_iteration_time
    with pytest.raises(PlacementError, match="actorCollectiveGb"):
        profile_of(job(), {"rlplace.io/profile": json.dumps(PROFILE | {"actorCollectiveGb": 0})})


def test_a_job_whose_actor_fits_nowhere_is_a_one_line_error() -> None:
    profile = json.dumps(PROFILE | {"actorMemoryGb": 100})
    with pytest.raises(PlacementError, match="no valid placement"):
        plan_job(job(), {"rlplace.io/profile": profile}, groups(), NODES)


def test_groups_without_gpu_labels_keep_todays_search() -> None:
    plain = {
        name: NodeInfo(name, dict(n.labels) | {GPU_PRODUCT_LABEL: "", GPU_MEMORY_LABEL: ""}, n.allocatable, True)
        for name, n in NODES.items()
    }
    nodes = list(plain.values())
    bare = [
        JobGroup("a800", A800, nodegroup_status(A800, nodes, 1)),
        JobGroup("4090", RTX, nodegroup_status(RTX, nodes, 1)),
    ]
    cluster = job_cluster(bare, plain)
    assert all(g.accelerator_memory_gb is None for g in cluster.node_groups)
    costs = '{"actor_cost": 40, "inference_cost": 8, "rollout_cost": 60}'
    planned = plan_job(job(), {"rlplace.io/profile": costs}, bare, plain)
    assert all(entry.node_group is None for entry in planned.applied)


def test_profile_model_needs_a_cost_of_some_kind() -> None:
    Profile.model_validate({"actorCostByType": {"a800": 1}, "rolloutCost": 2})
    with pytest.raises(ValueError, match="greater than 0"):
        Profile.model_validate({"actorCostByType": {"a800": 0}, "rolloutCost": 2})


def test_generated_crds_use_only_what_a_structural_schema_allows() -> None:
    # the API server refuses a CRD with propertyNames (seen in e2e: "field not declared in schema")
    from pathlib import Path

    crds = Path(__file__).resolve().parents[3] / "crds"
    for path in crds.glob("*.yaml"):
        assert "propertyNames" not in path.read_text(), path.name
