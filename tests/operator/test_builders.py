"""The pure mapping: plan -> ConfigMap and RayCluster manifests (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

from placement_core import contract
from placement_core.components import component_placement
from placement_core.plan import build_plan
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.raycluster import (
    WorkerNode,
    build_raycluster,
    container_security_context,
    pod_security_context,
)
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.models import RLJobSpec
from rlplace_operator.names import JOB_LABEL, MANAGED_BY_LABEL

SPEC = RLJobSpec.model_validate(
    {
        "nodeGroups": ["a800"],
        "componentPlacement": [{"components": "actor", "placement": "all"}],
        "entrypoint": "python train.py",
    }
)


def test_head_requests_no_gpu_and_cannot_see_gpus() -> None:
    rc = build_raycluster("job", SPEC, [WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8})])
    head = rc["spec"]["headGroupSpec"]
    container = head["template"]["spec"]["containers"][0]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert not any("gpu" in key for key in container["resources"]["limits"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "RLPLACE_ENTRYPOINT" not in env  # the entrypoint is the RayJob's (builders/rayjob.py)
    assert env[contract.PLAN_DIR_ENV] == contract.PLAN_MOUNT_DIR == "/etc/rlplace"
    assert container["volumeMounts"][0]["mountPath"] == "/etc/rlplace"
    assert head["template"]["spec"]["volumes"][0]["configMap"]["name"] == "job-placement"


def test_one_worker_per_node_pinned_with_whole_unit_count() -> None:
    nodes = [
        WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8}),
        WorkerNode(3, "franka-0", 0, {"rlplace.io/franka": 2}, {"ROS_DOMAIN_ID": "7"}),
    ]
    rc = build_raycluster("job", SPEC, nodes)
    groups = rc["spec"]["workerGroupSpecs"]
    assert [g["groupName"] for g in groups] == ["node-0", "node-3"]
    for group, node in zip(groups, nodes, strict=True):
        assert group["replicas"] == 1
        pod = group["template"]["spec"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}]
        container = pod["containers"][0]
        for resource, count in node.requests.items():
            assert container["resources"]["limits"][resource] == str(count)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1"
        assert env["RLPLACE_NODE_RANK"] == str(node.rank)
        kube_node = next(e for e in container["env"] if e["name"] == contract.KUBE_NODE_ENV)
        assert kube_node["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        assert group["rayStartParams"]["num-gpus"] == str(node.gpus)
        assert group["labels"] == {contract.NODE_LABEL: str(node.rank)}
        resources = json.loads(group["rayStartParams"]["resources"].strip("'"))
        assert resources[contract.node_resource(node.rank)] == contract.NODE_RESOURCE_CAPACITY
        assert sorted(k for k in resources if k.startswith("rlplace_gpu")) == sorted(
            contract.gpu_resource(node.rank, g) for g in range(node.gpus)
        )
    assert {e["name"]: e.get("value") for e in groups[1]["template"]["spec"]["containers"][0]["env"]}[
        "ROS_DOMAIN_ID"
    ] == "7"
    assert rc["metadata"]["labels"] == {MANAGED_BY_LABEL: "rlplace", JOB_LABEL: "job"}


def test_raycluster_stays_well_under_etcds_limit_at_1000_nodes() -> None:
    """etcd stores at most 1.5 MiB per object. About 1.1 MiB at 1,000 nodes, of which ~170 bytes a node are the
    `restricted` securityContext every pod must carry (pod and container level)."""
    nodes = [WorkerNode(i, f"gpu-node-{i:04d}", 8, {"nvidia.com/gpu": 8}) for i in range(1000)]
    size = len(json.dumps(build_raycluster("job", SPEC, nodes), separators=(",", ":")))
    assert size < 1.2 * 1024 * 1024, size


def _plan(num_nodes: int):
    return build_plan(component_placement({"cluster": {"num_nodes": num_nodes, "component_placement": {"x": "all"}}}))


def test_small_plan_is_readable_json_and_large_plan_is_gzipped() -> None:
    small = _plan(1)
    cm = build_placement_configmap("job", small)
    assert cm["metadata"]["name"] == "job-placement"
    assert set(cm) == {"apiVersion", "kind", "metadata", "data"} and list(cm["data"]) == ["plan.json"]
    assert json.loads(cm["data"]["plan.json"]) == small.to_dict()
    assert contract.plan_from_configmap(cm) == small
    large = _plan(1000)
    cm = build_placement_configmap("job", large)
    assert "data" not in cm and list(cm["binaryData"]) == ["plan.json.gz"]
    assert len(large.to_json()) > contract.MAX_TEXT_PLAN_BYTES
    assert len(cm["binaryData"]["plan.json.gz"]) < 1024 * 1024
    assert contract.plan_from_configmap(cm) == large


def _pods_and_containers(manifest: dict) -> list[tuple[dict, list[dict]]]:
    """Every pod template in a RayCluster or RayJob, with its containers (init ones too)."""
    spec = manifest["spec"]
    cluster = spec.get("rayClusterSpec", spec)
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    if "submitterPodTemplate" in spec:
        templates.append(spec["submitterPodTemplate"])
    return [(t["spec"], [*t["spec"].get("initContainers", []), *t["spec"]["containers"]]) for t in templates]


def test_every_pod_satisfies_the_restricted_pod_security_standard() -> None:
    """The fields the `restricted` standard requires (kubernetes.io/docs/concepts/security/pod-security-standards),
    set on every pod of a RayCluster and of a K8sJobMode RayJob (head, workers, submitter)."""
    nodes = [WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8}), WorkerNode(1, "a800-1", 8, {"nvidia.com/gpu": 8})]
    manifests = [build_raycluster("job", SPEC, nodes), build_rayjob("job", SPEC, nodes)]
    checked = 0
    for manifest in manifests:
        for pod, containers in _pods_and_containers(manifest):
            context = pod["securityContext"]
            assert context["runAsNonRoot"] is True
            assert context.get("runAsUser", 1) != 0
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            for key in ("hostNetwork", "hostPID", "hostIPC"):
                assert not pod.get(key)
            assert all("hostPath" not in volume for volume in pod.get("volumes", []))
            for container in containers:
                own = container["securityContext"]
                assert own["allowPrivilegeEscalation"] is False
                assert own["capabilities"] == {"drop": ["ALL"]}
                assert not own.get("privileged") and own.get("runAsUser", 1) != 0
                assert "ports" not in container or all("hostPort" not in p for p in container["ports"])
                checked += 1
    assert checked == 7  # head + 2 workers, twice, + the submitter


def test_the_ray_images_run_as_a_numeric_non_root_user() -> None:
    """runAsNonRoot takes the image's user, which the kubelet can check only when it is numeric."""
    images = Path(__file__).resolve().parents[2] / "e2e" / "images"
    for name in ("ray.Containerfile", "ray-rlplace.Containerfile"):
        users = [line.split()[1] for line in (images / name).read_text().splitlines() if line.startswith("USER ")]
        assert users and users[-1] == "1000:100", (name, users)
    assert pod_security_context()["runAsNonRoot"] is True
    assert container_security_context()["allowPrivilegeEscalation"] is False
