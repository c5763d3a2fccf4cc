"""rlplace in namespaces that enforce the `restricted` Pod Security Standard (the default posture of many shared
clusters): the example jobs' pods (Ray head, workers, KubeRay's submitter) are admitted and the jobs run to
Succeeded on the real nodes (test_run.py runs its example jobs in such a namespace, through `restrict` and
`restricted_pods` here); the chart's operator Deployment passes the same standard.

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


def restrict(kubeconfig: str, namespace: str) -> None:
    """Make `namespace` enforce (and warn about) the restricted standard."""
    kubectl(kubeconfig, "label", "ns", namespace, f"{ENFORCE}=restricted", f"{WARN}=restricted", "--overwrite")


def restricted_pods(kubeconfig: str, namespace: str) -> list[dict]:
    """The job's head, worker and submitter pods once admitted in the restricted namespace, each shown to run as
    non-root without privilege escalation (test_run.py's example jobs run in such a namespace)."""

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
    return pods


def head_user(kubeconfig: str, namespace: str, pods: list[dict]) -> str:
    """The uid the head's processes run as (the images' non-root user)."""
    head = next(p["metadata"]["name"] for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head")
    return kubectl(kubeconfig, "exec", "-n", namespace, head, "-c", "ray-head", "--", "id", "-u").strip()


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
