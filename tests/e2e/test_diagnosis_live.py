"""diagnosis/ on real objects: pods refused, images that cannot be pulled, crashing containers, unschedulable
and deleted pods, and a worker pod deleted under a running driver, made on the local cluster (KubeRay, kwok and
real nodes) in a namespace that enforces the `restricted` Pod Security Standard. Each test reads the live pods,
events and nodes the way the operator does and checks the cause diagnosis names.

RLPLACE_DIAGNOSIS_SNAPSHOTS=<dir> also writes each case's objects (trimmed to what a diagnosis reads) with the
expected cause as <dir>/<case>.json: tests/operator/snapshots/ holds such captures, replayed by
tests/operator/diagnosis/test_diagnosis.py without a cluster.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from kubernetes import client

from placement_core.components import component_placement
from placement_core.plan import Plan, build_plan
from rlplace_operator.api.conditions import MAX_LINE_CHARS
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.diagnosis import causes as diagnosis
from rlplace_operator.diagnosis.causes import Cause
from rlplace_operator.diagnosis.losses import lost_process
from rlplace_operator.diagnosis.starting import provisioning_failure
from rlplace_operator.planning.plan import WorkerNode

from e2e_cluster import delete_namespace_freeing_nodes, wait_for
from rlplace_fixtures import images_env, kubectl

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
REAL_NODE_LABEL = "rlplace.io/real-node"
RESTRICTED = "pod-security.kubernetes.io/enforce=restricted"
#: What every pod in a restricted namespace must carry (builders/raycluster.py gives rlplace's pods the same).
POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


# -- reading and recording the objects -------------------------------------------------------------------------


def get_json(kubeconfig: str, *args: str) -> list[dict]:
    return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json"))["items"]


def _pick(source: Mapping, keys: tuple[str, ...]) -> dict:
    return {key: source[key] for key in keys if key in source}


def trim_pod(pod: dict) -> dict:
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            **_pick(meta, ("name", "generateName", "labels", "creationTimestamp", "deletionTimestamp")),
            **_pick(meta, ("deletionGracePeriodSeconds",)),
            "ownerReferences": [_pick(o, ("kind", "name")) for o in meta.get("ownerReferences") or []],
        },
        "spec": {
            **_pick(spec, ("nodeName", "affinity", "restartPolicy")),
            "containers": [_pick(c, ("name", "image", "resources")) for c in spec.get("containers") or []],
        },
        "status": _pick(
            status,
            ("phase", "reason", "message", "startTime", "conditions", "containerStatuses", "initContainerStatuses"),
        ),
    }


def trim_event(event: dict) -> dict:
    keys = ("reason", "message", "type", "count", "firstTimestamp", "lastTimestamp", "eventTime", "source")
    return {
        "involvedObject": _pick(event["involvedObject"], ("kind", "name", "namespace", "fieldPath")),
        **_pick(event, keys),
        **_pick(event, ("reportingComponent", "reportingInstance", "series")),
    }


def trim_node(node: dict) -> dict:
    return {
        "metadata": {"name": node["metadata"]["name"]},
        "spec": _pick(node.get("spec") or {}, ("taints",)),
        "status": {"conditions": (node.get("status") or {}).get("conditions") or []},
    }


def record(
    case: str,
    kind: str,
    captured_from: str,
    cause: Cause,
    parts: list[str],
    *,
    pods: list[dict],
    events: list[dict],
    now: dt.datetime | None = None,
    nodes: Mapping[str, dict] | None = None,
    plan: Plan | None = None,
    driver_log_tail: str = "",
    waiting: bool = False,
) -> None:
    """Check that `cause` holds every part, and write the snapshot when RLPLACE_DIAGNOSIS_SNAPSHOTS is set."""
    for part in parts:
        assert part in cause.message, (part, cause)
    assert len(cause.message) <= MAX_LINE_CHARS
    folder = os.environ.get("RLPLACE_DIAGNOSIS_SNAPSHOTS")
    if not folder:
        return
    snapshot = {
        "kind": kind,
        "capturedFrom": captured_from,
        "now": (now or dt.datetime.now(dt.UTC)).isoformat(),
        "pods": [trim_pod(p) for p in pods],
        "events": [trim_event(e) for e in events],
        "nodes": {name: trim_node(node) for name, node in (nodes or {}).items()},
        "plan": plan.to_dict() if plan is not None else None,
        "driverLogTail": driver_log_tail,
        "expect": {"reason": cause.reason, "permanent": cause.permanent, "waiting": waiting, "messageContains": parts},
    }
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{case}.json").write_text(json.dumps(snapshot, indent=1) + "\n")


def events_about(kubeconfig: str, namespace: str, *names: str) -> list[dict]:
    return [e for e in get_json(kubeconfig, "events", "-n", namespace) if e["involvedObject"].get("name") in names]


# -- the namespace and the pods ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def restricted(k8s: client.ApiClient, kubeconfig: str) -> Iterator[str]:
    """A namespace that enforces the restricted Pod Security Standard, shared by the module's cases so that
    their grace periods run out together."""
    core = client.CoreV1Api(k8s)
    name = f"e2e-psa-{uuid.uuid4().hex[:6]}"
    labels = {"rlplace.io/e2e": "true", "pod-security.kubernetes.io/enforce": "restricted"}
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    wait_for(lambda: core.list_namespaced_service_account(name).items, 30, f"ServiceAccount {name}/default")
    try:
        yield name
    finally:
        delete_namespace_freeing_nodes(k8s, name)


@pytest.fixture(scope="module")
def real_node(k8s: client.ApiClient) -> str:
    nodes = client.CoreV1Api(k8s).list_node(label_selector=f"{REAL_NODE_LABEL}=true").items
    if not nodes:
        pytest.skip(f"no node labelled {REAL_NODE_LABEL}=true: pulling and running images needs a real node")
    return sorted(n.metadata.name for n in nodes)[0]


def ray_like_pod(name: str, node: str, image: str, **container: object) -> dict:
    """A pod shaped like a worker of RayCluster 'diag' (its labels, pinned by name), restricted-compliant."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"ray.io/cluster": "diag", "ray.io/node-type": "worker", "ray.io/group": "node-0"},
        },
        "spec": {
            "restartPolicy": container.pop("restartPolicy", "Always"),
            "terminationGracePeriodSeconds": 2,
            "securityContext": POD_SECURITY,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "ray-worker",
                    "image": image,
                    "imagePullPolicy": container.pop("imagePullPolicy", "IfNotPresent"),
                    "securityContext": CONTAINER_SECURITY,
                    "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}},
                    **container,
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def failing_pods(kubeconfig: str, restricted: str, real_node: str) -> dict[str, str]:
    """Every failing pod at once (their grace periods run together): case -> pod name."""
    ray_image = images_env()["RAY_RLPLACE_IMAGE"]
    pods = {
        "image-pull": ray_like_pod("diag-node-0-worker-pull", real_node, "localhost/rlplace/no-such-image:1"),
        "invalid-image": ray_like_pod("diag-node-0-worker-badname", real_node, "localhost/rlplace/Bad_Name:x"),
        "crash-loop": ray_like_pod(
            "diag-node-0-worker-crash",
            real_node,
            ray_image,
            imagePullPolicy="Never",
            command=["sh", "-c", "echo cannot start >&2; exit 3"],
        ),
        "oom": ray_like_pod(
            "diag-node-0-worker-oom",
            real_node,
            ray_image,
            imagePullPolicy="Never",
            restartPolicy="Never",
            # Bytes really written (a zeroed bytearray would stay unmapped and never count against the limit).
            command=["python3", "-c", "b = b'x' * (512 * 1024 * 1024); print(len(b))"],
        ),
        "unschedulable": ray_like_pod(
            "diag-node-0-worker-nofit", "a800-1", ray_image, resources={"limits": {"nvidia.com/gpu": "100"}}
        ),
    }
    kubectl(
        kubeconfig,
        "apply",
        "-n",
        restricted,
        "-f",
        "-",
        stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": list(pods.values())}),
    )
    return {case: pod["metadata"]["name"] for case, pod in pods.items()}


def diagnose_pod(kubeconfig: str, namespace: str, name: str) -> tuple[Cause | None, list[dict], list[dict]]:
    pods = [p for p in get_json(kubeconfig, "pods", "-n", namespace) if p["metadata"]["name"] == name]
    events = events_about(kubeconfig, namespace, name)
    return provisioning_failure(pods, events, dt.datetime.now(dt.UTC)), pods, events


def wait_diagnosed(kubeconfig: str, namespace: str, name: str, timeout: float) -> tuple[Cause, list, list]:
    """The first diagnosis that the job acts on (a cause only said while it may pass is skipped)."""
    return wait_for(
        lambda: (found := diagnose_pod(kubeconfig, namespace, name))[0] is not None and not found[0].waiting and found,
        timeout,
        f"a diagnosis of pod {name}",
        interval=1,
    )


# -- refused by Pod Security ----------------------------------------------------------------------------------


def test_a_raycluster_refused_by_pod_security_is_named_permanent(kubeconfig: str, restricted: str) -> None:
    """KubeRay's own pods of a RayCluster without rlplace's securityContext: the API refuses them, KubeRay says
    so in FailedToCreateHeadPod events, and the diagnosis quotes Pod Security."""
    spec = RLJobSpec.model_validate(
        {"nodeGroups": ["a800"], "componentPlacement": [{"components": "actor", "placement": "0-7"}]}
    )
    body = build_raycluster("psa", spec, [WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8})])
    body["metadata"] = {"name": "psa"}  # not an rlplace job's: the operator leaves it alone
    for group in [body["spec"]["headGroupSpec"], *body["spec"]["workerGroupSpecs"]]:
        group["template"]["spec"].pop("securityContext")
        group["template"]["metadata"] = {}
        for container in group["template"]["spec"]["containers"]:
            container.pop("securityContext")
    kubectl(kubeconfig, "apply", "-n", restricted, "-f", "-", stdin=json.dumps(body))

    def refused() -> tuple[Cause, list[dict], list[dict]] | None:
        events = [
            e
            for e in get_json(kubeconfig, "events", "-n", restricted)
            if e["involvedObject"]["kind"] == "RayCluster" and e["involvedObject"]["name"] == "psa"
        ]
        pods = get_json(kubeconfig, "pods", "-n", restricted, "-l", "ray.io/cluster=psa")
        # KubeRay makes the workers only once the head exists: the head's refusal is all there is.
        if "FailedToCreateHeadPod" not in {e["reason"] for e in events}:
            return None
        cause = provisioning_failure(pods, events, dt.datetime.now(dt.UTC))
        return (cause, pods, events) if cause else None

    cause, pods, events = wait_for(refused, 60, "KubeRay's refused-pod events", interval=1)
    assert not pods
    assert (cause.reason, cause.permanent) == (diagnosis.POD_SECURITY_REFUSED, True), cause
    parts = ["the Ray head pod of RayCluster 'psa' refused by Pod Security", 'violates PodSecurity "restricted']
    record(
        "raycluster-refused-by-pod-security",
        "provisioning",
        "KubeRay v1.6.1 RayCluster in a restricted namespace, pods without a securityContext",
        cause,
        parts,
        pods=pods,
        events=events,
    )
    kubectl(kubeconfig, "delete", "-n", restricted, "raycluster", "psa", "--wait=false")


def test_a_submitter_job_refused_by_pod_security_is_named_permanent(kubeconfig: str, restricted: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "diag-submit"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"rlplace.io/gpu-type": "a800"},
                    "containers": [{"name": "ray-job-submitter", "image": images_env()["RAY_RLPLACE_IMAGE"]}],
                }
            },
        },
    }
    kubectl(kubeconfig, "apply", "-n", restricted, "-f", "-", stdin=json.dumps(job))

    def refused() -> tuple[Cause, list[dict]] | None:
        events = events_about(kubeconfig, restricted, "diag-submit")
        cause = provisioning_failure([], events, dt.datetime.now(dt.UTC))
        return (cause, events) if cause else None

    cause, events = wait_for(refused, 60, "the Job controller's FailedCreate event", interval=1)
    assert (cause.reason, cause.permanent) == (diagnosis.POD_SECURITY_REFUSED, True), cause
    parts = ["the submitter pod of Job 'diag-submit' refused by Pod Security", "allowPrivilegeEscalation != false"]
    record(
        "submitter-job-refused-by-pod-security",
        "provisioning",
        "batch/v1 Job (as KubeRay's K8sJobMode submitter) with a root pod in a restricted namespace",
        cause,
        parts,
        pods=[],
        events=events,
    )
    kubectl(kubeconfig, "delete", "-n", restricted, "job", "diag-submit", "--wait=false")


# -- pods that cannot start -------------------------------------------------------------------------------


def test_an_invalid_image_name_is_named_permanent_at_once(
    kubeconfig: str, restricted: str, failing_pods: dict[str, str]
) -> None:
    name = failing_pods["invalid-image"]
    cause, pods, events = wait_diagnosed(kubeconfig, restricted, name, 60)
    assert (cause.reason, cause.permanent) == (diagnosis.INVALID_IMAGE, True), cause
    parts = [f"worker pod '{name}' (node rank 0, node '", "invalid image name 'localhost/rlplace/Bad_Name:x'"]
    record(
        "invalid-image-name",
        "provisioning",
        "pod on a real node (kubelet + containerd) with an invalid image reference",
        cause,
        parts,
        pods=pods,
        events=events,
    )


def test_an_unpullable_image_is_named_after_its_grace(
    kubeconfig: str, restricted: str, failing_pods: dict[str, str]
) -> None:
    name = failing_pods["image-pull"]
    cause, pods, events = wait_diagnosed(kubeconfig, restricted, name, 90)
    assert (cause.reason, cause.permanent) == (diagnosis.IMAGE_PULL_FAILED, False), cause
    first = min(dt.datetime.fromisoformat(e["firstTimestamp"]) for e in events if e["reason"] == "Failed")
    assert dt.datetime.now(dt.UTC) - first >= diagnosis.IMAGE_PULL_GRACE
    parts = [f"worker pod '{name}'", "cannot pull its image:", "localhost/rlplace/no-such-image:1"]
    record(
        "image-pull-failed",
        "provisioning",
        "pod on a real node pulling an image no registry has",
        cause,
        parts,
        pods=pods,
        events=events,
    )


def test_a_container_crashing_at_start_is_named_with_its_exit_code(
    kubeconfig: str, restricted: str, failing_pods: dict[str, str]
) -> None:
    name = failing_pods["crash-loop"]
    cause, pods, events = wait_diagnosed(kubeconfig, restricted, name, 90)
    assert (cause.reason, cause.permanent) == (diagnosis.CRASH_LOOP_BACK_OFF, False), cause
    parts = [f"worker pod '{name}'", "container 'ray-worker' crashes at start (exit code 3 (Error)"]
    record(
        "crash-loop-back-off",
        "provisioning",
        "pod on a real node whose container exits 3 at once",
        cause,
        parts,
        pods=pods,
        events=events,
    )


def test_a_pod_that_does_not_fit_its_pinned_node_is_named_unschedulable(
    kubeconfig: str, restricted: str, failing_pods: dict[str, str]
) -> None:
    name = failing_pods["unschedulable"]
    cause, pods, events = wait_diagnosed(kubeconfig, restricted, name, 120)
    assert (cause.reason, cause.permanent) == (diagnosis.UNSCHEDULABLE, False), cause
    parts = [f"worker pod '{name}' (node rank 0, node 'a800-1') unschedulable:", "Insufficient nvidia.com/gpu"]
    record(
        "unschedulable-on-pinned-node",
        "provisioning",
        "pod pinned to kwok node a800-1 asking for more GPUs than it has",
        cause,
        parts,
        pods=pods,
        events=events,
    )


# -- pods bound but not started (issue 31): missing objects, claims, host paths, init steps --------------------

#: A host directory no test makes (the hostPath case): every real node is a network namespace of this machine.
NO_SUCH_HOST_DIR = "/var/tmp/rlplace-e2e-no-such-directory"


@pytest.fixture(scope="module")
def plain(k8s: client.ApiClient) -> Iterator[str]:
    """A namespace without Pod Security enforcement (a hostPath volume is refused under `restricted`)."""
    core = client.CoreV1Api(k8s)
    name = f"e2e-start-{uuid.uuid4().hex[:6]}"
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"rlplace.io/e2e": "true"}))
    )
    wait_for(lambda: core.list_namespaced_service_account(name).items, 30, f"ServiceAccount {name}/default")
    try:
        yield name
    finally:
        delete_namespace_freeing_nodes(k8s, name)


def _with_volume(pod: dict, volume: dict) -> dict:
    pod["spec"]["volumes"] = [volume]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": volume["name"], "mountPath": "/data"}]
    return pod


@pytest.fixture(scope="module")
def unstartable_pods(kubeconfig: str, plain: str, real_node: str) -> dict[str, str]:
    """Pods that are bound to a real node (or pinned to it) and cannot start, all made at once: case -> name."""
    image = images_env()["RAY_RLPLACE_IMAGE"]

    def sleeper(name: str, **container: object) -> dict:
        return ray_like_pod(name, real_node, image, imagePullPolicy="Never", command=["sleep", "600"], **container)

    unbound_claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "diag-unbound"},
        # No class: no provisioner makes a volume, and no PersistentVolume matches; it stays Pending.
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    init = sleeper("diag-node-0-worker-init")
    init["spec"]["initContainers"] = [
        {
            "name": "fetch-data",
            "image": image,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", "echo no data at s3://bucket >&2; exit 2"],
            "securityContext": CONTAINER_SECURITY,
            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
        }
    ]
    pods = {
        "secret-volume": _with_volume(
            sleeper("diag-node-0-worker-secret"), {"name": "creds", "secret": {"secretName": "diag-no-such-secret"}}
        ),
        "configmap-volume": _with_volume(
            sleeper("diag-node-0-worker-config"), {"name": "cfg", "configMap": {"name": "diag-no-such-config"}}
        ),
        "envfrom-secret": sleeper("diag-node-0-worker-envfrom", envFrom=[{"secretRef": {"name": "diag-no-such-env"}}]),
        "missing-claim": _with_volume(
            sleeper("diag-node-0-worker-claim"),
            {"name": "data", "persistentVolumeClaim": {"claimName": "diag-no-such-claim"}},
        ),
        "unbound-claim": _with_volume(
            sleeper("diag-node-0-worker-unbound"),
            {"name": "data", "persistentVolumeClaim": {"claimName": "diag-unbound"}},
        ),
        "host-path": _with_volume(
            sleeper("diag-node-0-worker-hostpath"),
            {"name": "ckpt", "hostPath": {"path": NO_SUCH_HOST_DIR, "type": "Directory"}},
        ),
        "init-fails": init,
    }
    items = [unbound_claim, *pods.values()]
    kubectl(
        kubeconfig,
        "apply",
        "-n",
        plain,
        "-f",
        "-",
        stdin=json.dumps({"kind": "List", "apiVersion": "v1", "items": items}),
    )
    return {case: pod["metadata"]["name"] for case, pod in pods.items()}


def diagnose_unstarted(
    kubeconfig: str, namespace: str, name: str, reason: str, timeout: float
) -> tuple[Cause | None, list, list]:
    """The diagnosis of pod `name` (with the one-node plan, so its processes are named) once it gives `reason`,
    or the last one seen when it never does within `timeout` (before the kubelet's first warning, a pod is
    only said to be not started)."""
    last: tuple[Cause | None, list, list] = (None, [], [])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = [p for p in get_json(kubeconfig, "pods", "-n", namespace) if p["metadata"]["name"] == name]
        events = events_about(kubeconfig, namespace, name)
        last = (provisioning_failure(pods, events, dt.datetime.now(dt.UTC), plan=one_node_plan()), pods, events)
        if last[0] is not None and last[0].reason == reason:
            break
        time.sleep(1)
    return last


@pytest.mark.parametrize(
    ("case", "reason", "permanent", "named"),
    [
        ("secret-volume", diagnosis.SECRET_NOT_FOUND, True, "Secret 'diag-no-such-secret' not found"),
        ("configmap-volume", diagnosis.CONFIGMAP_NOT_FOUND, True, "ConfigMap 'diag-no-such-config' not found"),
        ("envfrom-secret", diagnosis.SECRET_NOT_FOUND, True, "Secret 'diag-no-such-env' not found"),
        ("missing-claim", diagnosis.CLAIM_NOT_FOUND, True, "PersistentVolumeClaim 'diag-no-such-claim' not found"),
        (
            "host-path",
            diagnosis.HOST_PATH_MISSING,
            True,
            f"host path '{NO_SUCH_HOST_DIR}' is missing or not a directory",
        ),
        ("init-fails", diagnosis.INIT_CONTAINER_FAILED, False, "init container 'fetch-data' failed (exit code 2"),
        ("unbound-claim", diagnosis.CLAIM_NOT_BOUND, False, "waits for its volume claim"),
    ],
)
def test_a_pod_that_cannot_start_is_named_with_what_it_lacks(
    kubeconfig: str,
    plain: str,
    real_node: str,
    unstartable_pods: dict[str, str],
    case: str,
    reason: str,
    permanent: bool,
    named: str,
) -> None:
    """Each pod is explained from what the kubelet and the scheduler said, naming the pod, its node, the plan's
    processes on it and the object it lacks; a claim that is only unbound is waited for (said, not acted on)."""
    name = unstartable_pods[case]
    cause, pods, events = diagnose_unstarted(kubeconfig, plain, name, reason, 60)
    assert cause is not None and (cause.reason, cause.permanent) == (reason, permanent), (cause, pods, events)
    assert cause.waiting is (case == "unbound-claim"), cause
    parts = [named, f"pod '{name}' (node rank 0, node '{real_node}', actor ranks 0-3)"]
    record(
        f"not-started-{case}",
        "provisioning",
        f"pod pinned to a real node that cannot start ({case})",
        cause,
        parts,
        pods=pods,
        events=events,
        plan=one_node_plan(),
        waiting=cause.waiting,
    )


# -- lost processes --------------------------------------------------------------------------------------


def one_node_plan() -> Plan:
    return build_plan(component_placement({"cluster": {"num_nodes": 1, "component_placement": {"actor": "0-3"}}}))


def test_a_deleted_pod_is_named_from_the_kubelets_events(kubeconfig: str, restricted: str, real_node: str) -> None:
    pod = ray_like_pod(
        "diag-node-0-worker-deleted",
        real_node,
        images_env()["RAY_RLPLACE_IMAGE"],
        imagePullPolicy="Never",
        command=["sleep", "600"],
    )
    kubectl(kubeconfig, "apply", "-n", restricted, "-f", "-", stdin=json.dumps(pod))
    name = pod["metadata"]["name"]
    wait_for(
        lambda: any(
            p["status"].get("phase") == "Running"
            for p in get_json(kubeconfig, "pods", "-n", restricted)
            if p["metadata"]["name"] == name
        ),
        90,
        f"{name} Running",
        interval=1,
    )
    kubectl(kubeconfig, "delete", "-n", restricted, "pod", name, "--wait=true", "--timeout=60s")
    events = wait_for(
        lambda: (
            [e for e in events_about(kubeconfig, restricted, name) if e["reason"] == "Killing"]
            and events_about(kubeconfig, restricted, name)
        ),
        30,
        "the kubelet's Killing event",
        interval=1,
    )
    survivor = ray_like_pod("diag-head-alive", real_node, "unused")
    survivor["metadata"]["labels"]["ray.io/node-type"] = "head"
    cause = lost_process([survivor], events, {}, one_node_plan(), "")
    assert cause is not None and (cause.reason, cause.permanent) == (diagnosis.POD_DELETED, False), cause
    parts = [f"worker pod '{name}' (node rank 0, node '{real_node}', actor ranks 0-3) deleted"]
    record(
        "worker-pod-deleted",
        "lost",
        "pod on a real node deleted; the kubelet's events outlive it",
        cause,
        parts,
        pods=[survivor],
        events=events,
        plan=one_node_plan(),
    )


def test_an_oom_killed_container_is_named_with_its_memory_limit(
    kubeconfig: str, restricted: str, failing_pods: dict[str, str]
) -> None:
    name = failing_pods["oom"]

    def terminated() -> list[dict]:
        pods = [p for p in get_json(kubeconfig, "pods", "-n", restricted) if p["metadata"]["name"] == name]
        statuses = [s for p in pods for s in p["status"].get("containerStatuses") or []]
        return pods if any("terminated" in s["state"] for s in statuses) else []

    pods = wait_for(terminated, 120, f"{name} terminated", interval=1)
    events = events_about(kubeconfig, restricted, name)
    cause = lost_process(pods, events, {}, one_node_plan(), "")
    assert cause is not None and (cause.reason, cause.permanent) == (diagnosis.OOM_KILLED, False), (cause, pods)
    parts = [
        f"worker pod '{name}' (node rank 0, node '",
        "actor ranks 0-3) container 'ray-worker' OOMKilled (memory limit 128Mi)",
    ]
    record(
        "worker-oom-killed",
        "lost",
        "pod on a real node writing 512 MiB under a 128Mi limit",
        cause,
        parts,
        pods=pods,
        events=events,
        plan=one_node_plan(),
    )
