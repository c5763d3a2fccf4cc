"""RLJob spec + NodeGroups + nodes -> plan, workers and summary (no cluster)."""

from __future__ import annotations

import pytest

from placement_core import CapacityError, PlacementError
from rlplace_operator.api.nodegroup import NodeGroupSpec
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.raycluster import build_raycluster_spec
from rlplace_operator.cluster.selection import JobGroup, NodeInfo, nodegroup_status
from rlplace_operator.planning.plan import plan_job, profile_of

A800 = NodeGroupSpec.model_validate(
    {"nodeSelector": {"matchLabels": {"gpu": "a800"}}, "env": [{"name": "NCCL_IB", "value": "1"}]}
)
NODES = {f"a{i}": NodeInfo(f"a{i}", {"gpu": "a800"}, {"nvidia.com/gpu": "8"}, True) for i in range(2)}
GROUPS = [JobGroup("a800", A800, nodegroup_status(A800, list(NODES.values()), 1))]


def job(**spec: object) -> RLJobSpec:
    return RLJobSpec.model_validate({"nodeGroups": ["a800"], **spec})


def test_collocated_model_parallel_job() -> None:
    spec = job(
        placementMode="modelParallel",
        componentPlacement=[{"components": "actor,rollout,reward", "placement": "all", "nodeGroup": "a800"}],
        modelParallel={"actorTensorParallelSize": 4, "rolloutTensorParallelSize": 2},
    )
    planned = plan_job(spec, {}, GROUPS, NODES)
    assert planned.summary.mode == "collocated"
    rollout = planned.plan.component("rollout").processes
    assert [p.placement.visible_accelerators for p in rollout[:4]] == [("0", "2"), ("1", "3"), ("4", "6"), ("5", "7")]
    assert [w.name for w in planned.workers] == ["a0", "a1"] and planned.gpus == 16
    assert rollout[0].env["NCCL_IB"] == "1" and rollout[0].env["CUDA_VISIBLE_DEVICES"] == "0,2"
    assert {c.name: c.processes for c in planned.summary.components} == {"actor": 16, "rollout": 8, "reward": 16}


def test_each_worker_pod_starts_the_processes_the_plan_puts_on_its_node_at_once() -> None:
    spec = job(componentPlacement=[{"components": "actor,rollout,reward", "placement": "0-3"}])
    planned = plan_job(spec, {}, GROUPS, NODES)
    (worker,) = planned.workers
    assert worker.processes == 12  # 3 components on GPUs 0-3
    (group,) = build_raycluster_spec("train", spec, planned.workers)["workerGroupSpecs"]
    env = {e["name"]: e.get("value") for e in group["template"]["spec"]["containers"][0]["env"]}
    assert env["RAY_worker_maximum_startup_concurrency"] == "12"  # not one at a time (Ray's count of a 500m pod)
    # ... and prestarted when the pod starts (Ray prestarts as many workers as it counts CPUs)
    assert group["rayStartParams"]["num-cpus"] == "12"
    roomy = job(
        componentPlacement=[{"components": "actor,rollout,reward", "placement": "0-3"}],
        ray={"workerResources": {"cpu": "32", "memory": "64Gi"}},
    )
    (group,) = build_raycluster_spec("train", roomy, planned.workers)["workerGroupSpecs"]
    assert "num-cpus" not in group["rayStartParams"]  # a pod of 32 CPUs already counts more than 12


def test_only_used_nodes_get_workers() -> None:
    planned = plan_job(job(componentPlacement=[{"components": "actor", "placement": "8-11"}]), {}, GROUPS, NODES)
    assert [w.name for w in planned.workers] == ["a1"] and planned.workers[0].requests == {"nvidia.com/gpu": 8}


def test_too_few_gpus_is_a_capacity_error_and_bad_ranks_are_not() -> None:
    with pytest.raises(CapacityError, match="out of range"):
        plan_job(job(componentPlacement=[{"components": "actor", "placement": "0-31"}]), {}, GROUPS, NODES)
    with pytest.raises(PlacementError, match="reversed range") as err:
        plan_job(job(componentPlacement=[{"components": "actor", "placement": "3-1"}]), {}, GROUPS, NODES)
    assert not isinstance(err.value, CapacityError)


def test_profile_comes_from_the_annotation_first() -> None:
    spec = job(autoPlacement={"enabled": True}, profile={"actorCost": 1, "rolloutCost": 2, "inferenceCost": 3})
    annotation = '{"actor_cost": 9, "rollout_cost": 4}'
    assert profile_of(spec, {"rlplace.io/profile": annotation}) == {"actor_cost": 9.0, "rollout_cost": 4.0}
    assert profile_of(spec, {}) == {"actor_cost": 1.0, "inference_cost": 3.0, "rollout_cost": 2.0}
    with pytest.raises(PlacementError, match="Invalid JSON"):
        profile_of(spec, {"rlplace.io/profile": "{"})


def test_context_parallelism_multiplies_the_actor_model_parallel_size() -> None:
    """tp 2, cp 2 on 16 GPUs: 4 data-parallel replicas of 4 GPUs each, not 8."""
    from placement_core.components import ModelParallelComponentPlacement
    from rlplace_operator.cluster.selection import job_cluster
    from rlplace_operator.planning.plan import model_parallel_settings, placement_entries

    spec = job(
        placementMode="modelParallel",
        componentPlacement=[{"components": "actor,rollout,reward", "placement": "all"}],
        modelParallel={"actorTensorParallelSize": 2, "actorContextParallelSize": 2},
    )
    settings = model_parallel_settings(spec)
    assert (settings.actor.training_parallel, settings.inference.training_parallel) == (4, 4)
    entries = placement_entries(spec.component_placement)
    placed = ModelParallelComponentPlacement.from_entries(entries, job_cluster(GROUPS, NODES), settings)
    assert placed.actor_dp_size == 4


def test_auto_placement_of_a_job_whose_entries_name_node_groups() -> None:
    """The live cluster (with its NodeGroups) is what auto placement searches: an entry naming 'a800' must not
    fail with 'unknown node group'."""
    spec = job(
        placementMode="modelParallel",
        componentPlacement=[{"components": "actor,rollout,reward", "placement": "all", "nodeGroup": "a800"}],
        algorithm={"groupSize": 4, "rolloutBatchSize": 32, "maxRunningRequests": 128},
    )
    planned = plan_job(
        spec, {"rlplace.io/profile": '{"actor_cost": 40, "inference_cost": 8, "rollout_cost": 60}'}, GROUPS, NODES
    )
    assert planned.predicted_iteration_time is not None
    assert planned.applied[0].components.startswith(("actor", "rollout"))
    assert sum(c.gpus for c in planned.summary.components if c.name != "reward") >= 16


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"actor_cost": 0, "rollout_cost": 1}', "actor_cost: Input should be greater than 0"),
        ('{"actor_cost": 1, "rollout_cost": -2}', "rollout_cost: Input should be greater than 0"),
        ('{"actor_cost": 1, "rollout_cost": 2, "bogus": 1}', "bogus: Extra inputs are not permitted"),
        ("not json", "Invalid JSON"),
    ],
)
def test_profile_annotation_is_checked_like_spec_profile(raw: str, expected: str) -> None:
    from placement_core.errors import PlacementError
    from rlplace_operator.api.rljob import RLJobSpec
    from rlplace_operator.planning.plan import profile_of

    spec = RLJobSpec(node_groups=["a800"], auto_placement={"enabled": True})
    with pytest.raises(PlacementError, match=expected):
        profile_of(spec, {"rlplace.io/profile": raw})
    assert profile_of(spec, {"rlplace.io/profile": '{"actorCost": 2, "rollout_cost": 3}'}) == {
        "actor_cost": 2.0,
        "rollout_cost": 3.0,
    }


def test_profile_changed_reads_kopf_diffs_at_any_depth() -> None:
    from rlplace_operator.controllers.rljob import profile_changed

    key = "rlplace.io/profile"
    assert profile_changed([("add", ("metadata", "annotations"), None, {key: "{}"})])
    assert profile_changed([("change", ("metadata", "annotations", key), "a", "b")])
    assert profile_changed([("add", ("metadata",), None, {"annotations": {key: "{}"}})])
    assert not profile_changed([("change", ("metadata", "annotations"), {"other": "1"}, {"other": "2"})])
    assert not profile_changed([("change", ("metadata", "labels", "team"), "a", "b")])
    assert not profile_changed(None)
