"""Smoke tests of the real nodes (kubelet + containerd + runc + CNI + kube-proxy + CoreDNS, e2e/cluster/nodes.sh).

Pods here really run: a command's output comes back through `kubectl logs`, pods on two nodes talk over the
pod network and through a Service found by DNS, and KubeRay starts a real Ray cluster from the image
e2e/images/build.sh made. Skipped on clusters without real nodes (kind without the images loaded, or a local
cluster started with RLPLACE_E2E_REAL_NODES=0).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from placement_core import contract

from e2e_cluster import CLUSTER_SCRIPTS, GPU, REPO, run_script, wait_for

pytestmark = pytest.mark.e2e

REAL_NODE_LABEL = "rlplace.io/real-node"


def image_names() -> dict[str, str]:
    """e2e/images.env: the one place the images' names are written."""
    lines = (REPO / "e2e" / "images.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


IMAGES = image_names()


@pytest.fixture(scope="session")
def real_nodes(k8s) -> dict[str, dict[str, str]]:
    """name -> labels of every real node; skips the module on clusters without any."""
    from kubernetes import client

    nodes = client.CoreV1Api(k8s).list_node(label_selector=f"{REAL_NODE_LABEL}=true").items
    if not nodes:
        pytest.skip(f"no node labelled {REAL_NODE_LABEL}=true: this cluster has no real nodes (see e2e/README.md)")
    return {n.metadata.name: n.metadata.labels for n in nodes}


def node_named(real_nodes: dict[str, dict[str, str]], label: str, value: str) -> str:
    [name] = [n for n, labels in real_nodes.items() if labels.get(label) == value]
    return name


def kubectl(kubeconfig: str, *args: str, timeout: float = 60) -> str:
    res = subprocess.run(
        [str(REPO / ".e2e" / "bin" / "kubectl"), "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert res.returncode == 0, f"kubectl {' '.join(args)}: {res.stderr}"
    return res.stdout


def pod(name: str, node: str, command: str, image: str = "", **spec: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": image or IMAGES["BASE_IMAGE"],
                    "imagePullPolicy": "Never",
                    "command": ["bash", "-c", command],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                }
            ],
            **spec,
        },
    }


def phase(core, namespace: str, name: str) -> str:
    return core.read_namespaced_pod(name, namespace).status.phase


def wait_phase(core, namespace: str, name: str, want: str, timeout: float = 90) -> None:
    def reached() -> bool:
        got = phase(core, namespace, name)
        assert got != "Failed" or want == "Failed", core.read_namespaced_pod_log(name, namespace)
        return got == want

    wait_for(reached, timeout, f"pod {namespace}/{name} {want}", interval=0.5)


@pytest.fixture
def core(k8s):
    from kubernetes import client

    return client.CoreV1Api(k8s)


def test_real_nodes_have_their_labels_fake_devices_and_real_capacity(core, real_nodes) -> None:
    a800 = core.read_node(node_named(real_nodes, "rlplace.io/real-gpu-type", "a800"))
    rtx = core.read_node(node_named(real_nodes, "rlplace.io/real-gpu-type", "4090"))
    robot = core.read_node(node_named(real_nodes, "rlplace.io/real-robot", "franka"))
    assert a800.status.allocatable[GPU] == "8" and rtx.status.allocatable[GPU] == "8"
    assert robot.status.allocatable["rlplace.io/franka"] == "2"
    assert GPU not in robot.status.allocatable
    with open("/proc/meminfo") as meminfo:  # the host's memory, not kwok's made-up 512Gi
        host_kib = int(meminfo.readline().split()[1])
    for node in (a800, rtx, robot):
        assert node.status.node_info.container_runtime_version.startswith("containerd://2.")
        assert node.metadata.annotations.get("kwok.x-k8s.io/node") is None
        reported_kib = int(node.status.capacity["memory"].removesuffix("Ki"))
        assert abs(reported_kib - host_kib) < host_kib // 50, (reported_kib, host_kib)


def test_pod_runs_a_command_and_its_logs_come_back(core, namespace, real_nodes, kubeconfig) -> None:
    node = node_named(real_nodes, "rlplace.io/real-gpu-type", "a800")
    token = uuid.uuid4().hex
    core.create_namespaced_pod(namespace, pod("hello", node, f"echo {token}; python3 -c 'print(6 * 7)'"))
    wait_phase(core, namespace, "hello", "Succeeded")
    assert kubectl(kubeconfig, "-n", namespace, "logs", "hello").split() == [token, "42"]


def test_pod_reaches_a_pod_on_another_node_and_a_service_by_dns(core, namespace, real_nodes) -> None:
    from kubernetes import client

    server_node = node_named(real_nodes, "rlplace.io/real-gpu-type", "a800")
    client_node = node_named(real_nodes, "rlplace.io/real-gpu-type", "4090")
    core.create_namespaced_pod(
        namespace,
        pod(
            "web",
            server_node,
            "mkdir /tmp/www && echo served-by-$HOSTNAME >/tmp/www/index.html && "
            "cd /tmp/www && exec python3 -m http.server 8080",
        ),
    )
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80, target_port=8080)]),
    )
    core.create_namespaced_service(namespace, service)
    wait_phase(core, namespace, "web", "Running")
    web_ip = core.read_namespaced_pod("web", namespace).status.pod_ip
    fetch = (
        f"for i in $(seq 30); do wget -qO- -T 2 http://{web_ip}:8080/ && break; sleep 1; done; "
        f"for i in $(seq 30); do wget -qO- -T 2 http://web.{namespace}.svc.cluster.local/ && break; sleep 1; done"
    )
    core.create_namespaced_pod(namespace, pod("fetch", client_node, fetch))
    wait_phase(core, namespace, "fetch", "Succeeded", timeout=120)
    assert core.read_namespaced_pod_log("fetch", namespace).split() == ["served-by-web", "served-by-web"]


def test_nine_gpus_on_an_eight_gpu_real_node_stay_pending(core, namespace, real_nodes) -> None:
    node = node_named(real_nodes, "rlplace.io/real-gpu-type", "a800")
    body = pod("greedy", "", "true", nodeSelector={"kubernetes.io/hostname": node})
    del body["spec"]["nodeName"]  # the scheduler must refuse it, not the kubelet
    body["spec"]["containers"][0]["resources"] = {"limits": {GPU: "9"}}
    core.create_namespaced_pod(namespace, body)

    def refused() -> str:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=greedy").items
        return next((e.message for e in events if e.reason == "FailedScheduling"), "")

    message = wait_for(refused, 30, "FailedScheduling of the 9-GPU pod")
    assert f"Insufficient {GPU}" in message
    assert phase(core, namespace, "greedy") == "Pending"
    assert core.read_namespaced_pod("greedy", namespace).spec.node_name is None


# ----------------------------------------------------------------------------------------------------------
# KubeRay on the real nodes, with the Ray image: head on the robot/CPU node, one worker group of a pod per GPU
# node shaped like the operator's (num-gpus, and the node rank's Ray label and resources added by the pod's own
# start command from the node it runs on).


def ray_worker_group(nodes: list[str], gpus: int) -> dict:
    """One worker group for every GPU node, as the operator builds one per NodeGroup: each pod finds its node
    rank in the `real-ranks` ConfigMap by the node it runs on, before Ray starts (contract.worker_start_command)."""
    return {
        "groupName": "gpu",
        "replicas": len(nodes),
        "minReplicas": len(nodes),
        "maxReplicas": len(nodes),
        "rayStartParams": {"num-gpus": str(gpus)},
        "template": {
            "metadata": {"annotations": {"ray.io/overwrite-container-cmd": "true"}, "labels": {"app": "real"}},
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
                                    ]
                                }
                            ]
                        }
                    },
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "real"}}, "topologyKey": "kubernetes.io/hostname"}
                        ]
                    },
                },
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": IMAGES["RAY_IMAGE"],
                        "imagePullPolicy": "Never",
                        "command": ["/bin/bash", "-c", "--"],
                        "args": [contract.worker_start_command(gpus)],
                        "env": [
                            {"name": "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "value": "1"},
                            {"name": contract.KUBE_NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        ],
                        "resources": {"limits": {"cpu": "500m", "memory": "1536Mi", GPU: str(gpus)}},
                        "volumeMounts": [{"name": "ranks", "mountPath": contract.NODE_RANKS_MOUNT_DIR}],
                    }
                ],
                "volumes": [{"name": "ranks", "configMap": {"name": "real-ranks"}}],
            },
        },
    }


@pytest.fixture
def raycluster(k8s, namespace, real_nodes) -> Iterator[tuple[str, dict[int, str]]]:
    from kubernetes import client

    gpu_nodes = {
        0: node_named(real_nodes, "rlplace.io/real-gpu-type", "a800"),
        1: node_named(real_nodes, "rlplace.io/real-gpu-type", "4090"),
    }
    head_node = node_named(real_nodes, "rlplace.io/real-robot", "franka")
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "real"},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
                "template": {
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": head_node},
                        "containers": [
                            {
                                "name": "ray-head",
                                "image": IMAGES["RAY_IMAGE"],
                                "imagePullPolicy": "Never",
                                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
                                "resources": {"limits": {"cpu": "500m", "memory": "2Gi"}},
                            }
                        ],
                    }
                },
            },
            "workerGroupSpecs": [ray_worker_group(list(gpu_nodes.values()), 8)],
        },
    }
    ranks = {node: rank for rank, node in gpu_nodes.items()}
    configmap = {"metadata": {"name": "real-ranks"}, "data": {contract.NODE_RANKS_KEY: contract.node_ranks_text(ranks)}}
    client.CoreV1Api(k8s).create_namespaced_config_map(namespace, configmap)
    client.CustomObjectsApi(k8s).create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", body)
    yield namespace, gpu_nodes


def test_raycluster_on_real_nodes_connects_every_worker_with_its_resources_and_labels(
    k8s, core, raycluster, kubeconfig
) -> None:
    from kubernetes import client

    namespace, gpu_nodes = raycluster
    ray = client.CustomObjectsApi(k8s)

    def ready() -> dict | None:
        rc = ray.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", "real")
        return rc if (rc.get("status") or {}).get("state") == "ready" else None

    wait_for(ready, 240, "RayCluster 'real' on the real nodes to become ready", interval=1)
    pods = core.list_namespaced_pod(namespace, label_selector="ray.io/cluster=real").items
    [head] = [p.metadata.name for p in pods if p.metadata.labels["ray.io/node-type"] == "head"]
    by_node = {p.spec.node_name: p for p in pods if p.metadata.labels["ray.io/node-type"] == "worker"}
    assert set(by_node) == set(gpu_nodes.values())

    # Workers register with the head's GCS shortly after their pods are ready.
    seen: list[str] = []

    def every_worker_in_ray_status() -> str:
        out = kubectl(kubeconfig, "-n", namespace, "exec", head, "-c", "ray-head", "--", "ray", "status", timeout=60)
        seen.append(out)
        # "Active:"/"Idle:" list " <count> <group>" per connected Ray node (KubeRay's group names).
        node_section = out.split("Resources")[0]
        groups = re.findall(r"^ (\d+) (\S+)$", node_section, re.MULTILINE)
        totals: dict[str, int] = {}
        for count, group in groups:
            totals[group] = totals.get(group, 0) + int(count)
        return out if totals == {"gpu": 2, "headgroup": 1} else ""

    try:
        status = wait_for(every_worker_in_ray_status, 120, "3 Ray nodes in `ray status`", interval=2)
    except TimeoutError as timeout:
        raise AssertionError(f"{timeout}; last `ray status`:\n{seen[-1] if seen else ''}") from None
    assert "/16.0 GPU" in status, status
    for rank in gpu_nodes:
        assert f"{contract.node_resource(rank)}" in status, status

    script = (
        "import json, ray; ray.init(address='auto', logging_level='ERROR'); "
        "print(json.dumps([{'ip': n['NodeManagerAddress'], 'resources': n['Resources'], 'labels': n.get('Labels', {})}"
        " for n in ray.nodes() if n['Alive']]))"
    )
    out = kubectl(
        kubeconfig, "-n", namespace, "exec", head, "-c", "ray-head", "--", "python3", "-c", script, timeout=90
    )
    nodes = json.loads(out.strip().splitlines()[-1])
    by_ip = {n["ip"]: n for n in nodes}
    for rank, node in gpu_nodes.items():
        ray_node = by_ip[by_node[node].status.pod_ip]
        assert ray_node["resources"]["GPU"] == 8.0
        for name, amount in contract.node_resources(rank, 8).items():
            assert ray_node["resources"][name] == amount, (name, ray_node["resources"])
        assert ray_node["labels"].items() >= contract.node_labels(rank).items(), ray_node["labels"]


def test_image_names_have_one_home() -> None:
    """Scripts read the names from e2e/images.env; none writes one of them out again."""
    scripts = [*(REPO / "e2e" / "cluster").glob("*.sh"), *(REPO / "e2e" / "images").glob("*.sh")]
    for name in IMAGES.values():
        repeats = [str(p.relative_to(REPO)) for p in scripts if name in Path(p).read_text()]
        assert not repeats, f"{name} is written out in {repeats}; source e2e/images.env instead"


# ----------------------------------------------------------------------------------------------------------
# Teardown: a cluster-up that fails halfway through its real nodes leaves nothing on the host.


def leftovers(env: dict[str, str]) -> str:
    """What e2e/cluster/nodes.sh finds of that state dir's cluster on the host (netns, links, chains, cgroups, mounts)."""
    script = 'source "$0"; real_node_leftovers'
    res = subprocess.run(
        ["bash", "-c", script, str(CLUSTER_SCRIPTS / "lib.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    )
    return res.stdout


def test_kubelet_crash_at_start_is_named_and_leaves_nothing_behind(real_nodes, tmp_path) -> None:
    """A kubelet that exits at once: up.sh names it with its log, and everything of that cluster is gone after."""
    tools = subprocess.run(
        [
            "bash",
            "-c",
            'source "$0"; for t in "${E2E_TOOLS[@]}"; do tool_dir $t; done; echo "$E2E_CACHE/images"',
            str(CLUSTER_SCRIPTS / "lib.sh"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    cache = tmp_path / "cache"
    for real in {Path(d) for d in tools}:  # link the cached tools and image archives into a private cache
        (cache / real.name).mkdir(parents=True, exist_ok=True)
        for f in (f for f in real.iterdir() if f.name not in ("storage", "run")):  # buildah's, not needed
            # KubeRay's CRDs: kubectl does not read a symlinked directory. The images' containerd seed is
            # linked whole: its databases must be copied per node, never linked.
            if f.is_dir() and not f.name.startswith("containerd-seed-"):
                (cache / real.name / f.name).mkdir()
                for g in f.iterdir():
                    (cache / real.name / f.name / g.name).symlink_to(g)
            else:
                (cache / real.name / f.name).symlink_to(f)
    [kubelet_dir] = cache.glob("kubelet-*")
    (kubelet_dir / "kubelet").unlink()
    (kubelet_dir / "kubelet").write_text("#!/bin/sh\necho 'simulated kubelet crash: bad config' >&2\nexit 3\n")
    (kubelet_dir / "kubelet").chmod(0o755)
    env = {"RLPLACE_E2E_DIR": str(tmp_path / "state"), "RLPLACE_CACHE_DIR": str(cache)}

    res = run_script("up", env=env, timeout=300)
    assert res.returncode == 1, res.stdout
    assert "component kubelet@real-a800-0 failed to start" in res.stdout, res.stdout
    assert "simulated kubelet crash: bad config" in res.stdout
    assert leftovers(env) == ""
    assert run_script("status", env=env, timeout=60).returncode == 1
    for _ in range(3):  # down again and again: nothing to do, nothing left
        down = run_script("down", env=env, timeout=120)
        assert down.returncode == 0, down.stdout
        assert "WARNING" not in down.stdout, down.stdout
        assert leftovers(env) == ""
    assert not (tmp_path / "state" / "cluster").exists()
