"""Smoke tests of the e2e cluster: fake GPU nodes, GPU scheduling, KubeRay, and the cluster scripts.

They run against the local control plane (started by conftest.py) or any cluster in KUBECONFIG that was
set up like e2e/nodes.yaml (e2e/kind/). Tests of the scripts themselves need the local control plane.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from e2e_cluster import CLUSTER_SCRIPTS, GPU, delete_namespace_freeing_nodes, e2e_dir, node_ready, run_script, wait_for

pytestmark = pytest.mark.e2e

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # preloaded on kind nodes; never pulled under kwok


def core(api):
    from kubernetes import client

    return client.CoreV1Api(api)


def gpu_pod(name: str, gpus: int, node_selector: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": node_selector,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": PAUSE_IMAGE,
                    "resources": {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
                }
            ],
        },
    }


# ----------------------------------------------------------------------------------------------------------
# Nodes


@pytest.mark.parametrize(
    ("selector", "count", "resource", "amount"),
    [
        ("rlplace.io/gpu-type=a800", 2, GPU, "8"),
        ("rlplace.io/gpu-type=4090", 1, GPU, "8"),
        ("rlplace.io/robot=franka", 1, "rlplace.io/franka", "2"),
        ("rlplace.io/cpu-only=true", 2, "cpu", None),
    ],
)
def test_node_groups_ready_with_capacity(k8s, selector, count, resource, amount):
    nodes = core(k8s).list_node(label_selector=selector).items
    assert len(nodes) >= count, f"{selector}: {[n.metadata.name for n in nodes]}"
    ranks = sorted(n.metadata.labels.get("rlplace.io/node-rank", "?") for n in nodes)
    assert ranks[:count] == [str(i) for i in range(count)], f"{selector}: node-rank labels {ranks}"
    for n in nodes:
        assert node_ready(n), f"{n.metadata.name} not Ready: {n.status.conditions}"
        if amount is not None:
            assert n.status.capacity.get(resource) == amount, (n.metadata.name, n.status.capacity)
            assert n.status.allocatable.get(resource) == amount, (n.metadata.name, n.status.allocatable)
        if resource == "cpu":  # CPU-only nodes have no accelerator
            assert GPU not in n.status.allocatable, n.status.allocatable


# ----------------------------------------------------------------------------------------------------------
# GPU scheduling: 8 GPUs fill an a800 node; a 9th GPU on it stays Pending


@pytest.fixture(scope="module")
def full_a800(k8s):
    """A namespace with one Running pod holding all 8 GPUs of an a800 node; yields (namespace, node)."""
    from kubernetes import client

    api = core(k8s)
    ns = f"e2e-gpu-{uuid.uuid4().hex[:6]}"
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        wait_for(lambda: api.list_namespaced_service_account(ns).items, 30, "default ServiceAccount")
        api.create_namespaced_pod(ns, gpu_pod("eight-gpus", 8, {"rlplace.io/gpu-type": "a800"}))

        def running():
            p = api.read_namespaced_pod("eight-gpus", ns)
            return p if p.status.phase == "Running" else None

        pod = wait_for(running, 60, "the 8-GPU pod to run")
        yield ns, pod.spec.node_name
    finally:
        delete_namespace_freeing_nodes(k8s, ns)


def test_eight_gpu_pod_runs_on_an_a800_node(k8s, full_a800):
    ns, node = full_a800
    pod = core(k8s).read_namespaced_pod("eight-gpus", ns)
    assert pod.status.phase == "Running"
    assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
    labels = core(k8s).read_node(node).metadata.labels
    assert labels["rlplace.io/gpu-type"] == "a800"


def test_ninth_gpu_on_that_node_stays_pending(k8s, full_a800):
    ns, node = full_a800
    api = core(k8s)
    api.create_namespaced_pod(ns, gpu_pod("ninth-gpu", 1, {"kubernetes.io/hostname": node}))

    def unschedulable():
        p = api.read_namespaced_pod("ninth-gpu", ns)
        cond = [c for c in (p.status.conditions or []) if c.type == "PodScheduled"]
        return p if cond and cond[0].status == "False" and cond[0].reason == "Unschedulable" else None

    pod = wait_for(unschedulable, 30, "the scheduler to report the 9th GPU pod Unschedulable")
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    message = next(c.message for c in pod.status.conditions if c.type == "PodScheduled")
    assert f"Insufficient {GPU}" in message, message


# ----------------------------------------------------------------------------------------------------------
# KubeRay


def test_raycluster_with_gpu_workers_becomes_ready(k8s, namespace):
    from kubernetes import client

    ray = client.CustomObjectsApi(k8s)
    image = "rayproject/ray:2.60.0"  # never pulled under kwok
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "smoke"},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {
                        "nodeSelector": {"rlplace.io/cpu-only": "true"},
                        "containers": [{"name": "ray-head", "image": image, "resources": {"requests": {"cpu": "1"}}}],
                    }
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 2,
                    "rayStartParams": {},
                    "template": {
                        "spec": {
                            "nodeSelector": {"rlplace.io/gpu-type": "4090"},
                            "containers": [
                                {
                                    "name": "ray-worker",
                                    "image": image,
                                    "resources": {"requests": {GPU: "4"}, "limits": {GPU: "4"}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }
    ray.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", body)

    def ready():
        rc = ray.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", "smoke")
        status = rc.get("status") or {}
        conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
        # KubeRay may say ready before its worker counters catch up: both are waited for.
        provisioned = status.get("state") == "ready" or conds.get("RayClusterProvisioned") == "True"
        return rc if provisioned and status.get("readyWorkerReplicas", 0) == 2 else None

    rc = wait_for(ready, 60, "RayCluster 'smoke' to become ready with both workers")
    assert rc["status"]["readyWorkerReplicas"] == 2, rc["status"]

    pods = core(k8s).list_namespaced_pod(namespace, label_selector="ray.io/cluster=smoke").items
    workers = [p for p in pods if p.metadata.labels.get("ray.io/node-type") == "worker"]
    assert len(workers) == 2
    for p in workers:
        assert p.status.phase == "Running"
        node = core(k8s).read_node(p.spec.node_name)
        assert node.metadata.labels["rlplace.io/gpu-type"] == "4090"


def test_fake_node_added_at_runtime_runs_a_pending_pod(k8s, namespace, fake_node):
    """A pod that fits no node stays Pending; adding a matching node lets it start."""
    api = core(k8s)
    group = f"h100-{uuid.uuid4().hex[:4]}"
    api.create_namespaced_pod(namespace, gpu_pod("waits", 8, {"rlplace.io/gpu-type": group}))

    def phase():
        return api.read_namespaced_pod("waits", namespace).status.phase

    def tried():
        return any(
            c.type == "PodScheduled" for c in api.read_namespaced_pod("waits", namespace).status.conditions or []
        )

    wait_for(tried, 30, "a scheduling attempt")
    assert phase() == "Pending"
    node = fake_node(f"{group}-0", labels={"rlplace.io/gpu-type": group, "rlplace.io/node-rank": "0"}, gpus=8)
    assert node.status.allocatable[GPU] == "8"
    wait_for(lambda: phase() == "Running", 60, "the pending pod to run on the new node")
    assert api.read_namespaced_pod("waits", namespace).spec.node_name == f"{group}-0"


# ----------------------------------------------------------------------------------------------------------
# The cluster scripts' bad cases, in a separate state dir so the session's cluster is not disturbed.


@pytest.fixture
def local_cluster(kubeconfig):
    if Path(kubeconfig).resolve() != (e2e_dir() / "kubeconfig").resolve():
        pytest.skip("tests of e2e/cluster/*.sh need the local control plane, not an external KUBECONFIG")


def test_down_with_nothing_running_exits_0(tmp_path):
    res = run_script("down", env={"RLPLACE_E2E_DIR": str(tmp_path)}, timeout=60)
    assert res.returncode == 0, res.stdout
    assert "nothing to do" in res.stdout


def test_up_twice_says_already_running_and_changes_nothing(local_cluster, tmp_path):
    """A state dir whose PID files name live components: up.sh must refuse (exit 2) and touch nothing."""
    pids = tmp_path / "cluster" / "pids"
    pids.mkdir(parents=True)
    for f in (e2e_dir() / "cluster" / "pids").glob("*.pid"):
        (pids / f.name).write_text(f.read_text())
    res = run_script("up", env={"RLPLACE_E2E_DIR": str(tmp_path)}, timeout=60)
    assert res.returncode == 2, res.stdout
    assert "already running" in res.stdout and "cluster-down" in res.stdout
    assert sorted(p.name for p in pids.iterdir()) == sorted(
        f.name for f in (e2e_dir() / "cluster" / "pids").glob("*.pid")
    )
    status = run_script("status", timeout=60)
    assert status.returncode == 0, status.stdout  # the session's cluster still runs


def test_component_crash_at_start_is_reported_and_cleaned_up(local_cluster, tmp_path):
    """A kube-scheduler that exits at once: up.sh names it, shows its log, stops the rest, exits 1."""
    cache = tmp_path / "cache"
    tools = "etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok ray-operator kueue"
    dirs = subprocess.run(
        ["bash", "-c", f'source "$0"; for t in {tools}; do tool_dir $t; done', str(CLUSTER_SCRIPTS / "lib.sh")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for real in map(Path, dirs):  # ~/.cache/rlplace/<tool>-<version>: link its files into a private cache
        (cache / real.name).mkdir(parents=True)
        for f in real.iterdir():
            (cache / real.name / f.name).symlink_to(f)
    [sched] = cache.glob("kube-scheduler-*")
    (sched / "kube-scheduler").unlink()
    (sched / "kube-scheduler").write_text("#!/bin/sh\necho 'simulated crash: unknown flag' >&2\nexit 3\n")
    (sched / "kube-scheduler").chmod(0o755)
    state = tmp_path / "state"
    env = {"RLPLACE_E2E_DIR": str(state), "RLPLACE_CACHE_DIR": str(cache)}

    res = run_script("up", env=env, timeout=180)
    assert res.returncode == 1, res.stdout
    assert "component kube-scheduler failed to start" in res.stdout
    assert "simulated crash: unknown flag" in res.stdout
    assert run_script("status", env=env, timeout=60).returncode == 1  # nothing of it still runs
    ports = dict(line.split("=") for line in (state / "cluster" / "ports.env").read_text().split())
    listening = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, check=True).stdout
    still = [f"{c}:{p}" for c, p in ports.items() if f":{p} " in listening]
    assert not still, f"ports still open after a failed cluster-up: {still}"
    assert (state / "cluster" / "logs" / "kube-scheduler.log").exists()  # logs kept to read
    assert run_script("down", env=env, timeout=60).returncode == 0
    assert not (state / "cluster").exists()
