"""Jobs bring their data (spec.pods, docs/data.md), on the real nodes: the data example reads a PVC, a Secret
and a 1 GiB /dev/shm from inside its pods; a tainted node takes only jobs that tolerate it; fields rlplace owns
are refused by the apiserver (the CRD's CEL rules, which the apiserver accepted within its cost budget)."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e_cluster import wait_for
from rlplace_fixtures import Jobs, kubectl, load_example, run_tool

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
TAINTED_NODE = "real-4090-0"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def tainted_node(k8s: client.ApiClient, real_nodes: list[str]) -> Iterator[str]:
    """TAINTED_NODE with the GPU pools' usual taint, through the API; removed afterwards."""
    if TAINTED_NODE not in real_nodes:
        pytest.skip(f"no real node {TAINTED_NODE}")
    core = client.CoreV1Api(k8s)
    before = core.read_node(TAINTED_NODE).spec.taints or []
    kept = [t.to_dict() for t in before if t.key != GPU_TAINT["key"]]
    core.patch_node(TAINTED_NODE, {"spec": {"taints": [*kept, GPU_TAINT]}})
    try:
        yield TAINTED_NODE
    finally:
        core.patch_node(TAINTED_NODE, {"spec": {"taints": kept or None}})


def test_a_tainted_node_runs_the_job_that_tolerates_it_and_queues_the_one_that_does_not(
    jobs: Jobs, tainted_node: str, restart_operator
) -> None:
    (tolerating,) = load_example("rljob-tolerations.yaml")
    intolerant = yaml.safe_load(yaml.safe_dump(tolerating))
    intolerant["metadata"]["name"] = "intolerant"
    del intolerant["spec"]["pods"]
    jobs.create(intolerant)
    status = jobs.wait_phase("intolerant", "Queued", timeout=60)["status"]
    assert status["waitingFor"] == (
        f"1 free node of real-4090 (node {tainted_node} has taint nvidia.com/gpu=present:NoSchedule, not tolerated)"
    )
    jobs.create(tolerating)
    jobs.wait_phase("tolerations", "Running", timeout=300)
    pods = jobs.core.list_namespaced_pod(jobs.namespace, label_selector="rlplace.io/job=tolerations").items
    assert {p.spec.node_name for p in pods} == {tainted_node}
    workers = [p for p in pods if p.metadata.labels.get("ray.io/node-type") == "worker"]
    assert len(workers) == 1 and workers[0].metadata.labels["example.com/pool"] == "rtx-4090"
    assert jobs.get("intolerant")["status"]["phase"] == "Queued"
    # An operator restart keeps both: the running job's cluster (and its settings) and the waiting job's reason.
    cluster = jobs.raycluster("tolerations")
    restart_operator()
    time.sleep(10)
    after = jobs.raycluster("tolerations")
    assert after["metadata"]["uid"] == cluster["metadata"]["uid"]
    assert after["spec"]["workerGroupSpecs"][0]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert jobs.get("tolerations")["status"]["phase"] == "Running"
    assert jobs.get("intolerant")["status"]["waitingFor"] == status["waitingFor"]


@pytest.mark.parametrize(
    ("pods", "field", "message"),
    [
        (
            {"workers": {"affinity": {"nodeAffinity": {}}}},
            "spec.pods.workers.affinity",
            "affinity is owned by rlplace: each pod is pinned to its planned nodes",
        ),
        (
            {"workers": {"resources": {"limits": {"nvidia.com/gpu": "8"}}}},
            "spec.pods.workers.resources",
            "resources is owned by rlplace: GPU and robot requests come from the plan",
        ),
        (
            {"head": {"volumeMounts": [{"name": "x", "mountPath": "/etc/rlplace"}]}},
            "spec.pods.head.volumeMounts[0].mountPath",
            "mountPath /etc/rlplace is the plan's mount",
        ),
        (
            {"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]},
            "spec.pods.env[0].name",
            "name is a variable rlplace sets from the plan",
        ),
        (
            {"workerNodeGroups": [{"nodeGroup": "real-a800", "shmSize": "1Gi"}]},
            "spec",
            "pods.workerNodeGroups[].nodeGroup must be one of spec.nodeGroups",
        ),
        (
            {"securityContext": {"runAsUser": 0}},
            "spec.pods.securityContext",
            "securityContext is owned by rlplace",
        ),
    ],
)
def test_owned_pod_fields_are_refused_by_the_apiserver_naming_the_field(
    k8s: client.ApiClient, kubeconfig: str, namespace: str, rlplace_crds: None, pods: dict, field: str, message: str
) -> None:
    (body,) = load_example("rljob-tolerations.yaml")
    body["spec"]["pods"] = pods
    result = run_tool(
        "kubectl", kubeconfig, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(body), check=False
    )
    assert result.returncode != 0
    assert field in result.stderr and message in result.stderr, result.stderr
    # Through the API too (no client-side field validation): refused, never silently dropped.
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(k8s).create_namespaced_custom_object(
            "rlplace.io", "v1alpha1", namespace, "rljobs", body
        )
    assert refused.value.status == 422 and message in refused.value.body


@pytest.fixture
def data_objects(k8s: client.ApiClient, jobs: Jobs) -> Iterator[str]:
    """examples/rljob-data-volume.yaml in the test's namespace (its PersistentVolume renamed for it) with the
    model written; the PersistentVolume and its host directory are removed afterwards."""
    core, batch = client.CoreV1Api(k8s), client.BatchV1Api(k8s)
    namespace = jobs.namespace
    volume, claim, secret, loader = load_example("rljob-data-volume.yaml")
    pv_name = f"rlplace-example-model-{namespace}"
    host_dir = Path(f"/var/tmp/rlplace-example-model-{namespace}")
    volume["metadata"]["name"] = pv_name
    volume["spec"]["hostPath"]["path"] = str(host_dir)
    volume["spec"]["claimRef"] = {"namespace": namespace, "name": claim["metadata"]["name"]}
    claim["spec"]["volumeName"] = pv_name
    core.create_persistent_volume(volume)
    try:
        core.create_namespaced_persistent_volume_claim(namespace, claim)
        core.create_namespaced_secret(namespace, secret)
        batch.create_namespaced_job(namespace, loader)

        def loaded() -> bool:
            status = batch.read_namespaced_job_status("model-loader", namespace).status
            assert not status.failed or status.failed < 3, "the model-loader Job failed"
            return bool(status.succeeded)

        wait_for(loaded, 180, "the model-loader Job to write the model onto the claim")
        yield namespace
    finally:
        with contextlib.suppress(ApiException):
            batch.delete_namespaced_job("model-loader", namespace, propagation_policy="Background")
        with contextlib.suppress(ApiException):
            core.delete_namespaced_persistent_volume_claim("model-store", namespace)
        with contextlib.suppress(ApiException):
            core.delete_persistent_volume(pv_name)
        shutil.rmtree(host_dir, ignore_errors=True)


def test_data_example_reads_the_claim_the_secret_and_shm_from_inside_every_pod(
    jobs: Jobs, real_nodes: list[str], data_objects: str, kubeconfig: str
) -> None:
    (body,) = load_example("rljob-data-run.yaml")
    job = body["metadata"]["name"]
    jobs.create(body)
    status = jobs.wait_phase(job, "Succeeded", timeout=420)["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["BindingVerified"] == "True"
    log = kubectl(kubeconfig, "logs", "-n", jobs.namespace, f"job/{job}")
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in log.splitlines() if line.startswith("data ")}
    # The driver on the head, and each worker process in its own pod on its planned node.
    assert sorted(lines) == ["data actor[0]", "data actor[1]", "data driver", "data reward[0]", "data reward[1]"], log
    plan = jobs.plan(job)
    for component in ("actor", "reward"):
        for process in plan["components"][component]["processes"]:
            assert lines[f"data {component}[{process['rank']}]"].startswith(f"node={process['node_name']} ")
    for where, seen in lines.items():
        assert "/models/model.txt='tiny-policy-v1 (4 layers, written by model-loader)'" in seen, (where, seen)
        assert "MODEL_TOKEN='example-token-7f3a'" in seen, (where, seen)
        assert seen.endswith("/dev/shm=1024MiB"), (where, seen)
    # What KubeRay was given: the settings beside rlplace's own pinning and requests.
    rayjob = jobs.custom.get_namespaced_custom_object("ray.io", "v1", jobs.namespace, "rayjobs", job)
    worker = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    assert worker["metadata"]["labels"]["example.com/team"] == "rl"
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "model-store", "readOnly": True}} in worker["spec"][
        "volumes"
    ]
    assert "affinity" in worker["spec"] and "nvidia.com/gpu" in worker["spec"]["containers"][0]["resources"]["limits"]
