"""The operator against a real API server: NodeGroups, RLJobs, the ConfigMap and the KubeRay RayCluster.

The operator runs as a local process (the `rlplace_operator` fixture), with the identity the `operator_kubeconfig`
fixture gives it: the Helm chart's ServiceAccount when the chart is installed (see test_helm.py), otherwise
the admin kubeconfig.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from placement_core.components import component_placement
from placement_core.plan import build_plan

from e2e_cluster import wait_for
from rlplace_fixtures import GROUP, VERSION, Jobs, example_job, run_tool

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("example", ["rljob-collocated.yaml", "rljob-disaggregated.yaml", "rljob-heterogeneous.yaml"])
def test_example_reaches_running_with_pods_on_its_nodes(jobs: Jobs, example: str) -> None:
    body = example_job(example)
    name = body["metadata"]["name"]
    jobs.create(body)
    job = jobs.wait_phase(name, "Running", timeout=90)
    status = job["status"]
    assert status["rayCluster"] == name
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Validated": "True",
        "Placed": "True",
        "Admitted": "True",
        "RayClusterReady": "True",
    }
    plan = jobs.plan(name)
    planned_nodes = {p["node_name"] for c in plan["components"].values() for p in c["processes"]}
    workers = [p for p in jobs.pods(name) if p.metadata.labels.get("ray.io/node-type") == "worker"]
    assert sorted(p.spec.node_name for p in workers) == sorted(planned_nodes)
    for pod in workers:
        limits = pod.spec.containers[0].resources.limits or {}
        node = jobs.core.read_node(pod.spec.node_name)
        for resource in ("nvidia.com/gpu", "rlplace.io/franka"):
            if resource in (node.status.allocatable or {}):
                assert limits.get(resource) == node.status.allocatable[resource]
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1"
    head = [p for p in jobs.pods(name) if p.metadata.labels.get("ray.io/node-type") == "head"]
    assert len(head) == 1
    head_env = {e.name: e.value for e in head[0].spec.containers[0].env}
    assert head_env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert not any("gpu" in k for k in (head[0].spec.containers[0].resources.limits or {}))


def test_configmap_matches_rlplace_plan(jobs: Jobs) -> None:
    """The plan in the ConfigMap equals what placement_core computes offline for the same cluster."""
    body = example_job("rljob-collocated.yaml")
    jobs.create(body)
    jobs.wait_phase("collocated", "Running", timeout=90)
    live = jobs.plan("collocated")
    offline_config = {
        "runner": {"task_type": "reasoning"},
        "cluster": {
            "num_nodes": 2,
            "accelerators_per_node": 8,
            "node_groups": [{"label": "a800", "node_ranks": "0-1"}],
            "component_placement": {"actor,rollout,reward": {"node_group": "a800", "placement": "0-7"}},
        },
        "actor": {"model": {"tensor_model_parallel_size": 4}},
        "rollout": {"tensor_parallel_size": 2},
    }
    offline = build_plan(component_placement(offline_config)).to_dict()
    for name, component in offline["components"].items():
        got = live["components"][name]["processes"]
        assert [p["visible_accelerators"] for p in got] == [p["visible_accelerators"] for p in component["processes"]]
        assert [p["cluster_node_rank"] for p in got] == [p["cluster_node_rank"] for p in component["processes"]]
        assert [p["env"]["CUDA_VISIBLE_DEVICES"] for p in got] == [
            ",".join(p["visible_accelerators"]) for p in component["processes"]
        ]
    assert live["components"]["rollout"]["processes"][0]["visible_accelerators"] == ["0", "2"]


def test_update_replans_and_suspend_resume(jobs: Jobs) -> None:
    jobs.create(example_job("rljob-collocated.yaml"))
    jobs.wait_phase("collocated", "Running", timeout=90)
    jobs.patch(
        "collocated", {"spec": {"componentPlacement": [{"components": "actor,rollout,reward", "placement": "8-15"}]}}
    )
    wait_for(
        lambda: {p["node_name"] for p in jobs.plan("collocated")["components"]["actor"]["processes"]} == {"a800-1"},
        60,
        "re-plan onto the second a800 node",
    )
    wait_for(
        lambda: (
            [
                g["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                    "nodeSelectorTerms"
                ][0]["matchFields"][0]["values"]
                for g in jobs.raycluster("collocated")["spec"]["workerGroupSpecs"]
            ]
            == [["a800-1"]]
        ),
        60,
        "RayCluster updated to the new node",
    )
    jobs.patch("collocated", {"spec": {"suspend": True}})
    jobs.wait_phase("collocated", "Suspended")
    wait_for(lambda: jobs.raycluster("collocated") is None, 30, "RayCluster removed on suspend")
    assert jobs.plan("collocated")  # the ConfigMap and the job stay
    jobs.patch("collocated", {"spec": {"suspend": False}})
    jobs.wait_phase("collocated", "Running", timeout=90)


def test_delete_cascades_to_children(jobs: Jobs) -> None:
    jobs.create(example_job("rljob-disaggregated.yaml"))
    jobs.wait_phase("disaggregated", "Running", timeout=90)
    jobs.delete("disaggregated")

    def gone() -> bool:
        try:
            jobs.core.read_namespaced_config_map("disaggregated-placement", jobs.namespace)
            return False
        except ApiException as err:
            return err.status == 404 and jobs.raycluster("disaggregated") is None

    wait_for(gone, 60, "children garbage-collected")


def test_invalid_specs_are_refused_at_admission(kubeconfig: str, namespace: str, local_nodegroups: None) -> None:
    """Errors one object can show are the CRD schema's: kubectl apply fails with a readable message."""

    def apply(placement: str, mode: str = "modelParallel") -> str:
        body = example_job("rljob-collocated.yaml")
        body["metadata"]["namespace"] = namespace
        body["spec"]["componentPlacement"][0]["placement"] = placement
        body["spec"]["placementMode"] = mode
        result = run_tool("kubectl", kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(body), check=False)
        assert result.returncode != 0, result.stdout
        return result.stderr

    assert "placement must be parts R[:P] separated by commas" in apply("3-1:x")
    assert "placement must be parts R[:P] separated by commas" in apply("all:all")
    assert 'supported values: "hybrid", "modelParallel"' in apply("0-7", mode="both")


def test_semantic_error_fails_the_job_and_others_still_run(jobs: Jobs) -> None:
    broken = example_job("rljob-collocated.yaml")
    broken["metadata"]["name"] = "broken"
    broken["spec"]["componentPlacement"][0]["placement"] = "3-1"
    jobs.create(broken)
    job = jobs.wait_phase("broken", "Failed")
    assert "reversed range '3-1'" in job["status"]["message"]
    placed = {c["type"]: c for c in job["status"]["conditions"]}["Placed"]
    assert placed["status"] == "False" and placed["reason"] == "PlacementInvalid"
    events = jobs.core.list_namespaced_event(jobs.namespace, field_selector="involvedObject.name=broken").items
    assert any(e.reason == "PlacementInvalid" for e in events)
    jobs.create(example_job("rljob-disaggregated.yaml"))
    jobs.wait_phase("disaggregated", "Running", timeout=90)


def test_missing_nodegroup_waits_then_starts(jobs: Jobs, k8s: client.ApiClient) -> None:
    body = example_job("rljob-disaggregated.yaml")
    body["spec"]["nodeGroups"] = ["late-4090"]
    jobs.create(body)
    job = jobs.wait_phase("disaggregated", "Pending")
    assert "late-4090" in job["status"]["message"]
    custom = client.CustomObjectsApi(k8s)
    group = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeGroup",
        "metadata": {"name": "late-4090"},
        "spec": {"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": "4090"}}},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", group)
    try:
        jobs.wait_phase("disaggregated", "Running", timeout=90)
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", "late-4090")


def test_job_waiting_for_capacity_starts_when_a_node_joins(jobs: Jobs, fake_node: Callable[..., object]) -> None:
    body = example_job("rljob-collocated.yaml")
    body["spec"]["componentPlacement"][0]["placement"] = "0-23"
    jobs.create(body)
    job = jobs.wait_phase("collocated", "Pending")
    placed = {c["type"]: c for c in job["status"]["conditions"]}["Placed"]
    assert placed["reason"] == "InsufficientCapacity" and "out of range" in placed["message"]
    fake_node("a800-2", labels={"rlplace.io/gpu-type": "a800", "rlplace.io/node-rank": "2"}, gpus=8)
    jobs.wait_phase("collocated", "Running", timeout=90)
    assert len(jobs.raycluster("collocated")["spec"]["workerGroupSpecs"]) == 3


def test_nodegroup_status_follows_nodes(
    k8s: client.ApiClient, local_nodegroups: None, rlplace_operator: object, fake_node
) -> None:
    custom = client.CustomObjectsApi(k8s)

    def status() -> dict:
        return custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", "a800").get("status") or {}

    wait_for(lambda: status().get("totalUnits") == 16, 30, "a800 has 16 GPUs")
    assert [n["name"] for n in status()["nodes"]] == ["a800-0", "a800-1"]
    fake_node("a800-9", labels={"rlplace.io/gpu-type": "a800", "rlplace.io/node-rank": "5"}, gpus=4)
    wait_for(lambda: status().get("totalUnits") == 20, 30, "a800 counts the new node")
    assert [n["name"] for n in status()["nodes"]] == ["a800-0", "a800-1", "a800-9"]


def test_restarting_the_operator_mid_reconcile_makes_no_duplicates(
    jobs: Jobs, restart_operator: Callable[[], None]
) -> None:
    jobs.create(example_job("rljob-collocated.yaml"))
    time.sleep(0.3)
    restart_operator()
    jobs.wait_phase("collocated", "Running", timeout=90)
    clusters = jobs.custom.list_namespaced_custom_object("ray.io", "v1", jobs.namespace, "rayclusters")["items"]
    configmaps = jobs.core.list_namespaced_config_map(jobs.namespace, label_selector="rlplace.io/job=collocated").items
    assert [c["metadata"]["name"] for c in clusters] == ["collocated"]
    assert [c.metadata.name for c in configmaps] == ["collocated-placement"]


def test_delete_does_not_hang_when_the_operator_is_down(jobs: Jobs, stop_operator: Callable[[], None]) -> None:
    jobs.create(example_job("rljob-disaggregated.yaml"))
    jobs.wait_phase("disaggregated", "Running", timeout=90)
    stop_operator()
    started = time.monotonic()
    jobs.delete("disaggregated")
    wait_for(lambda: _missing(lambda: jobs.get("disaggregated")), 20, "RLJob deleted without the operator")
    assert time.monotonic() - started < 20


def _missing(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as err:
        return err.status == 404
    return False


def test_auto_placement_applies_the_search_and_follows_the_profile_annotation(jobs: Jobs) -> None:
    from placement_core import autoplace
    from placement_core.jobconfig import read_job

    def autotune(config: dict) -> autoplace.AutotuneResult:
        return autoplace.autotune(read_job(config))

    body = example_job("rljob-collocated.yaml")
    body["metadata"]["name"] = "auto"
    body["spec"].pop("componentPlacement")
    body["spec"].update(
        autoPlacement=True,
        modelParallel={},
        profile={"actorCost": 40, "inferenceCost": 8, "rolloutCost": 60},
        algorithm={"groupSize": 4, "nMinibatches": 1, "rolloutBatchSize": 32, "maxRunningRequests": 128},
    )
    offline = {
        "cluster": {"num_nodes": 2, "accelerators_per_node": 8},
        "algorithm": {"group_size": 4, "n_minibatches": 1, "recompute_logprobs": True},
        "data": {"rollout_batch_size": 32},
        "rollout": {"max_running_requests": 128},
        "profile_data": {"actor_cost": 40, "inference_cost": 8, "rollout_cost": 60},
    }
    jobs.create(body)
    status = jobs.wait_phase("auto", "Running", timeout=90)["status"]
    expected = autotune(offline)
    applied = {e["components"]: e["placement"] for e in status["appliedPlacement"]}
    assert applied == {k: str(v) for k, v in expected.component_placement.items()}
    assert status["predictedIterationTime"] == pytest.approx(expected.total_cost)

    annotation = {"actor_cost": 95.7, "inference_cost": 30.8, "rollout_cost": 59.9}
    jobs.patch("auto", {"metadata": {"annotations": {"rlplace.io/profile": json.dumps(annotation)}}})
    expected = autotune({**offline, "profile_data": annotation})
    wait_for(
        lambda: (
            (jobs.get("auto").get("status") or {}).get("predictedIterationTime") == pytest.approx(expected.total_cost)
        ),
        60,
        "re-plan with the annotation's profile",
    )


def test_profile_annotation_on_a_job_whose_entries_name_node_groups(jobs: Jobs) -> None:
    """Auto placement searches the job's live cluster, NodeGroups included: the heterogeneous example with a
    profile annotation places (it used to fail for good with "unknown node group 'a800'")."""
    body = example_job("rljob-heterogeneous.yaml")
    body["metadata"]["annotations"] = {
        "rlplace.io/profile": json.dumps({"actor_cost": 40, "inference_cost": 8, "rollout_cost": 60})
    }
    body["spec"]["algorithm"] = {"groupSize": 4, "rolloutBatchSize": 32, "maxRunningRequests": 128}
    jobs.create(body)
    status = jobs.wait_phase("heterogeneous", "Running", timeout=90)["status"]
    assert status["predictedIterationTime"] > 0
    applied = {e["components"] for e in status["appliedPlacement"]}
    assert any("actor" in key for key in applied) and any("rollout" in key for key in applied)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Placed"] == "True"
