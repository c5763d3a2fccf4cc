"""spec.pods -> the pods KubeRay makes: volumes, variables, credentials, tolerations and shared memory reach the
head, worker and submitter templates exactly, per level, beside what rlplace owns (no cluster)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from placement_core import contract
from placement_core.placement import Placement, placement_env
from rlplace_operator.admission.rules import Admitted, GroupDemand, Pool, QueuedJob, Waiting, decide
from rlplace_operator.api.crdgen import build_crds
from rlplace_operator.api.names import JOB_LABEL, SUBMITTER_CONTAINER
from rlplace_operator.api.nodegroup import NodeGroupSpec
from rlplace_operator.api.podspec import PLAN_ENV_NAMES, PodOptions
from rlplace_operator.api.podspec import merged as merge
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.podtemplate import SHM_VOLUME
from rlplace_operator.builders.raycluster import NODE_RANKS_VOLUME, PLAN_VOLUME, build_raycluster, pod_security_context
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.cluster.selection import JobGroup, NodeInfo, nodegroup_status, untolerated_nodes
from rlplace_operator.cluster.taints import Taint
from rlplace_operator.planning.plan import WorkerNode, plan_job

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
PODS = {
    "labels": {"team": "rl"},
    "annotations": {"example.com/cost-center": "42"},
    "serviceAccountName": "trainer",
    "imagePullSecrets": [{"name": "registry"}],
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "priorityClassName": "rl-high",
    "volumes": [{"name": "model", "persistentVolumeClaim": {"claimName": "model-store", "readOnly": True}}],
    "volumeMounts": [{"name": "model", "mountPath": "/models", "readOnly": True}],
    "env": [{"name": "HF_HOME", "value": "/models/hf"}],
    "envFrom": [{"secretRef": {"name": "s3-credentials"}}],
    "shmSize": "1Gi",
    "head": {"labels": {"role": "head"}, "env": [{"name": "HF_HOME", "value": "/models/head"}]},
    "workers": {"volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}}]},
    "submitter": {"serviceAccountName": "submitter", "shmSize": "64Mi"},
    "workerNodeGroups": [
        {"nodeGroup": "robot", "tolerations": [{"key": "robot", "value": "franka", "effect": "NoExecute"}]}
    ],
}
SPEC = RLJobSpec.model_validate(
    {
        "nodeGroups": ["a800", "robot"],
        "componentPlacement": [{"components": "actor", "placement": "all"}],
        "entrypoint": "python train.py",
        "ray": {"serviceAccountName": "legacy"},
        "pods": PODS,
    }
)
NODES = [
    WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8}, groups=("a800",), taints=(GPU_TAINT,)),
    WorkerNode(1, "franka-0", 0, {"rlplace.io/franka": 2}, groups=("robot",)),
]


def _pod(template: dict, container: str) -> tuple[dict, dict, dict]:
    spec = template["spec"]
    return template.get("metadata", {}), spec, next(c for c in spec["containers"] if c["name"] == container)


def test_head_gets_the_job_wide_settings_and_its_own_beside_the_plan_mount() -> None:
    head = build_raycluster("job", SPEC, NODES)["spec"]["headGroupSpec"]["template"]
    metadata, spec, container = _pod(head, "ray-head")
    assert metadata["labels"] == {
        "team": "rl",
        "role": "head",
        "app.kubernetes.io/managed-by": "rlplace",
        JOB_LABEL: "job",
    }
    assert metadata["annotations"] == {"example.com/cost-center": "42"}
    assert spec["serviceAccountName"] == "trainer" and spec["priorityClassName"] == "rl-high"
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["volumes"] == [
        {"name": PLAN_VOLUME, "configMap": {"name": "job-placement"}},
        {"name": "model", "persistentVolumeClaim": {"claimName": "model-store", "readOnly": True}},
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    ]
    assert container["volumeMounts"] == [
        {"name": PLAN_VOLUME, "mountPath": contract.PLAN_MOUNT_DIR, "readOnly": True},
        {"name": "model", "mountPath": "/models", "readOnly": True},
        {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
    ]
    assert container["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
    env = [e["name"] for e in container["env"]]
    assert env[0] == "HF_HOME" and container["env"][0]["value"] == "/models/head"  # the narrower level wins
    assert env.count("HF_HOME") == 1 and env[-2:] == [contract.PLAN_DIR_ENV, contract.ATTEMPT_ENV]  # rlplace's last
    assert "scratch" not in str(spec["volumes"])  # a workers' volume
    assert "tolerations" in spec and "affinity" in spec
    assert spec["securityContext"] == pod_security_context()  # rlplace's restricted posture, never the user's


def test_each_worker_gets_the_workers_settings_and_its_node_groups() -> None:
    groups = build_raycluster("job", SPEC, NODES)["spec"]["workerGroupSpecs"]
    (gpu_meta, gpu, gpu_container), (robot_meta, robot, robot_container) = (
        _pod(g["template"], "ray-worker") for g in groups
    )
    assert gpu_meta["labels"] == {"team": "rl", JOB_LABEL: "job"}
    for spec, container in ((gpu, gpu_container), (robot, robot_container)):
        assert [v["name"] for v in spec["volumes"]] == [NODE_RANKS_VOLUME, "model", "scratch", SHM_VOLUME]
        assert [m["mountPath"] for m in container["volumeMounts"]] == [
            contract.NODE_RANKS_MOUNT_DIR,
            "/models",
            "/dev/shm",
        ]
        assert spec["serviceAccountName"] == "trainer"  # spec.pods wins over the deprecated spec.ray one
        assert container["resources"]["limits"]["cpu"] == "4"  # rlplace's requests untouched
    assert gpu_container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert [t["key"] for t in gpu["tolerations"]] == ["nvidia.com/gpu"]
    assert [t["key"] for t in robot["tolerations"]] == ["nvidia.com/gpu", "robot"]
    assert robot["tolerations"][1] == {"key": "robot", "value": "franka", "effect": "NoExecute"}
    assert robot_meta["labels"][JOB_LABEL] == "job"
    names = [e["name"] for e in gpu_container["env"]]
    assert names[0] == "HF_HOME" and contract.KUBE_NODE_ENV in names


def test_submitter_gets_its_own_settings_and_no_head_settings() -> None:
    template = build_rayjob("job", SPEC, NODES)["spec"]["submitterPodTemplate"]
    metadata, spec, container = _pod(template, SUBMITTER_CONTAINER)
    assert metadata["labels"] == {"team": "rl"} and spec["serviceAccountName"] == "submitter"
    assert spec["restartPolicy"] == "Never" and container["resources"]["limits"] == {"cpu": "200m", "memory": "512Mi"}
    assert spec["volumes"][-1] == {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}
    assert container["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]


def test_without_settings_the_pods_are_as_before() -> None:
    spec = RLJobSpec.model_validate(
        {"nodeGroups": ["a800"], "componentPlacement": [{"components": "actor", "placement": "all"}]}
    )
    rc = build_raycluster("job", spec, NODES[:1])
    worker = rc["spec"]["workerGroupSpecs"][0]["template"]
    assert worker == {
        "metadata": {"labels": {JOB_LABEL: "job"}, "annotations": {"ray.io/overwrite-container-cmd": "true"}},
        "spec": {
            "affinity": worker["spec"]["affinity"],
            "securityContext": pod_security_context(),
            "containers": worker["spec"]["containers"],
            "volumes": [worker["spec"]["volumes"][0]],  # rlplace's own: the node ranks
        },
    }
    assert [m["name"] for m in worker["spec"]["containers"][0]["volumeMounts"]] == [NODE_RANKS_VOLUME]


def test_the_head_goes_to_a_node_it_tolerates() -> None:
    no_tolerations = {k: v for k, v in PODS.items() if k != "tolerations"}
    spec = SPEC.model_copy(update={"pods": SPEC.pods.model_validate(no_tolerations)})
    head = build_raycluster("job", spec, NODES)["spec"]["headGroupSpec"]["template"]["spec"]
    terms = head["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchFields"][0]["values"] for t in terms] == [["franka-0"]]  # not the tainted a800-0
    head = build_raycluster("job", SPEC, NODES)["spec"]["headGroupSpec"]["template"]["spec"]
    terms = head["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2


def test_merge_replaces_by_key_and_keeps_order() -> None:
    wide = PodOptions.model_validate(
        {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}], "shmSize": "1Gi"}
    )
    narrow = PodOptions.model_validate({"volumes": [{"name": "a", "secret": {"secretName": "s"}}]})
    merged = merge([wide, narrow])
    assert [(v.name, v.secret is not None) for v in merged.volumes] == [("a", True), ("b", False)]
    assert merged.shm_size == "1Gi"
    assert [t.key for t in SPEC.pods.for_workers(["a800", "robot"]).tolerations] == ["nvidia.com/gpu", "robot"]


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        ({"workers": {"affinity": {"nodeAffinity": {}}}}, "affinity is owned by rlplace"),
        ({"nodeSelector": {"gpu": "a800"}}, "nodeSelector is owned by rlplace"),
        ({"head": {"nodeName": "x"}}, "nodeName is owned by rlplace"),
        ({"workers": {"resources": {"limits": {"nvidia.com/gpu": "1"}}}}, "resources is owned by rlplace"),
        ({"securityContext": {"runAsUser": 0}}, "securityContext is owned by rlplace"),
        ({"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}, "rlplace sets from the plan"),
        ({"env": [{"name": "RLPLACE_PLAN_DIR", "value": "/x"}]}, "rlplace sets from the plan"),
        ({"volumeMounts": [{"name": "v", "mountPath": "/etc/rlplace"}]}, "the plan's mount"),
        ({"volumeMounts": [{"name": "v", "mountPath": "/dev/shm"}]}, "set shmSize"),
        ({"labels": {"rlplace.io/job": "other"}}, "owned by rlplace and KubeRay"),
    ],
)
def test_owned_fields_are_refused_by_name(pods: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RLJobSpec.model_validate({"nodeGroups": ["a800"], "autoPlacement": {"enabled": True}, "pods": pods})


def test_the_refused_variables_are_those_the_plan_sets() -> None:
    placement = Placement(0, 0, 0, 0, "NV_GPU", 0, 1, ("0",), True, (0,), "a800")
    assert set(placement_env(placement, 1, "host")) <= set(PLAN_ENV_NAMES)


A800 = NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {"gpu": "a800"}}})
TAINTED = {
    "a0": NodeInfo("a0", {"gpu": "a800"}, {"nvidia.com/gpu": "8"}, True, (GPU_TAINT,)),
    "a1": NodeInfo("a1", {"gpu": "a800"}, {"nvidia.com/gpu": "8"}, True, (Taint("maintenance", "", "NoExecute"),)),
}
GROUPS = [JobGroup("a800", A800, nodegroup_status(A800, list(TAINTED.values()), 1))]


def _job(pods: dict) -> RLJobSpec:
    return RLJobSpec.model_validate(
        {"nodeGroups": ["a800"], "componentPlacement": [{"components": "actor", "placement": "0-7"}], "pods": pods}
    )


def test_untolerated_nodes_name_the_taint() -> None:
    assert untolerated_nodes(_job({}), GROUPS, TAINTED) == {
        "a0": "node a0 has taint nvidia.com/gpu=present:NoSchedule, not tolerated",
        "a1": "node a1 has taint maintenance:NoExecute, not tolerated",
    }
    gpu_only = _job({"workers": {"tolerations": [{"key": "nvidia.com/gpu", "value": "present"}]}})
    assert list(untolerated_nodes(gpu_only, GROUPS, TAINTED)) == ["a1"]
    per_group = _job({"workerNodeGroups": [{"nodeGroup": "a800", "tolerations": [{"operator": "Exists"}]}]})
    assert untolerated_nodes(per_group, GROUPS, TAINTED) == {}
    # The head's tolerations do not let a worker onto a node.
    head_only = _job({"head": {"tolerations": [{"operator": "Exists"}]}})
    assert len(untolerated_nodes(head_only, GROUPS, TAINTED)) == 2


def test_settings_survive_a_replan_on_other_nodes() -> None:
    """The builders are the one path from spec to pods: a re-plan (other nodes, here after a taint moved the job)
    builds the same settings into the new pods."""
    spec = _job({"workers": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, **PODS_ONLY_DATA})
    first = plan_job(spec, {}, GROUPS, TAINTED)
    moved = spec.model_copy(
        update={"component_placement": [spec.component_placement[0].model_copy(update={"placement": "8-15"})]}
    )
    second = plan_job(moved, {}, GROUPS, TAINTED)
    assert [w.name for w in first.workers] == ["a0"] and [w.name for w in second.workers] == ["a1"]
    assert second.workers[0].taints == TAINTED["a1"].taints and second.workers[0].groups == ("a800",)
    for planned in (first, second):
        worker = build_raycluster("job", spec, planned.workers)["spec"]["workerGroupSpecs"][0]["template"]["spec"]
        assert worker["volumes"][-1]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
        assert worker["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]


PODS_ONLY_DATA = {"shmSize": "1Gi", "envFrom": [{"secretRef": {"name": "s3-credentials"}}]}


def test_admission_skips_untolerated_nodes_and_says_why() -> None:
    pool = Pool({"a800": ["a0", "a1"]})
    demand = (GroupDemand("a800", 1, frozenset({0})),)
    excluded = {"a0": "node a0 has taint nvidia.com/gpu=present:NoSchedule, not tolerated"}
    # a0 is first in rank order, but the job's workers do not tolerate it: the job gets a1.
    admitted = decide([QueuedJob(("ns", "job"), 0, "t", demand, excluded)], pool)[("ns", "job")]
    assert isinstance(admitted, Admitted) and admitted.nodes == frozenset({"a1"})
    both = {**excluded, "a1": "node a1 has taint maintenance:NoExecute, not tolerated"}
    tolerating = QueuedJob(("ns", "tolerating"), 0, "t2", demand)
    decisions = decide([QueuedJob(("ns", "job"), 0, "t", demand, both), tolerating], pool)
    waiting = decisions[("ns", "job")]
    assert isinstance(waiting, Waiting)
    assert waiting.reason == (
        "1 free node of a800 (node a0 has taint nvidia.com/gpu=present:NoSchedule, not tolerated; "
        "node a1 has taint maintenance:NoExecute, not tolerated)"
    )
    # The waiting head claims no node it cannot use: the job that tolerates the taints starts behind it.
    assert isinstance(decisions[("ns", "tolerating")], Admitted)


def test_pod_settings_schema_is_bounded_for_cel_cost() -> None:
    """The apiserver estimates each CEL rule's cost from the bounds of what it reads: every list, map and
    string under spec.pods has one (the real apiserver accepts the CRD: tests/e2e/test_data.py)."""
    crd = build_crds()["rlplace.io_rljobs.yaml"]
    pods = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["pods"]

    def walk(schema: dict, path: str) -> None:
        kind = schema.get("type")
        if kind == "array":
            assert "maxItems" in schema, path
            walk(schema["items"], f"{path}[]")
        elif kind == "string":
            assert "maxLength" in schema or "enum" in schema, path
        elif kind == "object" and not schema.get("x-kubernetes-preserve-unknown-fields"):
            if "additionalProperties" in schema:
                assert "maxProperties" in schema, path
                walk(schema["additionalProperties"], f"{path}{{}}")
            for name, prop in schema.get("properties", {}).items():
                walk(prop, f"{path}.{name}")

    walk(pods, "spec.pods")
    rules = json.dumps(pods).count('"rule"')
    assert rules > 20  # the owned fields, names, mount paths, variables, labels, tolerations, sources


def test_mounts_must_name_a_volume_of_their_pod_and_groups_must_be_the_jobs() -> None:
    base = {"nodeGroups": ["a800"], "autoPlacement": {"enabled": True}}
    # A job-wide mount of a head-only volume: the workers and the submitter would have no such volume.
    bad = {"volumeMounts": [{"name": "model", "mountPath": "/models"}], "head": {"volumes": PODS["volumes"]}}
    with pytest.raises(
        ValidationError, match=r"volumeMount 'model' of the submitter names no volume \(volumes: none\)"
    ):
        RLJobSpec.model_validate({**base, "pods": bad})
    # A group's mount of a job-wide volume is fine.
    good = {
        "volumes": PODS["volumes"],
        "workerNodeGroups": [{"nodeGroup": "a800", "volumeMounts": PODS["volumeMounts"]}],
    }
    RLJobSpec.model_validate({**base, "pods": good})
    with pytest.raises(ValidationError, match=r"pods.workerNodeGroups\[\].nodeGroup must be one of spec.nodeGroups"):
        RLJobSpec.model_validate({**base, "pods": {"workerNodeGroups": [{"nodeGroup": "a80"}]}})
