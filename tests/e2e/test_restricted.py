"""rlplace in namespaces that enforce the `restricted` Pod Security Standard (the default posture of many shared
clusters): the example job's pods (Ray head, workers, KubeRay's submitter) are admitted and the job runs to
Succeeded on the real nodes; the chart's operator Deployment passes the same standard.

The local cluster's API server runs the PodSecurity admission plugin (on by default since Kubernetes 1.25;
e2e/cluster/up.sh leaves the default plugins on): the first test shows that it refuses a plain pod here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from e2e_cluster import wait_for
from rlplace_fixtures import CHART, Jobs, images_env, kubectl, run_tool

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
REAL_NODE_LABEL = "rlplace.io/real-node"
ENFORCE = "pod-security.kubernetes.io/enforce"
WARN = "pod-security.kubernetes.io/warn"


@pytest.fixture
def restricted_jobs(k8s: client.ApiClient, kubeconfig: str, jobs: Jobs) -> Iterator[Jobs]:
    """RLJobs in a fresh namespace that enforces (and warns about) the restricted standard."""
    kubectl(kubeconfig, "label", "ns", jobs.namespace, f"{ENFORCE}=restricted", f"{WARN}=restricted", "--overwrite")
    yield jobs


def server_dry_run(kubeconfig: str, namespace: str, body: dict) -> subprocess.CompletedProcess[str]:
    """`kubectl apply --dry-run=server` of `body` in `namespace`: what admission (Pod Security) says of it."""
    return run_tool(
        "kubectl",
        kubeconfig,
        "apply",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=json.dumps(body),
        check=False,
    )


def test_the_namespace_refuses_a_pod_that_is_not_restricted(kubeconfig: str, restricted_jobs: Jobs) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "c", "image": images_env()["RAY_IMAGE"]}]},
    }
    result = server_dry_run(kubeconfig, restricted_jobs.namespace, pod)
    assert result.returncode != 0 and 'violates PodSecurity "restricted:latest"' in result.stderr, result.stderr


@pytest.mark.parametrize("name", ["rljob-collocated-run.yaml", "rljob-heterogeneous-run.yaml"])
def test_the_example_job_runs_to_succeeded_in_a_restricted_namespace(
    k8s: client.ApiClient, kubeconfig: str, restricted_jobs: Jobs, name: str
) -> None:
    if not client.CoreV1Api(k8s).list_node(label_selector=f"{REAL_NODE_LABEL}=true").items:
        pytest.skip(f"no node labelled {REAL_NODE_LABEL}=true: the driver needs real nodes")
    kubectl(kubeconfig, "apply", "-f", str(REPO / "examples" / "nodegroups-real.yaml"))
    (body,) = [doc for doc in yaml.safe_load_all((REPO / "examples" / name).read_text()) if doc]
    job = body["metadata"]["name"]
    body["spec"]["run"]["ttlSecondsAfterFinished"] = 120  # keep the pods a while to look at them
    restricted_jobs.create(body)
    namespace = restricted_jobs.namespace

    def pods_admitted() -> list[dict]:
        pods = json.loads(kubectl(kubeconfig, "get", "pods", "-n", namespace, "-o", "json"))["items"]
        roles = {p["metadata"]["labels"].get("ray.io/node-type") or "submitter" for p in pods}
        return pods if {"head", "worker", "submitter"} <= roles else []

    pods = wait_for(pods_admitted, 300, "head, worker and submitter pods admitted", interval=2)
    for pod in pods:
        spec = pod["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, pod["metadata"]["name"]
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, container["name"]
    status = restricted_jobs.wait_phase(job, "Succeeded", timeout=420).get("status") or {}
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["BindingVerified"]["status"] == "True", conditions["BindingVerified"]
    # Inside, the processes ran as the images' non-root user.
    head = next(p["metadata"]["name"] for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head")
    uids = kubectl(kubeconfig, "exec", "-n", namespace, head, "-c", "ray-head", "--", "id", "-u")
    assert uids.strip() == "1000"


def test_the_charts_operator_deployment_is_restricted(kubeconfig: str, restricted_jobs: Jobs) -> None:
    """Server-side dry run of the chart's Deployment in the restricted namespace: Pod Security warns about a
    workload whose pods it would refuse; it says nothing here."""
    # `helm template` renders offline: it is told the cluster's Kubernetes version (the chart requires >= 1.30).
    version = ("--kube-version", "v1.35.0")
    manifest = run_tool(
        "helm", kubeconfig, "template", "rlplace", str(CHART), *version, "-n", restricted_jobs.namespace
    )
    manifest = manifest.stdout
    (deployment,) = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Deployment"]
    result = server_dry_run(kubeconfig, restricted_jobs.namespace, deployment)
    assert result.returncode == 0, result.stderr
    assert "PodSecurity" not in result.stderr, result.stderr
