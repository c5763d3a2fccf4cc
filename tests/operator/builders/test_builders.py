"""The pure mapping: plan -> ConfigMap and RayCluster manifests (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from placement_core import contract
from placement_core.components import component_placement
from placement_core.plan import build_plan
from rlplace_operator.api.names import HOSTNAME_LABEL, JOB_LABEL, MANAGED_BY_LABEL
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.raycluster import build_raycluster, container_security_context, pod_security_context
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.planning.plan import WorkerNode

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


def _group_nodes() -> list[WorkerNode]:
    a800 = [
        WorkerNode(r, f"a800-{r}", 8, {"nvidia.com/gpu": 8}, groups=("a800",), hostname=f"a800-{r}") for r in (0, 1)
    ]
    franka = WorkerNode(3, "franka-0", 0, {"rlplace.io/franka": 2}, {"ROS_DOMAIN_ID": "7"}, ("robot",), hostname="")
    return [*a800, franka]


def test_nodes_of_one_shape_share_a_worker_group_pinned_to_them_one_pod_each() -> None:
    nodes = _group_nodes()
    rc = build_raycluster("job", SPEC, nodes)
    groups = rc["spec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"], g["minReplicas"], g["maxReplicas"]) for g in groups] == [
        ("a800", 2, 2, 2),
        ("robot", 1, 1, 1),
    ]
    a800, robot = (g["template"]["spec"] for g in groups)
    terms = a800["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": ["a800-0", "a800-1"]}]}]
    # A node without the hostname label is pinned by name (one value per metadata.name term, as the API allows).
    terms = robot["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["franka-0"]}]}]
    # Pods that request all of a node's units cannot share it; pods that request none are kept apart.
    assert "podAntiAffinity" not in a800["affinity"] and "podAntiAffinity" not in robot["affinity"]
    cpu = WorkerNode(4, "cpu-0", 0, {}, groups=("cpu",), hostname="cpu-0")
    (cpu_group,) = build_raycluster("job", SPEC, [cpu])["spec"]["workerGroupSpecs"]
    (apart,) = cpu_group["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert apart == {
        "labelSelector": {"matchLabels": {JOB_LABEL: "job", "ray.io/node-type": "worker"}},
        "topologyKey": HOSTNAME_LABEL,
    }
    for group, node in zip(groups, (nodes[0], nodes[2]), strict=True):
        container = group["template"]["spec"]["containers"][0]
        for resource, count in node.requests.items():
            assert container["resources"]["limits"][resource] == str(count)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1"
        assert contract.NODE_RANK_ENV not in env  # the pod finds it from its node (test_the_node_rank_...)
        kube_node = next(e for e in container["env"] if e["name"] == contract.KUBE_NODE_ENV)
        assert kube_node["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        # KubeRay runs rlplace's start command, which adds the rank's Ray label and resources to its own.
        assert group["template"]["metadata"]["annotations"] == {"ray.io/overwrite-container-cmd": "true"}
        assert container["args"] == [contract.worker_start_command(node.gpus)]
        assert group["rayStartParams"] == {"num-gpus": str(node.gpus)}
        assert "labels" not in group
        mount = {"name": "rlplace-node-ranks", "mountPath": contract.NODE_RANKS_MOUNT_DIR, "readOnly": True}
        assert mount in container["volumeMounts"]
    assert {e["name"]: e.get("value") for e in robot["containers"][0]["env"]}["ROS_DOMAIN_ID"] == "7"
    assert rc["metadata"]["labels"] == {MANAGED_BY_LABEL: "rlplace", JOB_LABEL: "job"}


def test_pods_of_a_group_carry_no_per_node_field() -> None:
    """Two sets of nodes of one NodeGroup give the same worker group but for the node names it may run on."""

    def group(first: int) -> dict:
        nodes = [WorkerNode(r, f"gpu-{r}", 8, {"nvidia.com/gpu": 8}, groups=("a800",), hostname=f"gpu-{r}", processes=r % 3)
                 for r in range(first, first + 32)]  # fmt: skip
        (built,) = build_raycluster("job", SPEC, nodes)["spec"]["workerGroupSpecs"]
        affinity = built["template"]["spec"]["affinity"]["nodeAffinity"]
        names = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
        assert names[0]["values"] == [f"gpu-{r}" for r in range(first, first + 32)]
        names[0]["values"] = []
        return built

    assert group(0) == group(100)


def _size(spec: RLJobSpec, count: int) -> int:
    """Bytes of the RayJob of a job on `count` nodes in three NodeGroups of different shapes."""
    shapes = [("a800", 8), ("4090", 8), ("robot", 0)]
    nodes = [
        WorkerNode(r, f"node-{r:05d}", shapes[r % 3][1], {"nvidia.com/gpu": shapes[r % 3][1]} if shapes[r % 3][1] else {},
                   groups=(shapes[r % 3][0],), hostname=f"node-{r:05d}", processes=8)
        for r in range(count)
    ]  # fmt: skip
    return len(json.dumps(build_rayjob("job", spec, nodes), separators=(",", ":")))


def test_the_rayjob_grows_with_node_groups_not_nodes() -> None:
    """Per node, only its name (twice: the group's node affinity and the nodes annotation the queue reads); the
    per-node worker groups this replaced cost 1.2 to 1.6 KiB a node."""
    rich = RLJobSpec.model_validate(
        yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "rljob-data-run.yaml").read_text())["spec"]
        | {"nodeGroups": ["a800", "4090", "robot"]}
    )
    for spec in (SPEC, rich):
        sizes = {count: _size(spec, count) for count in (1, 64, 1024)}
        print({count: f"{size / 1024:.1f} KiB" for count, size in sizes.items()})
        per_node = (sizes[1024] - sizes[64]) / (1024 - 64)
        assert per_node < 2 * (len("node-00000") + 4), per_node
        assert sizes[1024] < 64 * 1024, sizes


def _plan(num_nodes: int):
    return build_plan(component_placement({"cluster": {"num_nodes": num_nodes, "component_placement": {"x": "all"}}}))


def test_small_plan_is_readable_json_and_large_plan_is_gzipped() -> None:
    small = _plan(1)
    cm = build_placement_configmap("job", small)
    assert cm["metadata"]["name"] == "job-placement"
    assert set(cm) == {"apiVersion", "kind", "metadata", "data"} and list(cm["data"]) == ["plan.json", "node-ranks"]
    assert cm["data"]["node-ranks"] == "node-0 0\n"
    assert json.loads(cm["data"]["plan.json"]) == small.to_dict()
    assert contract.plan_from_configmap(cm) == small
    large = _plan(1000)
    cm = build_placement_configmap("job", large)
    assert list(cm["data"]) == ["node-ranks"] and list(cm["binaryData"]) == ["plan.json.gz"]
    assert contract.parse_node_ranks(cm["data"]["node-ranks"]) == {f"node-{r}": r for r in range(1000)}
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
    assert checked == 5  # head + the workers (one group: one shape), twice, + the submitter


def test_the_ray_images_run_as_a_numeric_non_root_user() -> None:
    """runAsNonRoot takes the image's user, which the kubelet can check only when it is numeric."""
    images = Path(__file__).resolve().parents[3] / "e2e" / "images"
    for name in ("ray.Containerfile", "ray-rlplace.Containerfile"):
        users = [line.split()[1] for line in (images / name).read_text().splitlines() if line.startswith("USER ")]
        assert users and users[-1] == "1000:100", (name, users)
    assert pod_security_context()["runAsNonRoot"] is True
    assert container_security_context()["allowPrivilegeEscalation"] is False
