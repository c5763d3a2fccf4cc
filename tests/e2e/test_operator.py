"""The operator against a real API server: NodeGroups, RLJobs, the ConfigMap and the KubeRay RayCluster.

The operator runs as a local process (the `rlplace_operator` fixture), with the identity the `operator_kubeconfig`
fixture gives it: the Helm chart's ServiceAccount when the chart is installed (see test_helm.py), otherwise
the admin kubeconfig.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from placement_core.components import component_placement
from placement_core.plan import build_plan
from rlplace_operator.api.rljob import (
    MIN_ABOVE_MAX_MESSAGE,
    REPLICAS_NEED_REPLACE_MESSAGE,
    REPLICAS_OUT_OF_RANGE_MESSAGE,
)

from e2e_cluster import wait_for
from rlplace_fixtures import GROUP, VERSION, Jobs, example_job, pinned_nodes, run_tool

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
        lambda: pinned_nodes(jobs.raycluster("collocated")["spec"]) == ["a800-1"],
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

    def apply(placement: str, mode: str = "modelParallel", components: list | None = None) -> str:
        body = example_job("rljob-collocated.yaml")
        body["metadata"]["namespace"] = namespace
        body["spec"]["componentPlacement"][0]["placement"] = placement
        body["spec"]["placementMode"] = mode
        if components is not None:
            body["spec"]["components"] = components
        result = run_tool("kubectl", kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(body), check=False)
        assert result.returncode != 0, result.stdout
        return result.stderr

    assert "placement must be parts R[:P] separated by commas" in apply("3-1:x")
    assert "placement must be parts R[:P] separated by commas" in apply("all:all")
    assert 'supported values: "hybrid", "modelParallel"' in apply("0-7", mode="both")
    # An elastic range (docs/elastic.md) on a component that is not Replace, or one that holds no count.
    assert REPLICAS_NEED_REPLACE_MESSAGE in apply("0-7", components=[{"name": "rollout", "maxReplicas": 4}])
    replace = {"name": "rollout", "onLoss": "Replace"}
    assert MIN_ABOVE_MAX_MESSAGE in apply("0-7", components=[{**replace, "minReplicas": 5, "maxReplicas": 4}])
    assert REPLICAS_OUT_OF_RANGE_MESSAGE in apply("0-7", components=[{**replace, "replicas": 9, "maxReplicas": 8}])


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
    assert pinned_nodes(jobs.raycluster("collocated")["spec"]) == ["a800-0", "a800-1", "a800-2"]


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


def test_nodegroup_whose_gpu_nodes_left_drops_its_hardware_type(
    k8s: client.ApiClient, fake_node, rlplace_operator: object
) -> None:
    fake_node("fleeting-0", labels={"rlplace.io/gpu-type": "fleeting"}, gpus=8)
    with temporary_nodegroup(k8s, "fleeting", "fleeting") as custom:

        def status() -> dict:
            return custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", "fleeting").get("status") or {}

        wait_for(lambda: status().get("hardwareType") == "Accelerator", 30, "an Accelerator group")
        client.CoreV1Api(k8s).delete_node("fleeting-0")
        wait_for(lambda: status().get("totalNodes") == 0, 30, "the node gone from the group")
        assert "hardwareType" not in status() and status()["nodes"] == []


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


def test_delete_does_not_need_the_operator(jobs: Jobs, stop_operator: Callable[[], None]) -> None:
    """Jobs carry no kopf finalizer (the operator has nothing to clean up that the garbage collector does not),
    Running, still Provisioning or Queued: with the operator down all go, and their RayClusters with them."""
    jobs.create(example_job("rljob-disaggregated.yaml"))
    # A claim no volume will ever bind (no class, no PersistentVolume): its worker pod waits, the job Provisioning.
    claim = {
        "metadata": {"name": "never-bound"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    jobs.core.create_namespaced_persistent_volume_claim(jobs.namespace, claim)
    stuck = example_job("rljob-collocated.yaml")
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "never-bound"}}
    stuck["spec"]["pods"] = {"workers": {"volumes": [volume], "volumeMounts": [{"name": "data", "mountPath": "/data"}]}}
    jobs.create(stuck)
    jobs.wait_phase("disaggregated", "Running", timeout=90)
    jobs.wait_phase("collocated", "Provisioning", timeout=60)
    waiting = example_job("rljob-disaggregated.yaml")  # the one 4090 node is taken: it queues
    waiting["metadata"]["name"] = "waiting"
    jobs.create(waiting)
    jobs.wait_phase("waiting", "Queued", timeout=60)
    time.sleep(5)  # a few queue rechecks
    names = ("disaggregated", "collocated", "waiting")
    for name in names:
        assert not jobs.get(name)["metadata"].get("finalizers"), jobs.get(name)["metadata"]
    stop_operator()
    for name in names:
        jobs.delete(name)
    for name in names:
        wait_for(lambda name=name: _missing(lambda: jobs.get(name)), 20, f"RLJob {name} deleted without the operator")
        wait_for(lambda name=name: jobs.raycluster(name) is None, 60, f"RayCluster {name} garbage-collected")


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
        autoPlacement={"enabled": True},
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


@contextlib.contextmanager
def temporary_nodegroup(k8s: client.ApiClient, name: str, gpu_type: str) -> Iterator[client.CustomObjectsApi]:
    """A NodeGroup of the nodes labelled rlplace.io/gpu-type=`gpu_type`, deleted afterwards."""
    custom = client.CustomObjectsApi(k8s)
    group = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeGroup",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": gpu_type}}},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", group)
    try:
        yield custom
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", name)


def _events(jobs: Jobs, name: str, reason: str) -> list[client.CoreV1Event]:
    items = jobs.core.list_namespaced_event(jobs.namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in items if e.reason == reason]


def _versions(jobs: Jobs, name: str) -> tuple[str, str, str]:
    configmap = jobs.core.read_namespaced_config_map(f"{name}-placement", jobs.namespace)
    return (
        jobs.get(name)["metadata"]["resourceVersion"],
        configmap.metadata.resource_version,
        jobs.raycluster(name)["metadata"]["resourceVersion"],
    )


def _worker_nodes(jobs: Jobs, name: str) -> list[str]:
    return pinned_nodes(jobs.raycluster(name)["spec"])


def test_restart_with_an_unchanged_running_job_writes_nothing(jobs: Jobs, restart_operator: Callable[[], None]) -> None:
    jobs.create(example_job("rljob-collocated.yaml"))
    jobs.wait_phase("collocated", "Running", timeout=90)
    time.sleep(2)
    before = _versions(jobs, "collocated")
    placed_events = len(_events(jobs, "collocated", "Placed"))
    restart_operator()
    time.sleep(8)
    assert _versions(jobs, "collocated") == before
    assert len(_events(jobs, "collocated", "Placed")) == placed_events


def test_nodegroup_change_under_a_running_job_is_reported_and_the_job_keeps_its_nodes(
    jobs: Jobs, k8s: client.ApiClient, restart_operator: Callable[[], None]
) -> None:
    with temporary_nodegroup(k8s, "moving-4090", "4090") as custom:
        body = example_job("rljob-disaggregated.yaml")
        body["spec"]["nodeGroups"] = ["moving-4090"]
        jobs.create(body)
        job = jobs.wait_phase("disaggregated", "Running", timeout=90)
        nodes = _worker_nodes(jobs, "disaggregated")
        placement = job["status"]["placement"]
        # The selector no longer matches the job's node: the job keeps it and says so, once.
        custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            "nodegroups",
            "moving-4090",
            {"spec": {"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": "none"}}}},
        )

        def changed() -> dict | None:
            status = jobs.get("disaggregated")["status"]
            condition = next((c for c in status["conditions"] if c["type"] == "NodeGroupChanged"), None)
            return condition if condition and condition["status"] == "True" else None

        condition = wait_for(changed, 30, "NodeGroupChanged on the job")
        assert condition["reason"] == "NodesLeftNodeGroup" and nodes[0] in condition["message"]
        wait_for(lambda: _events(jobs, "disaggregated", "NodesLeftNodeGroup"), 20, "a NodesLeftNodeGroup Event")
        restart_operator()
        time.sleep(6)
        status = jobs.get("disaggregated")["status"]
        assert status["phase"] == "Running" and status["placement"] == placement
        assert _worker_nodes(jobs, "disaggregated") == nodes
        assert len(_events(jobs, "disaggregated", "NodesLeftNodeGroup")) == 1
        # Deleting the group waits while the job runs, and completes once the job is gone.
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", "moving-4090")
        time.sleep(4)
        live = custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", "moving-4090")
        assert live["metadata"].get("deletionTimestamp")
        wait_for(lambda: (changed() or {}).get("reason") == "NodeGroupDeleting", 30, "NodeGroupDeleting on the job")
        jobs.delete("disaggregated")
        wait_for(
            lambda: _missing(lambda: custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", "moving-4090")),
            60,
            "the NodeGroup deleted once no job uses it",
        )


def test_invalid_profile_annotation_on_a_running_job_keeps_it_running(jobs: Jobs) -> None:
    body = example_job("rljob-collocated.yaml")
    jobs.create(body)
    job = jobs.wait_phase("collocated", "Running", timeout=90)
    placement, versions = job["status"]["placement"], _versions(jobs, "collocated")[1:]
    bad = json.dumps({"actor_cost": 0, "inference_cost": 8, "rollout_cost": 60})
    jobs.patch("collocated", {"metadata": {"annotations": {"rlplace.io/profile": bad}}})

    def refused() -> dict | None:
        status = jobs.get("collocated")["status"]
        placed = next(c for c in status["conditions"] if c["type"] == "Placed")
        return status if placed["status"] == "False" else None

    status = wait_for(refused, 30, "the change refused")
    placed = next(c for c in status["conditions"] if c["type"] == "Placed")
    assert placed["reason"] == "PlacementInvalid" and "greater than 0" in placed["message"]
    assert status["phase"] == "Running" and status["placement"] == placement
    assert "keeps running its last plan" in status["message"]
    assert _versions(jobs, "collocated")[1:] == versions  # ConfigMap and RayCluster untouched
    wait_for(lambda: _events(jobs, "collocated", "PlacementInvalid"), 20, "a PlacementInvalid Event")


def test_free_text_has_a_length_limit(kubeconfig: str, namespace: str, local_nodegroups: None) -> None:
    body = example_job("rljob-collocated.yaml")
    body["metadata"]["namespace"] = namespace
    body["spec"]["entrypoint"] = "python train.py " + "x" * 280_000
    result = run_tool("kubectl", kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(body), check=False)
    assert result.returncode != 0 and "spec.entrypoint: Too long" in result.stderr, result.stderr


def test_replan_across_the_plan_size_boundary_keeps_one_key(
    jobs: Jobs, k8s: client.ApiClient, fake_node: Callable[..., object]
) -> None:
    """Server-side apply only: a re-plan that moves the plan between data/plan.json and binaryData/plan.json.gz
    (over 512 KiB) leaves exactly one of them, both ways."""
    fake_node("big-0", labels={"rlplace.io/gpu-type": "big"}, gpus=512)
    with temporary_nodegroup(k8s, "big", "big"):
        body = example_job("rljob-collocated.yaml")
        body["spec"].update(
            nodeGroups=["big"],
            placementMode="hybrid",
            componentPlacement=[{"components": "actor,rollout", "placement": "0-511"}],
        )
        body["spec"].pop("modelParallel", None)
        jobs.create(body)

        def keys() -> tuple[set[str], set[str]]:
            cm = jobs.core.read_namespaced_config_map("collocated-placement", jobs.namespace)
            return set(cm.data or {}) - {"node-ranks"}, set(cm.binary_data or {})  # the plan's keys

        def has_keys(expected: tuple[set[str], set[str]]) -> bool:
            with contextlib.suppress(ApiException):
                return keys() == expected
            return False

        gzipped, text = (set(), {"plan.json.gz"}), ({"plan.json"}, set())
        wait_for(lambda: has_keys(gzipped), 90, "a gzipped plan only")
        for placement, expected in (("0-7", text), ("0-511", gzipped)):
            jobs.patch(
                "collocated",
                {"spec": {"componentPlacement": [{"components": "actor,rollout", "placement": placement}]}},
            )
            wait_for(lambda expected=expected: has_keys(expected), 60, f"only {expected} after re-plan to {placement}")
        assert len(jobs.plan("collocated")["components"]["actor"]["processes"]) == 512


def test_operator_exits_with_a_message_until_the_crds_are_installed(
    kubeconfig: str, operator_kubeconfig: str, restart_operator: Callable[[], None]
) -> None:
    """kopf watches only the kinds served when it starts, so without rlplace's CRDs the operator exits (and
    Kubernetes restarts it) instead of running without ever serving RLJobs. Last in this file: it removes
    the RLJob CRD for a moment, and restarts the session's operator after putting it back."""
    run_tool("kubectl", kubeconfig, "delete", "crd", "rljobs.rlplace.io", "--wait=true")
    try:
        wait_for(
            lambda: run_tool("kubectl", kubeconfig, "get", "rljobs", check=False).returncode != 0,
            30,
            "rljobs no longer served",
        )
        started = subprocess.run(
            [sys.executable, "-m", "rlplace_operator.main"],
            env={**os.environ, "KUBECONFIG": operator_kubeconfig},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert started.returncode == 1
        assert "error: the API server does not serve rljobs.rlplace.io" in started.stderr
        assert "Traceback" not in started.stderr
    finally:
        run_tool("kubectl", kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        # A CRD just made has no status yet, and `kubectl wait` then fails at once ("accessor error: <nil>")
        # instead of waiting: ask again until it is Established.
        wait_for(
            lambda: (
                run_tool(
                    "kubectl", kubeconfig, "wait", "--for=condition=Established", "crd/rljobs.rlplace.io", check=False
                ).returncode
                == 0
            ),
            60,
            "rljobs.rlplace.io Established",
            interval=1,
        )
        restart_operator()
